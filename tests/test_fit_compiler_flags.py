"""A recipe's xla_flags reach the compiler that judges the plan and the one that runs it (issue 34).

The compiler fits a memory-bound program to whatever HBM it is told a chip has, and it does not see the
buffers already live beside the program (bench/chip_smoke/results/2026-12-06-live-buffers-v5e.md). A
lower limit told to it (--xla_tpu_max_hbm_size_mib) makes it leave that room: on the lent v5e chip a
capped step ran beside a live buffer the uncapped one could not, its temporaries to the byte those of a
CPU compile given the same cap as a compile option (2026-12-06-compiler-cap-v5e.md). So the fit check
compiles with the flags, and the run hands the same flags to its compiler: under Pathways the proxy's
arguments (MaxText's benchmarks/maxtext_xpk_runner.py _get_pathways_proxy_flags), on a TPU VM
LIBTPU_INIT_ARGS of the steps' process.
"""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path

import pytest

from peers.settings import spec_of
from tpu_rl.jobs.fit import compile_request
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.train import pathways_proxy, pathways_resource_manager, pathways_worker
from tpu_rl.jobs.vm import render_startup_script
from tpu_rl.recipes import UserError, all_recipes, example_settings, get_recipe
from tpu_rl.recipes.fit import MARGIN, figures
from tpu_rl.scripts.fit.check import recipe_fit
from vm_helpers import EXAMPLE_SETTINGS, SCRIPT_RECIPE

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "chip_smoke" / "results"
CAP = "--xla_tpu_max_hbm_size_mib=26624"
MIB = 1 << 20


def _with_flags(recipe, flags: tuple[str, ...]):
    return recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"xla_flags": flags})})


def test_gemma4_keeps_seed_001s_plan_and_tells_its_compiler_26_gib():
    recipe = get_recipe("gemma4-v6e64")
    assert recipe.rl.xla_flags == (CAP,)
    assert recipe.rl.changed_to_fit() == {"xla_flags": (CAP, "none")}
    assert recipe.fit_margin == MARGIN  # no recipe keeps less than the margin now


def test_the_fit_check_compiles_with_the_recipes_flags_as_compile_options_and_only_then():
    settings = example_settings()
    gemma4 = compile_request(spec_of(get_recipe("gemma4-v6e64")), settings)
    assert gemma4["compiler_options"] == {"xla_tpu_max_hbm_size_mib": "26624"}
    for name in ("qwen3-v6e32", "llama31-v6e8"):  # their requests, and so their digests, as before
        assert "compiler_options" not in compile_request(spec_of(get_recipe(name)), settings)


def test_gemma4s_shipped_train_step_was_compiled_under_its_cap_and_leaves_the_margin():
    [result] = [copy.deepcopy(r) for r in figures().values() if r["recipe"] == "gemma4-v6e64"]
    step = result["programs"]["train_step"]
    own = step["argument_bytes"] + step["output_bytes"] - step["alias_bytes"] + step["temp_bytes"]
    assert own <= 26624 * MIB < result["limit_bytes"]
    fit = recipe_fit(result, get_recipe("gemma4-v6e64"))
    assert fit.fits and fit.peak <= fit.limit - fit.margin and fit.margin_share == MARGIN
    # `tpu-rl fit` and run.json say how it was compiled
    assert ("compiled with", CAP) in fit.rows() and fit.record()["compiler_flags"] == [CAP]


def test_under_pathways_the_proxy_gets_the_flags_and_no_other_container_does():
    paths = ArtifactPaths(spec_of(get_recipe("gemma4-v6e64")), example_settings())
    assert pathways_proxy(paths)["args"][-1] == CAP
    assert CAP not in pathways_resource_manager(paths)["args"] and CAP not in pathways_worker(paths)["args"]
    plain = ArtifactPaths(spec_of(get_recipe("qwen3-v6e32")), example_settings())
    assert not any(arg.startswith("--xla_") for arg in pathways_proxy(plain)["args"])


def test_on_a_tpu_vm_the_steps_compile_with_the_flags_in_libtpu_init_args():
    flags = (CAP, "--xla_tpu_rematerialization_algo=PEAK_PRIORITY")
    script = render_startup_script(spec_of(_with_flags(SCRIPT_RECIPE, flags)), EXAMPLE_SETTINGS)
    exported = [line for line in script.splitlines() if "LIBTPU_INIT_ARGS" in line]
    assert exported and all(shlex.join(flags).replace("'", "") in line for line in exported), exported
    assert "LIBTPU_INIT_ARGS" not in render_startup_script(spec_of(SCRIPT_RECIPE), EXAMPLE_SETTINGS)


