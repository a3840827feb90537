"""The recipe table and per-user settings: the single source of truth for everything downstream."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from tpu_rl.recipes.catalog import SourcePatch
from tpu_rl.recipes.entry import STEPS, Step
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.model import Recipe, build_recipes
from tpu_rl.recipes.setting_specs import EXAMPLE_PROJECT
from tpu_rl.recipes.settings import Settings, example_settings, load_settings
from tpu_rl.recipes.shape import Shape


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
