"""The fit account (scripts/fit/account.py) read against what XLA's TPU compiler said: a refused program
does not fit and its peak is the compiler's need less the margin; vLLM's start is checked by its share;
the one-line refusal names the part, the figure, the chip's limit, the margin and the setting to change.

The inputs are the compiler's own results: tests/fit_results/ (llama31-v6e8 at seed 002's vLLM share,
whose train step the compiler refused beside the 10% margin: "Used 32.94G of 31.25G hbm") and the
shipped figures of every recipe (recipes/fit/figures.json, tests/test_fit_recipes.py keeps them the
compiler's).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tpu_rl.recipes.fit import figures
from tpu_rl.scripts.fit.account import GIB, Fit

SEED_SHARE = json.loads((Path(__file__).parent / "fit_results" / "llama31-v6e8-vllm-0.72.json").read_text())


def shipped(recipe: str) -> dict:
    [result] = [result for result in figures().values() if result["recipe"] == recipe]
    return copy.deepcopy(result)


def test_the_train_step_the_compiler_refused_beside_the_margin_does_not_fit():
    fit = Fit(SEED_SHARE)
    step = fit.program("train_step")
    assert not step.fits and not fit.fits
    # the compiler's words: Used 32.94G of 31.25G, beside a ballast that held the 3.125 GiB margin
    assert SEED_SHARE["limit_bytes"] == round(31.25 * GIB) and SEED_SHARE["margin_bytes"] == round(3.125 * GIB)
    assert abs(step.total / GIB - (32.94 - 3.125)) < 0.01
    assert fit.program("reference_logps").fits


def test_a_plan_that_fits_only_without_the_margin_says_what_is_free():
    rows = dict(Fit(SEED_SHARE).rows())
    assert rows["the train step"] == "29.8 GiB at its peak: 1.4 GiB free, under the 3.1 GiB margin"
    assert rows["limit"] == "31.2 GiB a chip, the compiler's; margin 3.1 GiB"


def test_the_refusal_is_one_line_with_the_part_the_figure_the_limit_the_margin_and_what_to_lower():
    line = Fit(SEED_SHARE).refusal("llama31-v6e8")
    assert line == ("llama31-v6e8 does not fit: the train step needs 29.8 GiB of a v6e chip's 31.2 GiB, leaving "
                    "less than the 10% margin (3.1 GiB), on the 8 trainer chips (fsdp 8) of v6e-8; lower "
                    "hbm_utilization_vllm, train_micro_batch_size, rl.num_generations or max_target_length")


def test_vllm_sharing_the_chips_starts_beside_both_models():
    held, fit = SEED_SHARE["held_bytes"], Fit(SEED_SHARE)
    one_sequence = SEED_SHARE["kv_bytes_per_token"] * SEED_SHARE["max_model_len"]
    assert fit.vllm_start.total == held["actor"] + held["reference"] + SEED_SHARE["vllm_weights_bytes"] + one_sequence
    assert fit.vllm_start.fits
    # on a chip it shares, vLLM holds its share less the two models, which the account counts once
    assert fit.vllm_beside == SEED_SHARE["vllm_share_bytes"] - held["actor"] - held["reference"]


def test_vllm_on_its_own_chips_needs_only_its_weights_and_one_sequence():
    result = shipped("qwen3-v6e32")
    assert not result["shared_chips"]
    need = result["vllm_weights_bytes"] + result["kv_bytes_per_token"] * result["max_model_len"]
    assert Fit(result).vllm_start.total == need
    result["vllm_share_bytes"] = need - 1  # a share one byte short of its weights and one sequence
    fit = Fit(result)
    assert not fit.fits
    assert fit.refusal("qwen3-v6e32").endswith("; lower hbm_utilization_vllm or rollout_tensor_parallelism")


@pytest.mark.parametrize("recipe", ["qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"])
def test_each_recipes_peak_is_its_train_step_and_the_line_says_it_fits_with_the_margin(recipe):
    fit = Fit(shipped(recipe))
    assert fit.fits and fit.largest.name == "train_step"
    line = fit.summary()
    assert line.startswith("fits with the 10% margin: at most ") and line.endswith("at its peak (the train step)")
    assert fit.record()["fits"] is True and fit.record()["compiler"]["libtpu"]


def test_docs_fit_shows_the_shipped_figures_table():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from generate_fit_figures import DOC, doc_with_table, recipe_requests

    from tpu_rl.scripts.fit.account import recipes_table
    from tpu_rl.scripts.fit.compiler import digest

    table = recipes_table({name: Fit(figures()[digest(request)]) for name, request in recipe_requests().items()})
    assert DOC.read_text() == doc_with_table(DOC.read_text(), table), "run tools/generate_fit_figures.py"
