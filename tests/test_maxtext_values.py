"""--set values (recipes/runs/maxtext_values.py): each read as MaxText's pyconfig reads it (omegaconf's YAML),
checked against the type, bounds and choices shipped per release in recipes/runs/maxtext_keys/<version>.toml
(equal to what its wheel declares), refused in one line, and spelled one way so equal values give one run."""

from __future__ import annotations

import tomllib

import pytest
import yaml

from contracts.maxtext_schema import REPO, MaxTextSchema, fetch_wheel
from contracts.maxtext_set_cases import GROUP, SAME_VALUE_CASES, SET_CASES, SetCase
from contracts.maxtext_types import MaxTextTypes
from peers.settings import spec_of
from tpu_rl.jobs.maxtext import TRAIN_RL, train_command
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import UserError, all_recipes, example_settings, get_recipe
from tpu_rl.recipes.runs.maxtext_values import KEY_LIST_DIR, RUNTIME_BOUNDS, check_value, parse_override, release_schema
from tpu_rl.recipes.runs.spec import RunSpec, default_run_name

VERSIONS = sorted({recipe.maxtext_version for recipe in all_recipes().values()} | {"0.2.3", "0.2.4"})
QWEN = get_recipe("qwen3-v6e32")  # MaxText 0.2.4
LLAMA = get_recipe("llama31-v6e8")  # MaxText 0.2.3


def _types(version: str) -> MaxTextTypes:
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        pytest.skip(f"MaxText {version} wheel unavailable: {reason}")
    return MaxTextTypes(MaxTextSchema(version, wheel))


def _command(run) -> list[str]:
    spec = spec_of(run)
    return train_command(spec.recipe, ArtifactPaths(spec, example_settings())).argv


# --- the shipped files equal their wheels ---------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_each_shipped_type_file_equals_the_types_its_wheel_declares(version):
    types = _types(version)
    shipped = tomllib.loads((REPO / "recipes" / "runs" / KEY_LIST_DIR / f"{version}.toml").read_text())
    regenerate = f"regenerate: .venv/bin/python tools/generate_maxtext_keys.py {version}"
    assert shipped["source"]["wheel"] == types.schema.wheel.name
    assert shipped["keys"] == types.key_specs(TRAIN_RL), regenerate
    assert shipped["set_by_maxtext"] == types.set_by_maxtext(TRAIN_RL), regenerate
    assert shipped["copied_from_top_level"] == types.copied_from_top_level(TRAIN_RL), regenerate
    assert shipped["read_only_nested"] == types.read_only_nested(TRAIN_RL), regenerate
    models = {recipe.model.maxtext_name.replace("-Instruct", "") for recipe in all_recipes().values()
              if recipe.maxtext_version == version}
    assert shipped.get("models", {}) == {model: types.model_values(model) for model in models}, regenerate


@pytest.mark.parametrize("version", VERSIONS)
def test_each_shipped_values_file_equals_its_wheels_config(version):
    """check-rewards' tmvp_config starts from these (tpu_rl.recipes.runs.maxtext_values.release_values)."""
    import json

    types = _types(version)
    shipped = json.loads((REPO / "recipes" / "runs" / KEY_LIST_DIR / f"{version}.values.json").read_text())
    assert shipped["source"]["wheel"] == types.schema.wheel.name
    assert shipped["values"] == types.config_values(TRAIN_RL), (
        f"regenerate: .venv/bin/python tools/generate_maxtext_keys.py {version}")


