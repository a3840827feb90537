"""Will a run fit its TPU chips: the facts the fit check (scripts/fit) decides by.

- MARGIN: the share of a chip's HBM a plan must leave free (docs/fit.md says why 10%), unless its recipe
  keeps less with the reason written (recipes.toml fit_margin, fit_margin_why);
- NEUTRAL: the train arguments that cannot change what a chip holds, so a run differing from another
  only in them compiles the same programs (a sweep compiles each memory shape once);
- figures(): each recipe's compiled figures as shipped (recipes/fit/figures.json, written by
  tools/generate_fit_figures.py and kept equal to a fresh compile by tests/test_fit_recipes.py), so a
  recipe's own plan is judged without building MaxText's environment.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

# Of the chip's HBM as the compiler counts it, left free by every program: what the compiler cannot
# see (the runtime's own buffers, fragmentation, vLLM rounding its KV cache to whole pages) and the
# tunix commits the compile can only approximate (docs/fit.md, "The margin").
MARGIN = 0.10

# key -> why it cannot change a chip's memory. Any other train argument is compiled.
NEUTRAL: dict[str, str] = {
    "run_name": "a name",
    "base_output_directory": "a path",
    "load_parameters_path": "a path",
    "tokenizer_path": "read on the host",
    "num_batches": "how many steps run, not what one holds",
    "train_fraction": "how much of the data trains",
    "num_epoch": "how often the data repeats",
    "checkpoint_period": "when the host saves",
    "max_num_checkpoints_to_keep": "what the bucket keeps",
    "learning_rate": "a number the schedule scales",
    "learning_rate_schedule_steps": "the schedule's length",
    "warmup_steps_fraction": "the schedule's shape",
    "eval_interval": "when the held-out evaluation runs (vLLM's, not the trainer's)",
    "num_test_batches": "how much the held-out evaluation reads",
    "num_eval_passes": "how often the held-out evaluation repeats",
    "decode_sampling_top_k": "vLLM's sampling",
    "decode_sampling_nucleus_p": "vLLM's sampling",
    "rl.grpo_epsilon": "a number in the loss",
    # MaxText's train_rl makes the reference model whatever the KL weight (0 only skips its programs)
    "rl.grpo_beta": "a number in the loss",
    "eval_sampling_strategy": "vLLM's sampling",
    "reward_functions_path": "rewards are computed on the host",
    "reward_functions": "rewards are computed on the host",
    "dataset_processor_path": "rows are made on the host, cut to the same lengths",
    "debug": "what is logged",
}


def memory_items(items: tuple[str, ...]) -> tuple[str, ...]:
    """The key=value train arguments that can change what a chip holds, in order."""
    return tuple(item for item in items if item.partition("=")[0] not in NEUTRAL)


@cache
def figures() -> dict[str, dict]:
    """The shipped compile results, by the digest of what they were compiled from."""
    path = resources.files("tpu_rl.recipes").joinpath("fit", "figures.json")
    return json.loads(path.read_text()) if path.is_file() else {}
