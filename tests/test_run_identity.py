"""Runs (recipes/runs/identity.py, recipes/runs/spec.py): the run name and what it hashes, the conversion runs share, --set and the shipped
MaxText key lists, and what the names, labels and paths of a run are. Pure: no cloud."""

from __future__ import annotations

import re
import subprocess

import pytest

from tpu_rl import jobs
from contracts.maxtext_schema import REPO, MaxTextSchema, fetch_wheel
from tpu_rl.jobs.k8s import CONVERSION_LABEL, RUN_LABEL, SPEC_DIGEST_ANNOTATION
from tpu_rl.jobs.maxtext import TRAIN_RL, train_command
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import STEPS, UserError, all_recipes, example_settings, get_recipe
from tpu_rl.recipes.conventions import MAX_JOBSET_NAME
from tpu_rl.recipes.runs.identity import (KEY_LIST_DIR, MAX_RUN_NAME, PIPELINE_KEYS, RL_FIELDS, check_run_name,
                                          maxtext_keys)
from tpu_rl.recipes.runs.schedule import SCHEDULE_KEY
from tpu_rl.recipes.runs.spec import RunSpec, default_run_name, run_name
from tpu_rl.scripts.pipeline.record import git_commit, redacted

SETTINGS = example_settings()
QWEN = get_recipe("qwen3-v6e32")  # MaxText 0.2.4
LLAMA = get_recipe("llama31-v6e8")  # MaxText 0.2.3
VERSIONS = sorted({recipe.maxtext_version for recipe in all_recipes().values()} | {"0.2.3", "0.2.4"})


def of(recipe) -> RunSpec:
    """The recipe's own run, as recipes.toml defines it."""
    return RunSpec.of_catalog(recipe)


def requested(recipe, sets=(), run=None) -> RunSpec:
    return RunSpec.requested(recipe, sets, run)


def paths(spec: RunSpec) -> ArtifactPaths:
    return ArtifactPaths(spec, SETTINGS)


def train_value(spec: RunSpec, key: str) -> str:
    return train_command(spec.recipe, paths(spec)).value(key)


# --- the shipped key lists ------------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_each_shipped_key_list_equals_the_keys_of_its_wheel(version):
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        pytest.skip(f"MaxText {version} wheel unavailable: {reason}")
    shipped = (REPO / "recipes" / "runs" / KEY_LIST_DIR / f"{version}.toml").read_text()
    assert f"# {wheel.name} by tools/generate_maxtext_keys.py" in shipped, "the header names the wheel it came from"
    assert sorted(maxtext_keys(version)) == MaxTextSchema(version, wheel).override_keys(TRAIN_RL), (
        f"regenerate: .venv/bin/python tools/generate_maxtext_keys.py {version}")


def test_the_key_lists_hold_what_the_research_found_in_each_release():
    """Counts and keys established by importing each wheel's types.py (pydantic model_fields), research §2."""
    old, new = maxtext_keys("0.2.3"), maxtext_keys("0.2.4")
    assert len({key for key in old if "." not in key}) == 734  # MaxTextConfig fields; no nested-model rule
    assert len({key for key in new if "." not in key}) == 838  # RLConfig fields and its nested models'
    assert "data_template_path" in new and "data_template_path" not in old and "chat_template_path" in old
    assert "hf_subset" in new and "hf_subset" not in old
    assert "lora_rank" not in old and "lora.lora_rank" in old  # 0.2.3 rejects a nested field by its bare name
    assert "rl.degenerate_group_masking" in old and "rl.degenerate_group_masking" not in new
    assert "debug.rl" in old and "debug.rl" not in new and "debug" in new  # a model in 0.2.3, a bool in 0.2.4
    assert {"rl.num_generations", "rl.num_iterations", "num_iterations", "learning_rate"} <= new


@pytest.mark.parametrize("name", list(all_recipes()))
def test_every_recipe_override_is_in_its_releases_key_list(name):
    recipe = get_recipe(name)
    keys = maxtext_keys(recipe.maxtext_version)
    assert [item for item in recipe.rl.overrides if item.partition("=")[0] not in keys] == []


