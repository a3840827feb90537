"""Our commands do what the seeds' commands do: the same arguments, env and patches, except for the
deliberate differences listed (with reasons) in tests/seed_differences.py."""

from __future__ import annotations

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.seeds import as_mapping, seed_command, seed_env_flags, seed_replacements, seed_text, seed_variables
from tpu_rl.jobs.paths import ArtifactPaths
from seed_differences import DIFFERENCES, SEED_STEPS_NOT_CARRIED_OVER, explain
from tpu_rl.recipes import STEPS, all_recipes, example_settings, get_recipe

SETTINGS = example_settings()


def seed_or_skip(name: str) -> str:
    text = seed_text(get_recipe(name))
    if text is None:
        pytest.skip(f"the seed of recipe '{name}' is not in ../shared/seeds (absent outside the workplace)")
    return text


def normalized(value: str) -> str:
    return value.lower() if value.lower() in ("true", "false") else value


def differences(name: str, step: str) -> dict[str, tuple[str | None, str | None]]:
    """key -> (seed value, our value) wherever they differ; None means absent."""
    recipe = get_recipe(name)
    text = seed_or_skip(name)
    ours_command = jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS))[step]
    seed = as_mapping(seed_command(text, ours_command.module, seed_variables(text, SETTINGS)))
    ours = as_mapping([*ours_command.overrides, *ours_command.flags])
    return {
        key: (seed.get(key), ours.get(key))
        for key in seed.keys() | ours.keys()
        if normalized(seed.get(key, "\0")) != normalized(ours.get(key, "\0"))
    }


@pytest.mark.parametrize("name", list(all_recipes()))
@pytest.mark.parametrize("step", STEPS)
def test_arguments_equal_the_seed_except_documented_differences(name, step):
    unexplained = {key: values for key, values in differences(name, step).items() if not explain(name, step, key)}
    assert unexplained == {}, "add a tests/seed_differences.py entry with the reason, or fix the command"


def test_every_documented_difference_is_still_a_difference():
    actual = {(name, step, key) for name in all_recipes() for step in STEPS for key in differences(name, step)}
    for entry in DIFFERENCES:
        covered = [case for case in actual if entry.covers(*case)]
        assert covered, f"stale entry in tests/seed_differences.py: {entry.key} for {entry.recipes or 'all'}"


def test_the_token_is_the_only_argument_dropped_from_the_gke_seeds():
    for name in ("qwen3-v6e32", "gemma4-v6e64"):
        for step in STEPS:
            dropped = [key for key, (seed, ours) in differences(name, step).items() if ours is None]
            assert dropped == ["hf_access_token"]


@pytest.mark.parametrize("name", ["qwen3-v6e32", "gemma4-v6e64"])
def test_train_env_includes_the_seed_env_flags(name):
    text = seed_or_skip(name)
    train = jobs.render_manifests(spec_of(get_recipe(name)), SETTINGS)["train"]
    by_container = {}
    for replicated in train["spec"]["replicatedJobs"]:
        spec = replicated["template"]["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            by_container[container["name"]] = {e["name"]: e.get("value") for e in container["env"]}
    for flag, container in (("--env", "workload-container"), ("--pathways-proxy-env", "pathways-proxy"),
                            ("--pathways-server-env", "pathways-rm"), ("--pathways-worker-env", "pathways-worker")):
        expected = seed_env_flags(text, flag)
        assert expected, f"no {flag} in the seed"
        assert {k: by_container[container].get(k) for k in expected} == expected, (flag, container)
    # the seeds' inline environment of the train_rl process
    assert by_container["workload-container"]["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    assert by_container["workload-container"]["JAX_PLATFORMS"] == "proxy,cpu"


@pytest.mark.parametrize("name", ["qwen3-v6e32", "gemma4-v6e64"])
def test_the_seed_source_patches_are_the_recipe_patches_or_listed_as_not_carried_over(name):
    recipe = get_recipe(name)
    ours = {tuple(pair) for patch in recipe.patches for pair in patch.replacements}
    seed = set(seed_replacements(seed_or_skip(name)))
    assert ours <= seed
    markers = [entry.marker for entry in SEED_STEPS_NOT_CARRIED_OVER if name in entry.recipes]
    unexplained = [pair for pair in seed - ours if not any(marker in pair[0] for marker in markers)]
    assert unexplained == []


@pytest.mark.parametrize("entry", SEED_STEPS_NOT_CARRIED_OVER, ids=lambda entry: entry.what)
def test_each_seed_step_not_carried_over_is_in_its_seed_and_not_in_our_script(entry):
    for name in entry.recipes:
        assert entry.marker in seed_or_skip(name), f"stale entry: the seed of {name} has no {entry.marker}"
        recipe = get_recipe(name)
        if recipe.platform != "gke":  # the VM's startup script
            assert entry.marker.split(" -y")[0] not in jobs.render_startup_script(spec_of(recipe), SETTINGS)
            continue
        train = jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]
        head = train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        script = head["containers"][0]["command"][-1]
        assert entry.marker not in script.split("exec python3", 1)[0]
