"""The fit account (scripts/fit/account.py) on what XLA's TPU compiler said: a program's part is what the
compiler counts for it (arguments, outputs not donated, temporaries) plus what sits beside it, every
moment must leave the 10% margin free, a program refused on its own cannot fit, the optimizer's first
placement under tunix 683256db holds its state twice, and vLLM's start fits its share.

The inputs are the compiler's own results, unedited: tests/fit_results/ (llama31-v6e8 at seed 002's
vLLM share 0.72; qwen3-v6e32 with a micro-batch 32 times the recipe's); one test edits a copy to
stand between the chip's limit and the margin, another leaves a refusal's need out, and each says so;
and the shipped figures of every recipe (recipes/fit/figures.json, which tests/test_fit_recipes.py keeps
the compiler's). Expected
figures are worked out here from those results by the rule docs/fit.md states.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tpu_rl.recipes import all_recipes
from tpu_rl.recipes.fit import figures
from tpu_rl.scripts.fit.account import GIB, Fit

RESULTS = Path(__file__).parent / "fit_results"
SEED_SHARE = json.loads((RESULTS / "llama31-v6e8-vllm-0.72.json").read_text())
TOO_BIG = json.loads((RESULTS / "qwen3-v6e32-micro-256.json").read_text())


def shipped(recipe: str) -> dict:
    [result] = [result for result in figures().values() if result["recipe"] == recipe]
    return copy.deepcopy(result)


def counted(program: dict) -> int:
    """What the compiler counts for a program it compiled (its refusals add the same three)."""
    return program["argument_bytes"] + program["output_bytes"] - program["alias_bytes"] + program["temp_bytes"]


def test_at_the_seeds_vllm_share_the_train_step_needs_more_than_the_chip():
    step, held = SEED_SHARE["programs"]["train_step"], SEED_SHARE["held_bytes"]
    # vLLM fills 0.72 of the chip, both models in it; the step adds its own program
    beside = round(0.72 * SEED_SHARE["limit_bytes"]) - held["actor"]
    assert step["beside_bytes"] == beside
    total = counted(step) + beside
    fit = Fit(SEED_SHARE)
    assert fit.program("train_step").total == total > SEED_SHARE["limit_bytes"]
    assert not fit.fits and not Fit(SEED_SHARE, 0.0).fits
    assert fit.refusal("llama31-v6e8") == (
        f"llama31-v6e8 does not fit: the train step needs {total / GIB:.1f} GiB, more than a v6e chip's 31.2 GiB, "
        "on the 8 trainer chips (fsdp 8) of v6e-8; lower hbm_utilization_vllm, train_micro_batch_size, "
        "rl.num_generations or max_target_length")


def test_a_train_step_that_fits_the_chip_but_not_the_margin_is_told_so():
    # the seed's share with the step's temporaries made smaller: under the chip, over the margin
    under = copy.deepcopy(SEED_SHARE)
    step, limit = under["programs"]["train_step"], under["limit_bytes"]
    step["temp_bytes"] -= counted(step) + step["beside_bytes"] - (limit - round(0.05 * limit))
    fit = Fit(under)
    assert fit.program("train_step").total == limit - round(0.05 * limit)
    assert fit.refusal("llama31-v6e8").startswith(
        "llama31-v6e8 does not fit: the train step needs 29.7 GiB of a v6e chip's 31.2 GiB, leaving less than "
        "the 10% margin (3.1 GiB), on the 8 trainer chips (fsdp 8) of v6e-8; ")
    assert Fit(under, 0.0).fits


def test_a_program_the_compiler_refused_on_its_own_cannot_fit():
    step = TOO_BIG["programs"]["train_step"]
    assert "refused" in step and step["need_bytes"] > TOO_BIG["limit_bytes"]
    part = Fit(TOO_BIG).program("train_step")
    assert not part.fits and part.total == step["need_bytes"] + step["beside_bytes"]
    assert Fit(TOO_BIG).refusal("qwen3-v6e32").endswith("lower train_micro_batch_size, rl.num_generations or "
                                                         "max_target_length")


def test_a_refusal_that_names_no_need_leaves_no_peak_to_speak_of():
    # TOO_BIG with the compiler's need left out, as a refusal whose message names none reads
    unnamed = copy.deepcopy(TOO_BIG)
    del unnamed["programs"]["train_step"]["need_bytes"]
    fit = Fit(unnamed)
    assert fit.peak is None and fit.headroom is None and not fit.fits
    with pytest.raises(ValueError, match="no known peak: the compiler refused train_step without naming its need"):
        fit.summary()


def test_the_optimizers_first_placement_under_tunix_683256db_holds_it_twice():
    result = shipped("llama31-v6e8")
    assert result["trainer_rules"]["layout"] == "constrained"
    held = result["held_bytes"]
    # vLLM's share (both models in it) and two optimizer states
    assert Fit(result).placement.total == result["vllm_share_bytes"] + 2 * held["optimizer"]
    assert Fit(shipped("qwen3-v6e32")).placement is None  # c4ec573d moves only what its layout changes


def test_vllm_sharing_the_chips_starts_beside_both_models():
    result = shipped("llama31-v6e8")
    held = result["held_bytes"]
    one_sequence = result["kv_bytes_per_token"] * result["max_model_len"]
    start = Fit(result).vllm_start
    assert start.total == held["actor"] + held["reference"] + result["vllm_weights_bytes"] + one_sequence
    assert start.fits and start.allowed == result["vllm_share_bytes"]


def test_vllm_short_of_its_weights_is_told_to_take_more_and_a_share_past_the_chip_less():
    result = shipped("qwen3-v6e32")
    need = result["vllm_weights_bytes"] + result["kv_bytes_per_token"] * result["max_model_len"]
    assert Fit(result).vllm_start.total == need
    short = {**result, "vllm_share_bytes": need - 1}
    assert Fit(short).refusal("qwen3-v6e32").endswith(
        "; raise hbm_utilization_vllm or the rollout's tensor or expert parallelism")
    past = {**result, "vllm_share_bytes": result["limit_bytes"] + 1}
    assert Fit(past).refusal("qwen3-v6e32").endswith("; lower hbm_utilization_vllm: its share is more than the chip")


@pytest.mark.parametrize("recipe", ["qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"])
def test_each_recipe_leaves_its_margin_free_at_every_moment(recipe):
    margin = all_recipes()[recipe].fit_margin
    fit = Fit(shipped(recipe), margin)
    assert fit.fits
    assert all(part.total <= fit.limit - round(margin * fit.limit) for part in fit.parts)
    line = fit.summary()
    assert line.startswith(f"fits: {fit.peak / GIB:.1f} GiB of a ")
    assert line.endswith(f"free (the margin: {round(100 * margin)}%)")
    assert fit.record()["fits"] is True and fit.record()["compiler"]["libtpu"]


def test_docs_fit_shows_the_shipped_figures_table():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from generate_fit_figures import DOC, doc_with_table, recipe_requests

    from tpu_rl.scripts.fit.account import recipes_table
    from tpu_rl.scripts.fit.check import recipe_fit
    from tpu_rl.scripts.fit.compiler import digest

    table = recipes_table({name: recipe_fit(figures()[digest(request)], all_recipes()[name])
                           for name, request in recipe_requests().items()})
    assert DOC.read_text() == doc_with_table(DOC.read_text(), table), "run tools/generate_fit_figures.py"
