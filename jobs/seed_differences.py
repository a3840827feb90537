"""Where our MaxText command lines deliberately differ from the seeds' (the tutorials), and why.

The seed-equivalence tests compare every key=value and --flag of every step with the seed's command and
accept a difference only when it is listed here; an entry that no longer matches a difference fails too.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipes import STEPS, Step


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
        "load_parameters_path",
        "Follows base_output_directory: each step reads exactly the bucket path the previous step wrote.",
        steps=("train", "export"),
        recipes=VM,
    ),
    Difference(
        "run_name",
        "Seed 002 names the run after the clock; a fixed name makes the export path derivable and lets a "
        "re-run find the same checkpoints.",
        steps=("train",),
        recipes=VM,
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
        "tokenizer_path",
        "Stated explicitly as the recipe's tokenizer (the same repo MaxText's default mapping names).",
        steps=("train",),
        recipes=VM,
    ),
)


def explain(recipe: str, step: Step, key: str) -> Difference | None:
    return next((entry for entry in DIFFERENCES if entry.covers(recipe, step, key)), None)


def differences_table() -> str:
    """The README's table of deliberate differences (a test keeps the README in sync)."""
    rows = ["| argument | steps | recipes | why |", "| --- | --- | --- | --- |"]
    for entry in DIFFERENCES:
        recipes = ", ".join(entry.recipes) or "all"
        rows.append(f"| `{entry.key}` | {', '.join(entry.steps)} | {recipes} | {entry.why} |")
    return "\n".join(rows)