def test_every_key_the_train_command_derives_is_refused_or_maps_to_the_rl_table():
    # learning_rate_schedule_steps is derived only while no override sets it (recipes/runs/schedule.py).
    derived = [item.partition("=")[0] for item in train_command(QWEN, paths(of(QWEN))).overrides
               if item not in QWEN.rl.overrides]
    assert derived and [key for key in derived
                        if key not in PIPELINE_KEYS and key not in RL_FIELDS and key != SCHEDULE_KEY] == []


def test_a_set_schedule_length_replaces_the_derived_one_and_follows_no_step_count():
    recipe = requested(QWEN, ["num_batches=1000", "learning_rate_schedule_steps=300"])
    items = [item for item in train_command(recipe.recipe, paths(recipe)).overrides
             if item.startswith(SCHEDULE_KEY + "=")]
    assert items == ["learning_rate_schedule_steps=300"]
    derived = [item for item in train_command(requested(QWEN, ["num_batches=900"]).recipe, paths(of(QWEN))).overrides
               if item.startswith(SCHEDULE_KEY + "=")]
    assert derived == ["learning_rate_schedule_steps=1800"]  # the recipe's ratio 2 x 900 steps (7,200 of 7,473 rows)


# --- --set ---------------------------------------------------------------------------------------------

def test_an_unknown_key_is_refused_naming_it_and_the_closest_valid_keys():
    with pytest.raises(UserError) as error:
        requested(QWEN, ["learning_rat=1e-5"])
    message = str(error.value)
    assert message.startswith("--set learning_rat: not a key MaxText 0.2.4's train_rl accepts; closest: learning_rate")
    assert "\n" not in message


def test_an_unknown_rl_sub_key_is_refused_although_maxtext_would_drop_it():
    with pytest.raises(UserError, match=r"--set rl\.num_generaitons: .*closest: rl\.num_generations"):
        requested(QWEN, ["rl.num_generaitons=8"])


def test_keys_are_checked_against_the_recipes_own_release():
    requested(QWEN, ["data_template_path=maxtext/examples/chat_templates/gsm8k_rl.json"])
    with pytest.raises(UserError, match="MaxText 0.2.3"):
        requested(LLAMA, ["data_template_path=maxtext/examples/chat_templates/gsm8k_rl.json"])


@pytest.mark.parametrize("key", sorted(PIPELINE_KEYS))
def test_keys_that_tpu_rl_sets_are_refused_with_the_reason(key):
    with pytest.raises(UserError) as error:
        requested(QWEN, [f"{key}=x"])
    assert str(error.value) == f"--set {key} is refused: {PIPELINE_KEYS[key]}"


def test_checkpointing_cannot_be_switched_off():
    with pytest.raises(UserError, match="enable_checkpointing=false leaves no checkpoint"):
        requested(QWEN, ["enable_checkpointing=false"])


def test_a_set_without_a_value_is_refused():
    with pytest.raises(UserError, match="--set 'learning_rate' is not KEY=VALUE"):
        requested(QWEN, ["learning_rate"])


def test_a_set_key_the_recipe_sets_gets_the_new_value_once_and_later_wins():
    assert "learning_rate=2e-5" in QWEN.rl.overrides
    recipe = requested(QWEN, ["learning_rate=3e-5", "learning_rate=1e-5"])
    overrides = train_command(recipe.recipe, paths(recipe)).overrides
    assert [item for item in overrides if item.startswith("learning_rate=")] == ["learning_rate=1e-5"]
    assert recipe.sets == ("learning_rate=3e-5", "learning_rate=1e-5")


def test_the_step_count_export_and_progress_follow_set():
    assert QWEN.train_steps == 50
    fewer = requested(QWEN, ["num_batches=20"])
    assert fewer.recipe.train_steps == 20 and train_value(fewer, "num_batches") == "20"
    assert paths(fewer).final_params.endswith("/checkpoints/actor/20/model_params/")
    export = jobs.maxtext_commands(fewer.recipe, paths(fewer))["export"]
    assert export.value("load_parameters_path") == paths(fewer).final_params
    assert requested(QWEN, ["train_fraction=0.5"]).recipe.train_steps == 25
    # 0.2.4 reads num_iterations as rl.num_iterations too: one setting, whichever spelling --set uses
    spec = requested(QWEN, ["rl.num_iterations=2"])
    assert spec.with_sets(["num_iterations=3"]).recipe.train_steps == 150


