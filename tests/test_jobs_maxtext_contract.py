"""Every key=value and --flag we pass is accepted by the pinned MaxText release (read from its wheel).

The wheels are downloaded once into .cache/maxtext (gitignored); without PyPI the tests skip and say why, and under CI=true that skip fails the run naming the wheel.
The negative tests prove the check catches what the anchors say differs between 0.2.3 and 0.2.4.
"""

from __future__ import annotations

import shlex

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.maxtext_schema import MaxTextSchema, fetch_wheel
from tpu_rl.jobs.maxtext import TRAIN_RL, MaxTextCommand
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import all_recipes, example_settings, get_recipe

SETTINGS = example_settings()


@pytest.fixture(scope="session")
def maxtext():
    """MaxText schemas by version, for every version a recipe pins plus 0.2.3/0.2.4 for the negative tests."""
    versions = {recipe.maxtext_version for recipe in all_recipes().values()} | {"0.2.3", "0.2.4"}
    schemas = {}
    for version in sorted(versions):
        wheel, reason = fetch_wheel(version)
        if wheel is None:
            pytest.skip(f"MaxText {version} wheel unavailable, cannot check overrides: {reason}")
        schemas[version] = MaxTextSchema(version, wheel)
    return schemas


def commands(name: str) -> dict[str, MaxTextCommand]:
    recipe = get_recipe(name)
    return jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS))


@pytest.mark.parametrize("name", list(all_recipes()))
@pytest.mark.parametrize("step", ["convert", "train", "export"])
def test_every_override_and_flag_is_accepted_by_the_pinned_maxtext(maxtext, name, step):
    recipe = get_recipe(name)
    command = commands(name)[step]
    assert maxtext[recipe.maxtext_version].check(command.module, command.overrides, command.flags) == []


def _words_in_script(text: str, module: str) -> list[str]:
    """The words of the one `python3 -m <module>` command of a shell script as bash reads them: over its
    backslash-continued lines, with the quoting undone (shlex, not the code that wrote the quoting)."""
    assert text.count(f"python3 -m {module} ") == 1, module
    lines = text[text.index(f"python3 -m {module} "):].splitlines()
    last = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
    return shlex.split(" ".join(line.removesuffix("\\") for line in lines[:last + 1]))


def test_the_vm_script_runs_exactly_the_checked_commands():
    recipe = get_recipe("llama31-v6e8")
    text = jobs.render_startup_script(spec_of(recipe), SETTINGS)
    for command in commands("llama31-v6e8").values():
        # The export's checkpoint step is the one word bash fills in at run time (the newest finished step,
        # jobs/vm_script/steps.sh find_export_step); with the computed step it is the checked command.
        words = [word.replace("${EXPORT_STEP}", str(recipe.last_step)) for word in _words_in_script(text, command.module)]
        assert words == command.argv


def test_train_rl_validates_against_rlconfig_from_0_2_4_and_maxtextconfig_before(maxtext):
    assert maxtext["0.2.4"].config_class(TRAIN_RL) == "RLConfig"
    assert maxtext["0.2.3"].config_class(TRAIN_RL) == "MaxTextConfig"


def test_qwen3_train_overrides_on_0_2_3_are_caught(maxtext):
    problems = maxtext["0.2.3"].check(TRAIN_RL, commands("qwen3-v6e32")["train"].overrides)
    text = "\n".join(problems)
    assert "'data_template_path' is not a MaxText 0.2.3" in text
    assert "'ragged_gather_reduce_fallback' is not a MaxText 0.2.3" in text
    assert "'debug=True': 'debug' is a mapping" in text
    assert "vllm_additional_config.maxtext_config.ragged_gather_reduce_fallback is not" in text
    assert len(problems) == 4, problems


def test_export_hf_model_path_flag_is_caught_on_0_2_3(maxtext):
    export = commands("qwen3-v6e32")["export"]
    assert any("--hf_model_path" in flag for flag in export.flags)
    problems = maxtext["0.2.3"].check(export.module, export.overrides, export.flags)
    assert problems == ["'--hf_model_path' is not a flag of maxtext.checkpoint_conversion.to_huggingface in MaxText 0.2.3"]


def test_llama_export_on_0_2_3_does_not_pass_hf_model_path():
    assert not any(flag.startswith("--hf_model_path") for flag in commands("llama31-v6e8")["export"].flags)


def test_a_typo_in_an_rl_subkey_is_caught_although_maxtext_would_ignore_it(maxtext):
    problems = maxtext["0.2.4"].check(TRAIN_RL, ["rl.num_generaitons=4", "rl.num_generations=4"])
    assert problems == ["'rl.num_generaitons': 'num_generaitons' is not a key of 'rl' in MaxText 0.2.4"]


def test_an_unknown_top_level_key_is_caught(maxtext):
    assert maxtext["0.2.4"].check(TRAIN_RL, ["batch_sise=8"]) == [
        "'batch_sise' is not a MaxText 0.2.4 RLConfig field (maxtext.trainers.post_train.rl.train_rl)"]


def test_a_non_bool_for_a_bool_field_is_caught(maxtext):
    assert maxtext["0.2.4"].check(TRAIN_RL, ["debug=yes"]) == ["'debug=yes': 'debug' is a bool in MaxText 0.2.4"]


def test_unknown_keys_inside_vllm_maxtext_config_are_caught(maxtext):
    value = "vllm_additional_config={'maxtext_config': {'model_name': 'gemma4-26b', 'prefuse_moe_wieghts': 'true'}}"
    assert maxtext["0.2.4"].check(TRAIN_RL, [value]) == [
        "vllm_additional_config.maxtext_config.prefuse_moe_wieghts is not a MaxText 0.2.4 field"]


def test_instruct_model_names_resolve_to_the_base_yml_and_unknown_models_are_caught(maxtext):
    schema = maxtext["0.2.3"]
    assert schema.model_exists("llama3.1-8b-Instruct") and not schema.exists("configs/models/llama3.1-8b-Instruct.yml")
    assert schema.check(TRAIN_RL, ["model_name=llama9-1b"]) == [
        "model_name 'llama9-1b' has no configs/models yml in MaxText 0.2.3"]


@pytest.mark.parametrize("version", ["0.2.3", "0.2.4"])
def test_the_evaluation_defaults_are_the_wheels_rl_yml(maxtext, version):
    """recipes.toml's eval_defaults (what sizes the evaluation where a recipe says nothing) are rl.yml's."""
    import tomllib
    from importlib import resources

    table = tomllib.loads(resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text())
    defaults = table["maxtext"][version]["eval_defaults"]
    config = maxtext[version].config_yml(TRAIN_RL)
    wheel = {key: (config[key.partition(".")[0]][key.partition(".")[2]] if "." in key else config[key])
             for key in defaults}
    assert defaults == wheel


def test_the_reward_and_data_settings_exist_where_the_options_allow_them(maxtext):
    from tpu_rl.recipes.runs.user_files import FIRST_RELEASE, SETTING

    keys = {version: set(maxtext[version].accepted(maxtext[version].config_class(TRAIN_RL))) for version in maxtext}
    for kind, first in FIRST_RELEASE.items():
        assert SETTING[kind] in keys[first], kind
    assert "reward_functions_path" not in keys["0.2.3"] and "reward_functions" in keys["0.2.4"]
