"""Every recipe's own plan fits its chips with the margin, by XLA's TPU compiler on this machine, and the
figures shipped in recipes/fit/figures.json are the compiler's.

Each plan is compiled in the MaxText environment of its release (`make install`; `make test` compiles
them once before the suite, tools/generate_fit_figures.py --cache), and the result is cached by the
digest of everything it was compiled from, so a warm run reads it and a changed recipe compiles again.
A recipe that stops fitting fails here, with the compiler's figure and the setting to change.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from maxtext_cpu.chain import need_venv
from tpu_rl.recipes import all_recipes
from tpu_rl.recipes.fit import figures
from tpu_rl.scripts.fit.check import recipe_fit
from tpu_rl.scripts.fit.compiler import compile_now, digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from generate_fit_figures import recipe_requests

REQUESTS = recipe_requests()
REGENERATE = "run .venv/bin/python tools/generate_fit_figures.py"


def measured(result: dict) -> dict:
    """A result without how long its compile took, which no two compiles share."""
    return {key: value for key, value in result.items() if key not in ("seconds", "recipe")} | {
        "programs": {name: {k: v for k, v in program.items() if k != "seconds"}
                     for name, program in result["programs"].items()}}


@pytest.mark.parametrize("name", sorted(all_recipes()))
def test_each_recipe_fits_its_topology_with_the_margin_by_the_compiler(name):
    request = REQUESTS[name]
    need_venv(request["maxtext_version"])
    fit = recipe_fit(compile_now(request), all_recipes()[name])
    assert fit.fits, fit.refusal(name)
    assert fit.result["accelerator"] == all_recipes()[name].shape.accelerator_type


@pytest.mark.parametrize("name", sorted(all_recipes()))
def test_the_shipped_figures_are_the_compilers(name):
    request = REQUESTS[name]
    need_venv(request["maxtext_version"])
    shipped = figures().get(digest(request))
    assert shipped is not None, f"recipes/fit/figures.json has no figures for {name}'s plan as it is now: {REGENERATE}"
    assert measured(shipped) == measured(compile_now(request)), f"{name}'s shipped figures differ: {REGENERATE}"


def test_the_shipped_figures_are_the_recipes_own_and_nothing_else():
    assert sorted(result["recipe"] for result in figures().values()) == sorted(all_recipes()), REGENERATE