def test_the_types_hold_what_each_wheels_types_py_says():
    """Read by eye from configs/types.py of each wheel (line numbers of 0.2.3 / 0.2.4)."""
    old, new = release_schema("0.2.3"), release_schema("0.2.4")
    # learning_rate: NonNegativeFloat = Field(3.0e-5, ...)  (L1462 / L1882)
    assert old["keys"]["learning_rate"] == new["keys"]["learning_rate"] == {"type": "float", "ge": 0}
    # train_fraction: float = Field(1.0, ...) (L2049) / Field(1.0, gt=0.0, le=1.0, ...) (L2566)
    assert old["keys"]["train_fraction"] == {"type": "float"}
    assert new["keys"]["train_fraction"] == {"type": "float", "gt": 0.0, "le": 1.0}
    # batch_size: int = Field(1, ...) with no bound (L2044 / L2561); num_generations likewise (L1999 / L2512)
    assert new["keys"]["batch_size"] == new["keys"]["rl.num_generations"] == {"type": "int"}
    assert new["keys"]["rl.loss_algo"] == {"type": "literal", "choices": ["grpo", "gspo-token"]}
    assert new["keys"]["dtype"] == {"type": "enum", "enum": "DType", "choices": ["bfloat16", "float32", "float16"]}
    assert new["keys"]["rl.epsilon_high"] == {"type": "float | None"}  # Optional[float]
    # RLConfig.set_derived_values_and_validate: `self.steps = getattr(self, "train_steps", ...)` (L4690);
    # 0.2.3's validator sets steps only when it is -1 (L2518), so there it is read.
    assert new["set_by_maxtext"]["steps"]["line"] == 4690 and "steps" not in old["set_by_maxtext"]
    assert new["copied_from_top_level"]["dataset.batch_size"] == "batch_size"
    assert old["read_only_nested"]["num_iterations"] == "rl.num_iterations" and not new["read_only_nested"]


# --- reading a value as MaxText does ----------------------------------------------------------------------

def test_values_are_read_with_omegaconfs_yaml_not_plain_pyyaml():
    # PyYAML's YAML 1.1 floats need a dot; omegaconf's loader adds 1e-5 and keeps dates as strings.
    assert yaml.safe_load("2e-5") == "2e-5" and parse_override("learning_rate", "2e-5") == 2e-5
    assert parse_override("run_name_x", "2026-12-01") == "2026-12-01"
    assert parse_override("rl.num_generations", "0x8") == 8
    assert parse_override("enable_dropout", "yes") is True
    # pyconfig's _prepare_for_pydantic: a top-level "none" is None; a nested one stays a string
    assert parse_override("learning_rate", "None") is None
    assert parse_override("rl.epsilon_high", "none") == "none"


def test_an_interpolation_or_broken_yaml_is_one_line():
    with pytest.raises(UserError, match=r"interpolation .* give the value itself"):
        check_value("0.2.4", "learning_rate", "${oc.env:LR}")
    with pytest.raises(UserError, match=r"reads the value as YAML, and it is not") as error:
        check_value("0.2.4", "learning_rate", "[1")
    assert "\n" not in str(error.value)


# --- the table of cases (shared with the real-parser harness) --------------------------------------------

@pytest.mark.parametrize("case", SET_CASES, ids=lambda case: case.id)
def test_each_case_is_accepted_or_refused_in_one_line(case: SetCase):
    version = get_recipe(case.recipe).maxtext_version
    if case.accepted:
        check_value(version, case.key, case.value)
        RunSpec.requested(get_recipe(case.recipe), [f"{case.key}={case.value}"])
        return
    with pytest.raises(UserError) as error:
        RunSpec.requested(get_recipe(case.recipe), [f"{case.key}={case.value}"])
    message = str(error.value)
    said = "set each key on its own" if case.why == GROUP else f"MaxText {version}"
    assert message.startswith(f"--set {case.key}") and "\n" not in message and said in message


def test_the_issues_four_values_name_the_field_its_type_and_its_bounds():
    expected = {
        "learning_rate=abc": "--set learning_rate=abc: learning_rate takes a finite float >= 0 in MaxText 0.2.4, not "
                             "the string 'abc'",
        "rl.num_generations=1": "--set rl.num_generations=1: rl.num_generations takes an int >= 2 in MaxText "
                                f"0.2.4 ({RUNTIME_BOUNDS['rl.num_generations'].why}), not 1",
        "batch_size=0": "--set batch_size=0: batch_size takes an int >= 1 in MaxText 0.2.4 "
                        f"({RUNTIME_BOUNDS['batch_size'].why}), not 0",
        "train_fraction=2": "--set train_fraction=2: train_fraction takes a finite float > 0.0 and <= 1.0 in MaxText "
                            "0.2.4, not 2",
    }
    for item, message in expected.items():
        with pytest.raises(UserError) as error:
            RunSpec.requested(QWEN, [item])
        assert str(error.value) == message