def test_a_step_factor_that_is_not_a_number_is_refused():
    with pytest.raises(UserError, match=r"--set train_fraction=half: train_fraction takes a finite float > 0\.0 and <= 1\.0 "
                                        r"in MaxText 0\.2\.4, not the string 'half'"):
        requested(QWEN, ["train_fraction=half"])


# --- run names -----------------------------------------------------------------------------------------

def test_the_default_run_name_is_the_recipe_and_a_short_hash():
    name = run_name(of(QWEN))
    assert re.fullmatch(r"qwen3-v6e32-[0-9a-f]{7}", name) and name == default_run_name(of(QWEN))
    assert train_value(of(QWEN), "run_name") == name


def test_a_changed_setting_gives_a_new_run_and_the_same_settings_the_same_run():
    changed = requested(QWEN, ["learning_rate=1e-5"])
    assert run_name(changed) != run_name(of(QWEN))
    assert run_name(requested(QWEN, ["learning_rate=1e-5"])) == run_name(changed)
    assert run_name(requested(QWEN, ["learning_rate=2e-5"])) == run_name(of(QWEN))  # the recipe's own value
    assert run_name(requested(QWEN, ["num_batches=51"])) != run_name(of(QWEN))
    reordered = QWEN.rl.model_copy(update={"overrides": tuple(reversed(QWEN.rl.overrides))})
    assert run_name(of(QWEN.model_copy(update={"rl": reordered}))) == run_name(of(QWEN))


def test_capacity_and_checkpoint_period_do_not_change_the_run():
    assert run_name(of(QWEN.model_copy(update={"capacity": ("spot",)}))) == run_name(of(QWEN))
    period = requested(QWEN, ["checkpoint_period=5"])
    assert run_name(period) == run_name(of(QWEN)) and train_value(period, "checkpoint_period") == "5"


def test_the_image_patches_and_shape_change_the_run():
    release = QWEN.maxtext.model_copy(update={"image": QWEN.maxtext.image + "-rebuilt"})
    assert run_name(of(QWEN.model_copy(update={"maxtext": release}))) != run_name(of(QWEN))
    assert run_name(of(QWEN.model_copy(update={"patches": ()}))) != run_name(of(QWEN))
    shape = QWEN.shape.model_copy(update={"slices": 2})
    assert run_name(of(QWEN.model_copy(update={"shape": shape}))) != run_name(of(QWEN))


def test_run_chooses_the_name_and_keeps_the_settings():
    recipe = requested(QWEN, ["learning_rate=1e-5"], "lr-1e5")
    assert run_name(recipe) == train_value(recipe, "run_name") == "lr-1e5"
    assert "learning_rate=1e-5" in recipe.recipe.rl.overrides


@pytest.mark.parametrize("name", ["", "a", "A1", "1st-run", "run_2", "run-", "-run", "a/b", "${oc.env:X}", "true",
                                  "none", "null", "a" * (MAX_RUN_NAME + 1)])
def test_a_bad_run_name_is_one_line_with_the_rule(name):
    with pytest.raises(UserError) as error:
        check_run_name(name)
    assert str(error.value).startswith(f"--run '{name}' is not a run name: use 2-{MAX_RUN_NAME} lowercase letters")


@pytest.mark.parametrize("name", ["lr-1e5", "ab", "a" * MAX_RUN_NAME])
def test_a_good_run_name_is_kept(name):
    assert check_run_name(name) == name


@pytest.mark.parametrize("recipe_name", list(all_recipes()))
def test_every_jobset_name_fits_even_for_the_longest_recipe_and_run_names(recipe_name):
    recipe = get_recipe(recipe_name)
    longest = recipe.model_copy(update={"name": "r" * 20})
    for candidate in (of(recipe), of(longest), requested(longest, [], "r" * MAX_RUN_NAME)):
        assert all(len(jobs.jobset_name(candidate, step)) <= MAX_JOBSET_NAME for step in STEPS)


# --- what runs share, and what is theirs -----------------------------------------------------------------

