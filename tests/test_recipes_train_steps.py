"""The step export converts is the last step train_rl runs, computed as MaxText computes it:
int(num_batches x rl.num_iterations x train_fraction x num_epoch) (0.2.4 configs/types.py; 0.2.3
train_rl.py get_max_train_steps), with rl.yml's defaults 1, 1.0 and 1 where the recipe says nothing."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from tpu_rl import jobs
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import UserError, build_recipes, example_settings
from tpu_rl.recipes.runs.spec import RunSpec

SETTINGS = example_settings()


def recipe_with(name: str, *overrides: str, num_batches: int | None = None):
    table = tomllib.loads(resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text())
    rl = table["recipes"][name]["rl"]
    rl["overrides"] = [*rl.get("overrides", []), *overrides]
    if num_batches is not None:
        rl["num_batches"] = num_batches
    return build_recipes(table)[name]


# Worked examples, by hand: (num_batches, overrides, steps).
EXAMPLES = [
    (50, (), 50),  # seed 000 exports actor/50 after num_batches=50
    (50, ("rl.num_iterations=2",), 100),
    (50, ("num_iterations=2",), 100),  # 0.2.4's pyconfig sets the nested rl field from its bare name
    (50, ("train_fraction=0.5",), 25),
    (50, ("num_epoch=3",), 150),
    (50, ("rl.num_iterations=2", "train_fraction=0.3", "num_epoch=2"), 60),
    (3, ("train_fraction=0.5",), 1),  # int(1.5): MaxText truncates
]


@pytest.mark.parametrize(("num_batches", "overrides", "steps"), EXAMPLES)
def test_the_last_step_follows_every_factor_of_train_rls_step_count(num_batches, overrides, steps):
    recipe = recipe_with("llama31-v6e8", *overrides, num_batches=num_batches)
    assert recipe.last_step == steps
    paths = ArtifactPaths(RunSpec.of_catalog(recipe), SETTINGS)
    export = jobs.maxtext_commands(recipe, paths)["export"]
    assert export.value("load_parameters_path").endswith(f"/checkpoints/actor/{steps}/model_params/")


@pytest.mark.parametrize("value", ["false", "False", "0"])
def test_an_override_that_disables_checkpointing_is_refused_with_the_reason(value):
    with pytest.raises(UserError, match=r"rl\.overrides: enable_checkpointing=false leaves no checkpoint for export"):
        recipe_with("qwen3-v6e32", f"enable_checkpointing={value}")


def test_a_step_factor_that_is_not_a_number_is_refused_naming_it():
    with pytest.raises(UserError, match=r"recipe 'qwen3-v6e32': rl.overrides sets train_fraction=half, which is not a number"):
        recipe_with("qwen3-v6e32", "train_fraction=half")


def test_factors_that_leave_no_step_are_refused():
    with pytest.raises(UserError, match="gives 0 training steps"):
        recipe_with("qwen3-v6e32", "train_fraction=0.01")


def test_both_spellings_of_num_iterations_are_refused():
    with pytest.raises(UserError, match="sets rl.num_iterations twice"):
        recipe_with("qwen3-v6e32", "rl.num_iterations=2", "num_iterations=3")
