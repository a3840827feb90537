"""What the real-chip smoke runs: llama31-v6e8's own convert, train and export commands, rendered by the
package (tpu_rl.jobs.maxtext.maxtext_commands) for a run with the smoke's --set items, then changed
where one chip and no network force it, as the CPU tests change them (tests/maxtext_cpu/chain.py
Chain.cpu_argv: gs:// to a local directory, hub ids to the generated model, the model's sizes appended).

Runs in MaxText's environment (the chip's Python); it imports the package from this checkout, which
needs only pydantic and pyyaml, both MaxText's own dependencies.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for entry in (REPO, REPO / "tests"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from maxtext_cpu.chain import Chain  # noqa: E402
from maxtext_cpu.tiny import base_name  # noqa: E402
from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands  # noqa: E402
from tpu_rl.jobs.paths import ArtifactPaths  # noqa: E402
from tpu_rl.recipes import example_settings, get_recipe  # noqa: E402
from tpu_rl.recipes.catalog.facts import MaxTextRelease  # noqa: E402
from tpu_rl.recipes.runs.spec import RunSpec  # noqa: E402

RECIPE = "llama31-v6e8"
# The recipes whose model families the smoke runs besides (--recipe): qwen3's and gemma4's pin MaxText
# 0.2.4, which the chip's Python 3.11 and JAX 0.10.2 cannot run, so they run under 0.2.3 there.
RECIPES = (RECIPE, "qwen3-v6e32", "gemma4-v6e64")
RUN = "chip-smoke"

# The chip's models: each recipe's architecture and vocabulary (the real model's HF_MODEL_CONFIGS entry,
# tiny.py) at a width and depth one v5e chip trains with room (0.4-0.6 B parameters; bf16 weights,
# MaxText's rl.yml weight_dtype). None is tests/maxtext_cpu/tiny.py's own tiny model, for the local run
# with JAX_PLATFORMS=cpu (--model cpu).
CHIP_SIZES = {
    "llama3.1-8b": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
                    "num_hidden_layers": 8, "intermediate_size": 3584, "vocab_size": 128256},
    # 16 experts, 4 routed a token, in place of 128 and 8: the experts' share of the weights stays the model's
    "qwen3-30b-a3b": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
                      "num_hidden_layers": 8, "num_experts": 16, "num_experts_per_tok": 4,
                      "moe_intermediate_size": 384, "vocab_size": 151936},
    # six layers: the 5:1 pattern of sliding-window and global attention once (the real model's layer_types)
    "gemma4-26b": {"hidden_size": 768, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
                   "global_head_dim": 256, "num_global_key_value_heads": 2, "num_hidden_layers": 6,
                   "intermediate_size": 1024, "num_experts": 16, "top_k_experts": 4,
                   "moe_intermediate_size": 384, "vocab_size": 262144},
}
SHARD = {"chip": "400MB", "cpu": "150KB"}
# --model cpu only: a mixture of experts through jax.lax.ragged_dot, since MaxText 0.2.3's megablox
# kernel refuses the CPU backend ("Only interpret mode is supported on CPU backend").
CPU_TRAIN = ("megablox=False",)

# The generated weights' spread: the usual initializer's for the chip's model, so that 8 GRPO steps
# stay finite; tiny.py's wide one (every mapping visible) for the tiny model.
STD = {"chip": 0.02, "cpu": 0.5}

# The smoke's run, as a user would ask for it with --set (each with why); the package renders the
# commands from it, the export's checkpoint step included.
SETS: dict[str, tuple[str, str]] = {
    "num_batches": ("8", "8 GRPO steps: enough for the lines, tags and checkpoints, in minutes"),
    "checkpoint_period": ("4", "checkpoints inside 8 steps (the recipe saves every 10)"),
    "num_test_batches": ("1", "one held-out batch before and after training: the lines, not a score"),
    "max_prefill_predict_length": ("512", "the generated model's tokenizer spends a token a byte (no "
                                          "network for Llama's): the gsm8k prompt is about 400"),
    "max_target_length": ("640", "128 generated tokens: the actor sampler recomputes the whole "
                                 "sequence for each token (no KV cache)"),
    "log_period": ("1", "every step's metrics flushed to TensorBoard (rl.yml: 20)"),
}
# A run at the fit account's boundary (fit.py): one step, no held-out evaluation, and the actor
# sampler given one prompt a call (0.65 s on the chip), so that its forward pass (full logits, no KV
# cache) stays far below the train step's; batch_size alone varies (train_micro_batch_size stays -1).
BOUNDARY_SETS = ("num_batches=1", "num_test_batches=0", "rollout_micro_batch_size=1")


def boundary_sets(batch: int) -> tuple[str, ...]:
    return (*BOUNDARY_SETS, f"batch_size={batch}")


@dataclass(frozen=True)
class Plan:
    kind: str  # "chip" or "cpu": which model
    root: Path  # the work directory: the bucket's stand-in, the model, the data
    model: Path
    extra: tuple[str, ...] = ()  # more --set items (boundary_sets)
    sets: tuple[str, ...] = ()  # smoke.py --set: replaces SETS' value of the same key
    without_patches: bool = False  # smoke.py --without-patches: the recipe's MaxText patches left out
    run: str = RUN
    recipe: str = RECIPE
    # The config keys of the release that runs, with their defaults (release_keys); an argument it has
    # no such key for is dropped (a recipe that pins 0.2.4 run under the chip's 0.2.3). None: all stay.
    known: dict | None = None

    @property
    def sizes(self) -> dict | None:
        return CHIP_SIZES[base_name(get_recipe(self.recipe).model.maxtext_name)] if self.kind == "chip" else None

    def spec(self) -> RunSpec:
        settings = example_settings()
        recipe = settings.recipe(get_recipe(self.recipe))
        data = self.root / "data"
        sets = [f"{key}={value}" for key, value in self.smoke_sets().items()]
        sets += [f"hf_train_files={data / 'train.parquet'}", f"hf_eval_files={data / 'test.parquet'}"]
        return RunSpec.requested(recipe, [*sets, *self.extra], run=self.run)

    @property
    def given(self) -> dict[str, str]:
        """smoke.py's --set items, by key."""
        return dict(item.split("=", 1) for item in self.sets)

    def smoke_sets(self) -> dict[str, str]:
        """SETS' values with smoke.py's --set items in place of the same keys (new keys after them)."""
        return {**{key: value for key, (value, _) in SETS.items()}, **self.given}

    def chain(self) -> Chain:
        spec = self.spec()
        return Chain(spec.recipe, ArtifactPaths(spec, example_settings()), self.root, self.model, self.sizes)

    def commands(self) -> dict[str, MaxTextCommand]:
        chain = self.chain()
        return maxtext_commands(chain.recipe, chain.paths)

    def argv(self, step: str) -> list[str]:
        """The step's rendered arguments with the chip's changes (Chain.cpu_argv) on one chip (one_chip)."""
        # by name: cpu_argv may have rewritten a dropped argument's value (a hub id to the generated model)
        chain, dropped = self.chain(), {arg.partition("=")[0] for arg in self.unknown(step)}
        out = [one_chip(arg) for arg in chain.cpu_argv(step, chain.commands()[step])
               if arg.partition("=")[0] not in dropped]
        return out + list(CPU_TRAIN) if self.kind == "cpu" and step == "train" else out

    def unknown(self, step: str) -> list[str]:
        """The rendered step's arguments the running release has no such key for: an unknown config key, a
        scalar for a key that is a mapping there (0.2.4's debug=True; 0.2.3's debug is {rl: ...}), or the
        export's --hf_model_path where the release's to_huggingface has no such flag (its catalog fact)."""
        if self.known is None:
            return []
        out = []
        if step == "export" and not running_release().export_takes_hf_model_path:
            out += [arg for arg in self.commands()[step].argv if arg.startswith("--hf_model_path=")]
        for arg in self.commands()[step].argv[3:]:
            name, eq, value = arg.partition("=")
            if not eq or arg.startswith("-"):
                continue
            key = name.split(".")[0]
            if key not in self.known or ("." not in name and isinstance(self.known[key], dict)
                                         and not value.startswith("{")):
                out.append(arg)
        return out

    def patches(self, scratch: Path) -> list[dict[str, str]]:
        """The recipe's patches of MaxText's own files as the train probe applies them (workload.py);
        none with --without-patches."""
        from maxtext_cpu.workload import source_patches  # noqa: PLC0415

        return [] if self.without_patches else source_patches(self.chain().recipe, scratch)

    def local(self, url: str) -> Path:
        return self.chain().local(url)