def test_runs_share_the_conversion_and_keep_their_own_outputs():
    other = requested(QWEN, ["learning_rate=1e-5"])
    one, two = paths(of(QWEN)), paths(other)
    assert re.fullmatch(r"gs://tpu-rl-example-artifacts/qwen3-30b-a3b/max-text-format/0\.2\.4-scan-[0-9a-f]{7}/",
                        one.converted)
    assert one.converted == two.converted and one.progress_marker("convert") == two.progress_marker("convert")
    assert train_value(other, "load_parameters_path") == f"{one.converted}0/items/"
    for where in ("run_root", "actor_checkpoints", "tensorboard", "hf_export", "run_record"):
        assert getattr(one, where) != getattr(two, where), where
    assert two.tensorboard == f"gs://tpu-rl-example-artifacts/qwen3-30b-a3b/trained/{run_name(other)}/tensorboard/"
    assert two.hf_export == f"gs://tpu-rl-example-artifacts/qwen3-30b-a3b/hf-trained/{run_name(other)}/"
    first, second = jobs.render_manifests(of(QWEN), SETTINGS), jobs.render_manifests(other, SETTINGS)
    assert first["convert"] == second["convert"]  # one shared convert JobSet, same name, same spec
    for step in ("train", "export"):
        assert first[step]["metadata"]["name"] != second[step]["metadata"]["name"]


def test_what_conversion_depends_on_changes_its_directory():
    unscanned = paths(of(get_recipe("gemma4-v6e64"))).converted
    assert re.search(r"/gemma4-26b/max-text-format/0\.2\.4-unscanned-[0-9a-f]{7}/$", unscanned)
    model = QWEN.model.model_copy(update={"hf_repo": "Qwen/Qwen3-30B-A3B-Thinking-2507"})
    assert paths(of(QWEN.model_copy(update={"model": model}))).converted != paths(of(QWEN)).converted


def test_train_and_export_carry_the_run_label_and_convert_the_conversion_label():
    rendered = jobs.render_manifests(of(QWEN), SETTINGS)
    run = run_name(of(QWEN))
    for step, manifest in rendered.items():
        labels = manifest["metadata"]["labels"]
        pod_labels = [job["template"]["spec"]["template"]["metadata"]["labels"]
                      for job in manifest["spec"]["replicatedJobs"]]
        if step == "convert":
            owner = CONVERSION_LABEL
            assert RUN_LABEL not in labels and labels[owner] == manifest["metadata"]["name"].removesuffix("-convert")
        else:
            owner = RUN_LABEL
            assert labels[owner] == run and manifest["metadata"]["name"] == f"{run}-{step}"
        assert all(pod[owner] == labels[owner] for pod in pod_labels)


def test_the_spec_digest_changes_with_the_spec_only():
    def digests(spec):
        return {step: m["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION]
                for step, m in jobs.render_manifests(spec, SETTINGS).items()}

    same, changed = digests(of(QWEN)), digests(requested(QWEN, ["learning_rate=1e-5"], run_name(of(QWEN))))
    assert same == digests(of(QWEN)) and all(re.fullmatch(r"[0-9a-f]{64}", value) for value in same.values())
    assert changed["convert"] == same["convert"] and changed["train"] != same["train"]


def test_the_vm_script_of_another_run_skips_the_shared_conversion():
    # (the VM runs the recipe's own run; a render with --set shows what another would do)
    other = requested(LLAMA, ["learning_rate=1e-6"])
    script = jobs.render_startup_script(other, SETTINGS)
    assert f"[convert]='{paths(of(LLAMA)).progress_marker('convert')}'" in script
    assert f"[train]='{paths(other).progress_marker('train')}'" in script
    assert paths(other).progress_marker("train") != paths(of(LLAMA)).progress_marker("train")
    assert f"run {run_name(other)}" in script.splitlines()[1]


# --- the run record's helpers ------------------------------------------------------------------------------

def test_the_git_commit_is_heads_for_this_checkout_and_unknown_elsewhere(tmp_path):
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", head) and git_commit(REPO) == head
    assert git_commit(REPO / "scripts") == "unknown"  # inside a checkout, but not the package's own root
    assert git_commit(tmp_path) == "unknown"


def test_secret_looking_values_are_masked_in_the_command_line():
    assert redacted(["tpu-rl", "run", "r", "--set", "hf_access_token=hf_abc", "--set", "learning_rate=1e-5"]) == [
        "tpu-rl", "run", "r", "--set", "hf_access_token=***", "--set", "learning_rate=1e-5"]