def test_a_key_train_rl_overwrites_is_refused_with_where_it_is_set():
    with pytest.raises(UserError) as error:
        RunSpec.requested(QWEN, ["steps=100"])
    assert str(error.value) == (
        "--set steps is refused: MaxText 0.2.4 sets it itself (RLConfig.set_derived_values_and_validate, "
        "configs/types.py L4690: steps = getattr(self, 'train_steps', getattr(self, 'num_batches', 10))), so a "
        "value would change nothing")
    with pytest.raises(UserError, match=r"copies the top-level batch_size, which rl\.yml sets, over it .*"
                                         r"use --set batch_size=\.\.\.$"):
        RunSpec.requested(QWEN, ["dataset.batch_size=4"])
    with pytest.raises(UserError, match=r"0\.2\.3's train_rl reads rl\.num_iterations.*use --set "
                                         r"rl\.num_iterations=\.\.\.$"):
        RunSpec.requested(LLAMA, ["num_iterations=2"])


def test_a_whole_group_is_refused_with_each_key_on_its_own():
    """issue 37: `--set 'rl={...}'` was accepted and the price ignored it; each key is set on its own."""
    with pytest.raises(UserError, match=r"^--set rl=\{num_generationz: 4\}: rl is a group of keys.*"
                                        r"e\.g\. --set rl\.num_generationz=4$"):
        RunSpec.requested(QWEN, ["rl={num_generationz: 4}"])


@pytest.mark.parametrize("name", list(all_recipes()))
def test_every_recipe_override_passes_the_check_of_its_release_and_model(name):
    recipe = get_recipe(name)
    for item in recipe.rl.overrides:
        key, _, text = item.partition("=")
        check_value(recipe.maxtext_version, key, text, recipe.model.maxtext_name)


def test_a_key_the_models_yml_sets_keeps_its_value_unless_override_model_config():
    # configs/models/qwen3-30b-a3b.yml (0.2.4 wheel): enable_dropout: false, base_emb_dim: 2048
    with pytest.raises(UserError) as error:
        RunSpec.requested(QWEN, ["enable_dropout=True"])
    assert str(error.value) == (
        "--set enable_dropout=True: configs/models/qwen3-30b-a3b.yml sets enable_dropout=false and MaxText 0.2.4 "
        "refuses another value for it (pyconfig validate_no_keys_overridden_twice) unless you also --set "
        "override_model_config=true")
    RunSpec.requested(QWEN, ["enable_dropout=false", "base_emb_dim=2048"])  # the same values are allowed
    RunSpec.requested(QWEN, ["enable_dropout=True", "override_model_config=true"])
    with pytest.raises(UserError, match="configs/models/llama3.1-8b.yml sets enable_dropout=false"):
        RunSpec.requested(LLAMA, ["enable_dropout=true"])  # llama3.1-8b-Instruct loads llama3.1-8b.yml


# --- one value, one name --------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe_name,key,spellings", SAME_VALUE_CASES, ids=lambda v: str(v))
def test_equal_values_spelled_differently_give_one_run_and_one_command(recipe_name, key, spellings):
    recipe = get_recipe(recipe_name)
    runs = [RunSpec.requested(recipe, [f"{key}={spelling}"]) for spelling in spellings]
    assert len({default_run_name(run) for run in runs}) == 1
    assert len({tuple(_command(run)) for run in runs}) == 1


def test_a_value_equal_to_the_recipes_own_is_the_recipes_run_and_another_value_is_not():
    assert "learning_rate=2e-5" in QWEN.rl.overrides
    same = RunSpec.requested(QWEN, ["learning_rate=0.00002"])
    own = RunSpec.of_catalog(QWEN)
    assert default_run_name(same) == default_run_name(own) and _command(same) == _command(QWEN)
    assert default_run_name(RunSpec.requested(QWEN, ["learning_rate=0.00003"])) != default_run_name(own)


def test_the_one_spelling_is_what_the_train_command_passes():
    recipe = RunSpec.requested(QWEN, ["learning_rate=0.00003", "enable_tunix_perf_metrics=True", "rl.num_generations=8.0"])
    command = _command(recipe)
    assert {"learning_rate=3e-5", "enable_tunix_perf_metrics=true", "rl.num_generations=8"} <= set(command)
    assert recipe.sets == ("learning_rate=0.00003", "enable_tunix_perf_metrics=True", "rl.num_generations=8.0")
