"""What the real-chip smoke runs: llama31-v6e8's own convert, train and export commands, rendered by the
package (tpu_rl.jobs.maxtext.maxtext_commands) for a run with the smoke's --set items, then changed
where one chip and no network force it, as the CPU tests change them (tests/maxtext_cpu/chain.py
Chain.cpu_argv: gs:// to a local directory, hub ids to the generated model, the model's sizes appended).

Runs in MaxText's environment (the chip's Python); it imports the package from this checkout, which
needs only pydantic and pyyaml, both MaxText's own dependencies.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for entry in (REPO, REPO / "tests"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from maxtext_cpu.chain import Chain  # noqa: E402
from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands  # noqa: E402
from tpu_rl.jobs.paths import ArtifactPaths  # noqa: E402
from tpu_rl.recipes import example_settings, get_recipe  # noqa: E402
from tpu_rl.recipes.runs.spec import RunSpec  # noqa: E402

RECIPE = "llama31-v6e8"
RUN = "chip-smoke"

# The chip's model: Llama 3.1's architecture and vocabulary at a width and depth one v5e chip trains
# with room (about 0.4 B parameters; bf16 weights, MaxText's rl.yml weight_dtype). "CPU" is
# tests/maxtext_cpu/tiny.py's own tiny model, for the local run with JAX_PLATFORMS=cpu.
SIZES = {
    "chip": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
             "num_hidden_layers": 8, "intermediate_size": 3584, "vocab_size": 128256},
    "cpu": None,
}
SHARD = {"chip": "400MB", "cpu": "150KB"}
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
    run: str = RUN

    @property
    def sizes(self) -> dict | None:
        return SIZES[self.kind]

    def spec(self) -> RunSpec:
        settings = example_settings()
        recipe = settings.recipe(get_recipe(RECIPE))
        data = self.root / "data"
        sets = [f"{key}={value}" for key, (value, _) in SETS.items()]
        sets += [f"hf_train_files={data / 'train.parquet'}", f"hf_eval_files={data / 'test.parquet'}"]
        return RunSpec.requested(recipe, [*sets, *self.extra], run=self.run)

    def chain(self) -> Chain:
        spec = self.spec()
        return Chain(spec.recipe, ArtifactPaths(spec, example_settings()), self.root, self.model, self.sizes)

    def commands(self) -> dict[str, MaxTextCommand]:
        chain = self.chain()
        return maxtext_commands(chain.recipe, chain.paths)

    def argv(self, step: str) -> list[str]:
        """The step's rendered arguments with the chip's changes (Chain.cpu_argv)."""
        chain = self.chain()
        return chain.cpu_argv(step, self.commands()[step])

    def local(self, url: str) -> Path:
        return self.chain().local(url)
