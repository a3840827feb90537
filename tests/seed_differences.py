"""Where our MaxText command lines deliberately differ from the seeds' (the tutorials), and why.

The seed-equivalence tests compare every key=value and --flag of every step with the seed's command and
accept a difference only when it is listed here; an entry that no longer matches a difference fails too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes import STEPS, Step


@dataclass(frozen=True)
class Difference:
    key: str  # an override key (model_name) or a flag (--hf_model_path)
    why: str
    steps: tuple[Step, ...] = STEPS
    recipes: tuple[str, ...] = ()  # empty: every recipe

    def covers(self, recipe: str, step: Step, key: str) -> bool:
        return key == self.key and step in self.steps and (not self.recipes or recipe in self.recipes)


VM = ("llama31-v6e8",)
GKE = ("qwen3-v6e32", "gemma4-v6e64")

DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "hf_access_token",
        "The token never appears in an argument list (visible in `ps`, pod specs and logs). MaxText reads "
        "HF_TOKEN from the environment, which comes from a Kubernetes Secret (GKE) or Secret Manager (VM).",
    ),
    Difference(
        "base_output_directory",
        "Seed 002 writes to /dev/shm, which a reboot or maintenance event erases; we write to the bucket paths "
        "that `tpu-rl` verifies, so a rebooted VM resumes and the export needs no copy.",
        recipes=VM,
    ),
    Difference(
        "base_output_directory",
        "The seeds convert into max-text-format/ and export into hf-trained/, one of each per bucket; we "
        "convert into max-text-format/<version>-<scan|unscanned>-<hash of what conversion depends on>/, "
        "which every run of that conversion shares, and export each run into hf-trained/<run>/, so a second "
        "run neither converts again nor overwrites the first run's model.",
        steps=("convert", "export"),
        recipes=GKE,
    ),
    Difference(
        "load_parameters_path",
        "Follows base_output_directory: each step reads exactly the bucket path the previous step wrote.",
        steps=("train", "export"),
    ),
    Difference(
        "run_name",
        "The seeds fix one run (`rl`; seed 002 names it after the clock). Each tpu-rl run is named after a "
        "hash of the settings that change the trained weights, or by --run, so a changed setting trains a new "
        "run and the same settings resume the same checkpoints (train_rl restores the latest under its run "
        "directory), and the export path stays derivable.",
        steps=("train",),
    ),
    Difference(
        "--hf_model_path",
        "Seed 002 relies on MaxText's default repo for the model name; naming the recipe's repo explicitly "
        "makes the source visible and keeps it right if the default mapping changes.",
        steps=("convert",),
        recipes=VM,
    ),
    Difference(
        "--hf_model_path",
        "to_huggingface accepts --hf_model_path from MaxText 0.2.4; without it the export bundles the "
        "tokenizer of MaxText's default repo (Qwen3-30B-A3B-Thinking-2507 for qwen3-30b-a3b), not the "
        "Instruct model we trained.",
        steps=("export",),
        recipes=GKE,
    ),
    Difference(
        "chips_per_vm",
        "Derived from the machine type instead of left to rl.yml's default of 4; on ct6e-standard-4t that is "
        "the same value, so behaviour is unchanged, and a different machine type cannot silently disagree.",
        steps=("train",),
        recipes=GKE,
    ),
    Difference(
        "scan_layers",
        "Training states the recipe's scan_layers, the value convert and export use, instead of relying on "
        "the config default (True, the same value).",
        steps=("train",),
        recipes=("qwen3-v6e32", "llama31-v6e8"),
    ),
    Difference(
        "checkpoint_period",
        "The seeds keep rl.yml's 50, so a 50-step run checkpoints only at its end. The recipe's period "
        "(10) bounds what a preempted spot or flex-start run loses: train_rl restores the latest "
        "checkpoint under its run directory when it starts again.",
        steps=("train",),
    ),
    Difference(
        "model_name",
        "Seed 002 exports as llama3.1-8b, for which to_huggingface bundles the tokenizer and config of the "
        "base model meta-llama/Llama-3.1-8B (HF_IDS in maxtext/utils/globals.py, 0.2.3). We trained the "
        "Instruct model, and 0.2.3's export tables have llama3.1-8b-Instruct (HF_IDS, "
        "checkpoint_conversion/utils/param_mapping.py, hf_model_configs.py), so the export carries the "
        "Instruct tokenizer and its chat template.",
        steps=("export",),
        recipes=VM,
    ),
    Difference(
        "learning_rate_schedule_steps",
        "Seed 002 leaves it at -1, which MaxText 0.2.3 turns into `steps`, base.yml's 150_001 "
        "(configs/types.py L2514-2516); its utils_rl.get_optimizer (L535-583) then warms up over "
        "int(0.1 x 150_001) = 15,000 steps, so the 50-step run ends at 3e-6 x 49 / 15,000, about 1e-8. We pass "
        "the run's train steps (rl.learning_rate_schedule_ratio 1: warmup, then cosine decay to 0 at the last "
        "step), what 0.2.4's get_optimizer does when the value equals `steps` (utils_rl.py L603-609); "
        "--set num_batches=N moves it along, --set learning_rate_schedule_steps=N sets it.",
        steps=("train",),
        recipes=VM,
    ),
    Difference(
        "learning_rate_schedule_steps",
        "Seed 001 leaves it unset, and MaxText 0.2.4's get_optimizer then uses the run's train steps "
        "(utils_rl.py L603-609). We pass that same length (rl.learning_rate_schedule_ratio 1), so the schedule "
        "is the seed's, stays visible in the manifest, and follows --set num_batches=N under either release "
        "(0.2.3 would otherwise use 150_001: configs/types.py L2514-2516).",
        steps=("train",),
        recipes=("gemma4-v6e64",),
    ),
    Difference(
        "tokenizer_path",
        "Stated explicitly as the recipe's tokenizer (the same repo MaxText's default mapping names).",
        steps=("train",),
        recipes=VM,
    ),
    Difference(
        "num_test_batches",
        "Seed 000 evaluates nothing (num_test_batches=0), so a run could be judged only by its training "
        "reward, which rises when the model learns the format without the maths. The recipe measures held-out "
        "gsm8k accuracy on 2 batches of 32 test questions before training, every 20 steps and after it, at "
        "most 14% of the train step's completions (recipes/runs/evaluation.py).",
        steps=("train",),
        recipes=("qwen3-v6e32",),
    ),
    Difference(
        "eval_batch_size",
        "The evaluation's 64 questions in batches of 32, as many as a train step's rollout (batch_size 8 x "
        "4 generations), instead of batches of batch_size=8: the same questions in a quarter of the "
        "generation calls.",
        steps=("train",),
        recipes=GKE,
    ),
    Difference(
        "eval_interval",
        "See num_test_batches: an evaluation every 20 steps (rl.yml's 10 would make 7 of them, 22% of the "
        "train step's completions), so accuracy has a curve: steps 0, 20, 40 and the last.",
        steps=("train",),
        recipes=("qwen3-v6e32",),
    ),
    Difference(
        "eval_interval",
        "Seed 001 keeps rl.yml's 5 batches of batch_size=8 every 10 steps, 7 evaluations of 40 questions: "
        "about a quarter of the train step's completions. The recipe evaluates 64 questions before and after "
        "training only (eval_interval=0), at most 14% (recipes/runs/evaluation.py).",
        steps=("train",),
        recipes=("gemma4-v6e64",),
    ),
    Difference(
        "num_test_batches",
        "See eval_interval: 2 batches of eval_batch_size=32, 64 questions, instead of rl.yml's 5 of 8.",
        steps=("train",),
        recipes=("gemma4-v6e64",),
    ),
    Difference(
        "eval_interval",
        "Seed 002 evaluates its 10 questions before, after and (rl.yml's eval_interval=10) at 5 steps in "
        "between, 41% of the train step's completions; the recipe evaluates before and after only, at most "
        "17% (recipes/runs/evaluation.py).",
        steps=("train",),
        recipes=VM,
    ),
    Difference(
        "hbm_utilization_vllm",
        "Seed 002 keeps rl.yml's 0.72: vLLM shares the 8 chips with the trainer and fills 72% of each, and the "
        "fit check's account puts the train step beside it at 31.7 GiB, more than the chip's 31.2; at 0.6 it "
        "peaks at 27.9 GiB, 11% free, and vLLM keeps 13.1 GiB of KV cache a chip (docs/fit.md, \"Changed to "
        "fit\").",
        steps=("train",),
        recipes=VM,
    ),
)


def explain(recipe: str, step: Step, key: str) -> Difference | None:
    return next((entry for entry in DIFFERENCES if entry.covers(recipe, step, key)), None)


def differences_table() -> str:
    """The table of deliberate differences in docs/seed-differences.md (a test keeps it in sync)."""
    rows = ["| argument | steps | recipes | why |", "| --- | --- | --- | --- |"]
    for entry in DIFFERENCES:
        recipes = ", ".join(entry.recipes) or "all"
        rows.append(f"| `{entry.key}` | {', '.join(entry.steps)} | {recipes} | {entry.why} |")
    return "\n".join(rows)


# --- what the seeds do inside the container that we deliberately do not --------------------------------
@dataclass(frozen=True)
class NotCarriedOver:
    what: str  # the seed's step, as a short name
    marker: str  # text that identifies the step in the seed's command
    recipes: tuple[str, ...]
    why: str  # with the upstream evidence


SEED_STEPS_NOT_CARRIED_OVER: tuple[NotCarriedOver, ...] = (
    NotCarriedOver(
        "tunix-reshard-chunk-size source patch",
        "reshard_chunk_size",
        ("qwen3-v6e32",),
        "Seed 000 edits tunix's vllm_sampler.py to pin reshard_chunk_size to 4. The recipe's "
        "rl.reshard_chunk_size=4 already reaches the sampler: MaxText 0.2.4 passes it from train_rl.py "
        "through integration/vllm/maxtext_vllm_rollout.py to tunix/generate/vllm_sampler.py (tunix "
        "c4ec573d), and 0.2.3 through tunix's own tunix/rl/rollout/vllm_rollout.py (tunix 683256db), so "
        "the edit changes nothing and would break on the first tunix release that renames the line.",
    ),
    NotCarriedOver(
        "memory.max cgroup write",
        "/sys/fs/cgroup/memory.max",
        ("qwen3-v6e32",),
        "Seed 000 writes 190G to /sys/fs/cgroup/memory.max; in an unprivileged container the cgroup "
        "filesystem is read-only, the write fails and `|| true` hides it, so nothing was capped. The "
        "recipe's rl.memory_max (190Gi, what the kernel reads 190G as) is the train_rl container's "
        "Kubernetes memory limit instead, which the kubelet enforces (jobs/train.py workload_resources). So "
        "the seed never ran under this limit: its train_rl was bounded only by the node, and a run whose host "
        "memory passes 190Gi is OOM-killed here (exit 137) where the seed's went on. Raise rl.memory_max in the recipe if "
        "that happens.",
    ),
    NotCarriedOver(
        "convert and export on the TPU slice",
        "--compute-type",
        GKE,
        "Seeds 000 and 001 run to_maxtext and to_huggingface with `gcluster job submit --compute-type "
        "ct6e-standard-4t --topology ...`, on the TPU slice's hosts (the pod of index 0 converts, the others exit at once). The "
        "recipes run both on one pod of the CPU pool instead, on the recipe's cpu_machine_type "
        "(n4-standard-64 for qwen3-v6e32, c4d-standard-96 for gemma4-v6e64), so no slice is billed while "
        "they run (docs/capacity.md). These machines have fewer cores and less memory than a v6e host, so "
        "conversion takes longer; its pod requests three quarters of the node (jobs/k8s.py "
        "CPU_POOL_POD_SHARE).",
    ),
    NotCarriedOver(
        "system upgrade",
        "apt upgrade -y --fix-missing",
        VM,
        "Seed 002 upgrades every system package before installing. The startup script runs at every boot "
        "of an unattended VM, where an upgrade of the accelerator image's kernel and TPU driver packages "
        "can change what the recipe was tested on and needs a reboot to apply; the script installs only "
        "the packages it needs (`apt-get install` of the seed's build-essential, cmake and ninja-build after "
        "`apt-get update`), and the image family is the seed's.",
    ),
)


# --- what we do inside the container that the seeds do not ------------------------------------------
@dataclass(frozen=True)
class AddedStep:
    what: str
    steps: tuple[Step, ...]
    recipes: tuple[str, ...]
    why: str  # with the evidence


SEED_STEPS_ADDED: tuple[AddedStep, ...] = (
    AddedStep(
        "carry the vision tower into the export",
        ("export",),
        ("gemma4-v6e64",),
        "Seed 001 exports with use_multimodal=False, so to_huggingface writes MaxText's multimodal Gemma 4 "
        "config (Gemma4ForConditionalGeneration with vision_config, hf_model_configs.py 0.2.4) around text "
        "weights only, and transformers loads the 18 vision tensors uninitialised (random, with a warning; "
        "tests/test_maxtext_real.py saw it in MaxText's real code). Training never touches the vision tower "
        "(conversion and train_rl are text-only), so after to_huggingface the export script copies those "
        "tensors unchanged from the model's own repo (--hf_model_path) into one more shard and rewrites the "
        "index: the export loads as the multimodal model it claims to be, with the trained text weights. "
        "A text-only config instead would not load: Gemma4ForCausalLM expects model.layers.*, the export "
        "names them model.language_model.layers.*.",
    ),
)


def added_steps_table() -> str:
    """docs/seed-differences.md's table of steps we add to the seeds' (a test keeps the page in sync)."""
    rows = ["| added step | steps | recipes | why |", "| --- | --- | --- | --- |"]
    rows += [f"| {entry.what} | {', '.join(entry.steps)} | {', '.join(entry.recipes)} | {entry.why} |"
             for entry in SEED_STEPS_ADDED]
    return "\n".join(rows)


# --- where the train JobSet deliberately differs from the Pathways JobSet xpk generates ----------------
# Source compared: AI-Hypercomputer/xpk v1.13.1
# (@18c02b10801a4961e69ce40c0931b2369d256447), src/xpk/templates/pathways_workload_create.yaml.j2,
# vendored in tests/contracts/vendor/xpk/.
@dataclass(frozen=True)
class ShapeDifference:
    containers: tuple[str, ...]  # the Pathways containers it concerns
    key: str  # an env variable name, or a pod/container field
    ours: str
    xpk: str
    why: str


PATHWAYS_CONTAINERS = ("pathways-proxy", "pathways-rm", "pathways-worker")

XPK_DIFFERENCES: tuple[ShapeDifference, ...] = (
    ShapeDifference(
        ("pathways-worker",), "MEGASCALE_NUM_SLICES", "the recipe's slices as a literal",
        "fieldRef to the jobset.sigs.k8s.io/replicatedjob-replicas label",
        "The same number; the literal is visible in the manifest and in plan review.",
    ),
    ShapeDifference(
        ("pathways-worker",), "TPU_MIN_LOG_LEVEL", "unset", "0 (verbose)",
        "Log verbosity only; set it in rl.pathways_env to debug a worker.",
    ),
    ShapeDifference(
        ("pathways-worker",), "TF_CPP_MIN_LOG_LEVEL", "unset", "0 (verbose)",
        "Log verbosity only; set it in rl.pathways_env to debug a worker.",
    ),
    ShapeDifference(
        ("pathways-worker",), "MEGASCALE_COORDINATOR_ADDRESS", "$(PATHWAYS_HEAD)",
        "fieldRef to the jobset.sigs.k8s.io/coordinator label",
        "The same value: PATHWAYS_HEAD is that fieldRef, set earlier in the same container.",
    ),
    ShapeDifference(
        ("pathways-proxy", "pathways-rm"), "resources", "requests sized from the recipe's CPU machine",
        "limits cpu 16 / memory 100G (proxy), cpu 8 / memory 32G (resource manager)",
        "Requests are what Kueue counts against the stack's quota; a memory limit on the proxy would "
        "OOM-kill it under a large model's host arrays.",
    ),
    ShapeDifference(
        ("pathways-proxy",), "args", "a recipe's xla_flags after xpk's (gemma4-v6e64: "
        "--xla_tpu_max_hbm_size_mib=26624)", "--custom-pathways-proxy-server-args, none in seed 001",
        "Under Pathways the proxy compiles, so the run's XLA flags are its arguments, where MaxText's own "
        "runner puts a model's (benchmarks/maxtext_xpk_runner.py _get_pathways_proxy_flags); gemma4's cap "
        "makes the compiler leave the margin beside its train step (docs/fit.md, \"The compiler's own limit\").",
    ),
    ShapeDifference(
        PATHWAYS_CONTAINERS, "imagePullPolicy", "default (IfNotPresent for a pinned tag)", "Always",
        "Our images are pinned tags, so a cached image is the same image; Always only adds registry "
        "round trips to every restart.",
    ),
    ShapeDifference(
        ("pathways-worker",), "priorityClassName", "unset", "from --priority",
        "The stack creates no priority classes.",
    ),
    ShapeDifference(
        ("JobSet",), "startupPolicyOrder", "AnyOrder when the capacity list has flex-start, else InOrder",
        "InOrder",
        "InOrder starts the workers only once the head is ready (JobSet v0.12.0 jobset_types.go). On "
        "flex-start GKE has provisioned the slice before admission and books it for 10 minutes "
        "(kubernetes/autoscaler cluster-autoscaler/FAQ.md, BookingExpired), which Kueue v0.17.1 ignores once "
        "admitted; a head that waits for a CPU node and three image pulls can outlast that. See "
        "docs/capacity.md.",
    ),
    ShapeDifference(
        ("pathways-worker",), "backoffLimit", "32 per host when the capacity list has flex-start, else 4",
        "4 per host",
        "Started together with the head (AnyOrder), workers may restart until the head is up, and a Job "
        "counts every restart; 32 per host is what apple/axlearn allows the workers of its Pathways "
        "JobSets, which start in any order (pathways_utils.py _PATHWAYS_BACK_OFF_LIMIT).",
    ),
)


def xpk_difference(container: str, key: str) -> ShapeDifference | None:
    return next((d for d in XPK_DIFFERENCES if key == d.key and container in d.containers), None)


def not_carried_over_table() -> str:
    """The table of seed steps we do not repeat in docs/seed-differences.md (a test keeps it in sync)."""
    rows = ["| seed step | recipes | why |", "| --- | --- | --- |"]
    rows += [f"| {entry.what} | {', '.join(entry.recipes)} | {entry.why} |" for entry in SEED_STEPS_NOT_CARRIED_OVER]
    return "\n".join(rows)


def xpk_differences_table() -> str:
    """The table of differences from xpk's Pathways JobSet in docs/seed-differences.md (a test keeps it in sync)."""
    rows = ["| containers | field | ours | xpk | why |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| {', '.join(d.containers)} | `{d.key}` | {d.ours} | {d.xpk} | {d.why} |" for d in XPK_DIFFERENCES]
    return "\n".join(rows)