def one_chip(arg: str) -> str:
    """An argument of a slice's mesh as one chip has it: every parallelism axis 1, the trainer and the
    sampler each on the whole chip (train_rl shares it, as llama31-v6e8 shares its VM's chips), one chip
    a host. Each changed argument is listed in the report (smoke.py changed_items)."""
    name, eq, value = arg.partition("=")
    if not eq:
        return arg
    if name.endswith("_parallelism") and value not in ("1", "-1"):
        return f"{name}=1"
    if name.endswith("_devices_fraction") and float(value) != 1:
        return f"{name}=1.0"
    if name == "chips_per_vm" and value != "1":
        return f"{name}=1"
    return arg


def running_release() -> MaxTextRelease:
    """The catalog's facts of the installed MaxText release (recipes.toml [maxtext."<version>"])."""
    version = metadata.version("maxtext")
    table = tomllib.loads(resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text())
    return MaxTextRelease(**table["maxtext"][version])


def release_keys() -> dict:
    """The config keys of the installed MaxText's train_rl with their defaults: base.yml's and
    post_train/rl.yml's, the two files pyconfig reads for it and refuses any other key with (MAXTEXT
    CONFIG ERROR)."""
    import maxtext  # noqa: PLC0415  only in MaxText's environment
    import yaml  # noqa: PLC0415

    configs = Path(maxtext.__file__).parent / "configs"
    return {key: value for name in ("base.yml", "post_train/rl.yml")
            for key, value in yaml.safe_load((configs / name).read_text()).items()}
