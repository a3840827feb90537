"""The run a command asks for (recipes/runs/spec.py RunSpec), apart from the catalog Recipe. Pure: no cloud."""

from __future__ import annotations

import dataclasses

import pytest

from tpu_rl.recipes import Recipe, UserError, get_recipe
from tpu_rl.recipes.costs.train_time import as_defined
from tpu_rl.recipes.runs.spec import RunSpec, default_run_name, run_identity, run_name
from tpu_rl.recipes.runs.user_files import USER_FILES_DIR, UserFile

QWEN = get_recipe("qwen3-v6e32")  # MaxText 0.2.4: takes --rewards
REWARDS = UserFile("rewards", "rewards.py", "def fn1(prompts, completions, **kw):\n    return [0.0]\n", ("fn1",))


def test_the_catalog_recipe_carries_no_run_fields():
    run_fields = {"run", "sets", "sweep", "user_files", "load_parameters", "default_rl"}
    assert run_fields & set(Recipe.model_fields) == set()
    assert {field.name for field in dataclasses.fields(RunSpec)} >= run_fields - {"default_rl"} | {"catalog_rl"}


def test_the_catalog_run_is_the_recipe_as_recipes_toml_defines_it():
    spec = RunSpec.of_catalog(QWEN)
    assert spec.recipe is QWEN and spec.catalog_rl == QWEN.rl
    assert (spec.sets, spec.run, spec.user_files, spec.sweep, spec.load_parameters) == ((), None, (), None, None)
    assert run_name(spec) == default_run_name(spec)


def test_requested_merges_the_sets_into_rl_and_keeps_the_catalog_table():
    spec = RunSpec.requested(QWEN, ["learning_rate=1e-5", "num_batches=20"])
    assert spec.sets == ("learning_rate=1e-5", "num_batches=20")
    assert "learning_rate=1e-5" in spec.recipe.rl.overrides and "learning_rate=2e-5" in QWEN.rl.overrides
    assert spec.recipe.rl.num_batches == 20 and spec.recipe.train_steps == 20
    assert spec.catalog_rl == QWEN.rl and as_defined(spec).recipe.rl == QWEN.rl
    assert spec.recipe.name == QWEN.name and spec.recipe.capacity == QWEN.capacity


def test_requested_checks_the_run_name_and_the_sets():
    assert run_name(RunSpec.requested(QWEN, (), "lr-1e5")) == "lr-1e5"
    with pytest.raises(UserError, match="--run 'Bad_Name' is not a run name"):
        RunSpec.requested(QWEN, (), "Bad_Name")
    with pytest.raises(UserError, match="--set run_name is refused"):
        RunSpec.requested(QWEN, ["run_name=x"])


def test_two_equal_requests_give_equal_specs_and_one_run_name():
    one = RunSpec.requested(QWEN, ["learning_rate=1e-5"])
    assert one == RunSpec.requested(QWEN, ["learning_rate=1e-5"])
    assert run_name(one) == run_name(RunSpec.requested(QWEN, ["learning_rate=1e-5"]))
    # another spelling of the same value is the same run (recipes/runs/identity.py checked_item)
    assert run_name(RunSpec.requested(QWEN, ["learning_rate=0.00001"])) == run_name(one)
    assert run_name(one) != run_name(RunSpec.of_catalog(QWEN))


def test_the_sweep_is_recorded_but_is_no_part_of_the_run():
    spec = RunSpec.requested(QWEN, ["learning_rate=1e-5"])
    swept = spec.with_sweep("qwen3-v6e32-sweep-1a2b")
    assert swept.sweep == "qwen3-v6e32-sweep-1a2b" and run_identity(swept) == run_identity(spec)
    assert run_name(swept) == run_name(spec)


def test_user_files_point_train_rl_at_their_mount_and_change_the_run():
    spec = RunSpec.of_catalog(QWEN).with_user_files((REWARDS,))
    assert spec.user_files == (REWARDS,) and isinstance(spec.user_files[0], UserFile)
    assert f"reward_functions_path={USER_FILES_DIR}/rewards.py" in spec.recipe.rl.overrides
    assert "reward_functions=fn1" in spec.recipe.rl.overrides and spec.catalog_rl == QWEN.rl
    assert run_identity(spec)["user_files"] == [REWARDS.identity()]
    assert run_name(spec) != run_name(RunSpec.of_catalog(QWEN))


def test_the_record_keeps_the_recipe_then_the_runs_own_fields():
    spec = RunSpec.requested(QWEN, ["learning_rate=1e-5"], "lr-1e5").with_user_files((REWARDS,))
    recorded = spec.as_recorded()
    assert list(recorded) == [*spec.recipe.model_dump(mode="json"), "run", "sets", "user_files", "load_parameters"]
    assert recorded["run"] == "lr-1e5" and recorded["sets"] == ["learning_rate=1e-5"]
    assert recorded["user_files"] == [{"kind": "rewards", "name": "rewards.py", "content": REWARDS.content,
                                       "functions": ["fn1"], "source": "", "unchecked": ""}]
    assert recorded["load_parameters"] is None and "sweep" not in recorded and "catalog_rl" not in recorded


def test_in_bucket_takes_a_name_as_the_bucket_has_it():
    # a run written before today's run-name rule is read as it is: no check
    assert run_name(RunSpec.in_bucket(QWEN, "Old_Run")) == "Old_Run"