def test_a_vm_recipe_with_xla_flags_may_not_set_libtpu_init_args_in_rl_env_too():
    recipe = _with_flags(SCRIPT_RECIPE, (CAP,))
    recipe = recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"env": {"LIBTPU_INIT_ARGS": "--x=1"}})})
    with pytest.raises(UserError, match="LIBTPU_INIT_ARGS is set twice on the TPU VM"):
        render_startup_script(spec_of(recipe), EXAMPLE_SETTINGS)


@pytest.mark.parametrize("flag", ["xla_tpu_max_hbm_size_mib=1", "--tpu_max_hbm=1", "--xla_a=1 --xla_b=2",
                                  "--xla_a='1'", "--xla_a"])
def test_the_recipe_table_refuses_a_flag_that_is_not_one_xla_flag_in_one_line(flag):
    from conftest import recipe_table
    from tpu_rl.recipes import build_recipes

    table = copy.deepcopy(recipe_table())
    table["recipes"]["gemma4-v6e64"]["rl"]["xla_flags"] = [flag]
    with pytest.raises(UserError) as caught:
        build_recipes(table)
    line = str(caught.value)
    assert "\n" not in line and "gemma4-v6e64" in line and "xla_flags" in line, line
    assert "is not an XLA flag like --xla_tpu_max_hbm_size_mib=26624" in line, line


def test_on_the_chip_the_cap_let_a_step_run_beside_a_buffer_the_uncapped_step_could_not():
    cases = {(case["live_gib"], case["cap_mib"]): case
             for case in json.loads((RESULTS / "2026-12-06-compiler-cap-v5e.json").read_text())["cases"]}
    uncapped, capped = cases[(3.5, 0)], cases[(3.5, 12288)]
    assert not uncapped["ran"] and "RuntimeProgramAllocationFailure" in uncapped["error"]
    assert capped["ran"] and capped["temp_bytes"] < uncapped["temp_bytes"]
    # what the CPU compile gave with the cap as a compile option (the results' second table)
    assert capped["temp_bytes"] == 2_379_427_328 == cases[(0.0, 12288)]["temp_bytes"]
    assert capped["argument_bytes"] + capped["temp_bytes"] <= 12288 * MIB


def test_every_recipe_has_its_figure_and_none_keeps_less_than_the_margin():
    assert {name for name, recipe in all_recipes().items() if recipe.fit_margin < MARGIN} == set()


def _refused_train_step(need_gib: float, named_gib: float) -> dict:
    """gemma4's shipped result with its train step refused as the compiler refuses one (its own words: the
    temporaries it needs, the HBM it names), as scripts/fit/maxtext_pieces.py refusal records it."""
    [result] = [copy.deepcopy(r) for r in figures().values() if r["recipe"] == "gemma4-v6e64"]
    beside = result["programs"]["train_step"]["beside_bytes"]
    text = (f"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
            f"({need_gib:.2f}G) exceeds available HBM ({named_gib:.2f}G)")
    result["programs"]["train_step"] = {"refused": text, "need_bytes": round(need_gib * 2**30),
                                        "limit_bytes": round(named_gib * 2**30), "whole_bytes": None,
                                        "beside_bytes": beside, "seconds": 1.0}
    return result


def test_a_step_refused_under_the_cap_never_fits_though_the_chip_could_hold_it():
    """A need of 26.3 GiB and the reference model beside it would pass the chip with the margin, but the
    compiler told 26 GiB refused the step: on the slice it would not compile at all."""
    fit = recipe_fit(_refused_train_step(26.3, 26.0), get_recipe("gemma4-v6e64"))
    assert not fit.fits
    line = fit.refusal("gemma4-v6e64")
    assert "the train step needs 27.8 GiB, more than the 26.0 GiB its compiler is told a v6e chip has (rl.xla_flags " \
           f"{CAP})" in line, line
    assert line.endswith("or raise the cap in rl.xla_flags (the margin must stay free)"), line


def test_a_step_refused_at_the_chips_own_limit_says_the_chip_and_no_cap():
    fit = recipe_fit(_refused_train_step(40.0, 31.24), get_recipe("gemma4-v6e64"))
    line = fit.refusal("gemma4-v6e64")
    assert not fit.fits and "more than a v6e chip's 31.2 GiB" in line and "xla_flags" not in line, line
