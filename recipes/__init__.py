"""The recipe table and per-user settings: the single source of truth for everything downstream.

One home for each concept (docs/development.md, "Layout"):
- recipes.toml: the recipes, read once by all_recipes() below;
- catalog/: their types: a Recipe, one table as written, a slice's shape and the facts the table names;
- capacity/: capacity modes and their rules, and where a GKE recipe's slices come from;
- platforms/: the platforms a recipe runs on, as facts (PLATFORMS, the registry every layer's routes by);
- settings/: the per-user Settings: which exist, their checks, the config file, what each command needs;
- runs/: what one run asks for (a RunSpec): its name and identity, --set values, user files, sweeps;
- costs/: list prices, and what a run, its evaluation and a standing stack cost;
- driver/: what the run's in-cluster driver may do and runs on;
- fit/: the margin and the shipped figures the fit check judges a plan by (scripts/fit);
- conventions.py: the names the stacks, the manifests and the CLI agree on;
- names.py: the one rule of a name tpu-rl takes or makes (a recipe's, a run's, a sweep's);
- user_text.py: reading a file the user names, refused in one line unless it is a small UTF-8 text file;
- errors.py: UserError, the one error type that reaches a person;
- outcome.py: how a command and a run end: exit codes, outcomes, transient or final, the retry policy.
- vm_script.py: the names the TPU VM's startup script keeps for itself, which a recipe's environment may not take.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from tpu_rl.recipes.catalog.entry import STEPS, Step
from tpu_rl.recipes.catalog.facts import SourcePatch
from tpu_rl.recipes.catalog.recipe import Recipe, build_recipes
from tpu_rl.recipes.catalog.shape import Shape
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.settings.load import Settings, example_settings, load_settings
from tpu_rl.recipes.settings.specs import EXAMPLE_PROJECT


@cache
def all_recipes() -> dict[str, Recipe]:
    """Every recipe in recipes.toml, validated."""
    text = resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text()
    return build_recipes(tomllib.loads(text))


def get_recipe(name: str) -> Recipe:
    recipes = all_recipes()
    if name not in recipes:
        raise UserError(f"unknown recipe '{name}': choose one of {', '.join(recipes)} (see `tpu-rl recipes`)")
    return recipes[name]


__all__ = [
    "STEPS",
    "EXAMPLE_PROJECT",
    "Recipe",
    "Settings",
    "Shape",
    "SourcePatch",
    "Step",
    "UserError",
    "all_recipes",
    "build_recipes",
    "example_settings",
    "get_recipe",
    "load_settings",
]
