"""`--set` values MaxText's types take but no run means (issue 28): `run` and `render` refuse them in one
line naming the field, `--unusual-values` lets a deliberate one through, and the commands that only find
a run by its --set items (status, logs, cancel) take them as given to `run`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()
FIX = "; no run means that: give the value you mean, or pass --unusual-values to submit it as it is"


@pytest.mark.parametrize("item, why", [
    # pydantic's lax mode takes a YAML boolean as 1.0 for learning_rate (MaxText 0.2.4 types.py: a float >= 0).
    ("learning_rate=true", "learning_rate takes a number, and YAML reads true as a boolean (MaxText would take it as 1)"),
    # per_device_batch_size is `int | float` with no bound in types.py; rl.yml's 12 (the release's own value).
    ("per_device_batch_size=-4", "per_device_batch_size is negative, and MaxText 0.2.4's own value is 12"),
    ("num_test_batches=-3", "num_test_batches is negative, and MaxText 0.2.4's own value is 5"),
    ("learning_rate=1e3", "learning_rate is more than 100000 times MaxText 0.2.4's own value (3e-06)"),
])
def test_render_refuses_a_value_no_run_means_and_the_flag_lets_it_through(tmp_path, monkeypatch, item, why):
    monkeypatch.chdir(tmp_path)
    refused = runner.invoke(app, ["render", RECIPE, "--out", str(tmp_path / "out"), "--set", item])
    assert refused.exit_code == 2, refused.output
    assert refused.output.splitlines() == [f"error: --set {item}: {why}{FIX}"]
    assert not (tmp_path / "out").exists()
    taken = runner.invoke(app, ["render", RECIPE, "--out", str(tmp_path / "out"), "--set", item, "--unusual-values"])
    assert taken.exit_code == 0, taken.output


def test_usual_values_pass_and_run_refuses_before_the_cloud(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for item in ("learning_rate=1e-5", "per_device_batch_size=8", "train_micro_batch_size=-1", "max_target_length=4096"):
        result = runner.invoke(app, ["render", RECIPE, "--out", str(tmp_path / item), "--set", item])
        assert result.exit_code == 0, result.output


def test_run_refuses_it_and_status_finds_the_run_by_it(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--set", "learning_rate=true"])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1].startswith("error: --set learning_rate=true: learning_rate takes a number")
    assert cloud["kube"].created == []
    status = runner.invoke(app, ["status", RECIPE, "--set", "learning_rate=true"])  # as given to run
    assert status.exit_code == 0, status.output


def test_the_hints_of_a_run_with_an_unusual_value_repeat_the_flag(cloud, monkeypatch):
    from cli_helpers import interrupt, session_hook

    from peers.fixtures import jobset_of

    cloud["kube"].plan(jobset_of(RECIPE, "convert"), outcome="hang")
    session_hook(monkeypatch, sleep=interrupt)
    result = runner.invoke(app, ["run", RECIPE, "--set", "learning_rate=1e3", "--unusual-values"])
    assert result.exit_code == 130, result.output
    text = " ".join(result.output.split())
    assert "Reattach with `tpu-rl run qwen3-v6e32 --steps convert,train,export --set learning_rate=1e3 " \
           "--unusual-values`" in text, text


def _seed_items() -> list[tuple[str, str]]:
    """Every key=value item of the seeds' commands whose key is a MaxText 0.2.4 key and whose value is literal."""
    import re

    from ci_skips import in_ci
    from contracts.seeds import SEEDS

    from tpu_rl.recipes.runs.maxtext_values import release_schema

    seeds = sorted(SEEDS.glob("*.txt"))
    if not seeds:
        if in_ci():
            pytest.fail(f"the seeds are missing: {SEEDS} holds no *.txt")
        pytest.skip(f"the seeds are not in {SEEDS} (absent outside the workplace)")
    keys = release_schema("0.2.4")["keys"]
    items = []
    for seed in seeds:
        for key, value in re.findall(r"(?<![\w.$-])([a-z][\w.]*)=([^\s\\\"'$]+)", seed.read_text()):
            if key in keys:
                items.append((seed.name, f"{key}={value}"))
    return items


def _refused(given: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    from tpu_rl.recipes.runs.maxtext_values import parse_override
    from tpu_rl.recipes.runs.usual_values import unusual

    return [(where, item, why) for where, version, item in given
            if (why := unusual(version, item.partition("=")[0], parse_override(*item.split("=", 1))))]


def test_every_recipe_override_is_usual():
    """A recipe's own overrides are runs people make: none may be refused (rollout_tensor_parallelism=-1,
    recipe llama31-v6e8, means auto in MaxText 0.2.4)."""
    from tpu_rl.recipes import all_recipes

    given = [(recipe.name, recipe.maxtext_version, item) for recipe in all_recipes().values()
             for item in recipe.rl.overrides]
    assert any(item == "rollout_tensor_parallelism=-1" for _, _, item in given)
    assert _refused(given) == []


def test_every_seed_item_is_usual():
    """Nor may a seed's MaxText arguments (seed 002: rollout_tensor_parallelism=-1). The seeds live in
    ../shared, outside the repository: the GitHub workflow deselects this test, as it does the seed group."""
    given = [(seed, "0.2.4", item) for seed, item in _seed_items()]
    assert ("002_2f89c94d15fc1c84.txt", "0.2.4", "rollout_tensor_parallelism=-1") in given
    assert _refused(given) == []


def test_each_key_taken_at_minus_one_is_auto_in_the_wheels_own_types():
    """AUTO_MINUS_ONE against MaxText 0.2.4's configs/types.py: each field's default is -1 and its config
    check says "must be -1 or > 0" for it."""
    import re
    import zipfile

    from contracts.maxtext_schema import fetch_wheel

    from tpu_rl.recipes.runs.usual_values import AUTO_MINUS_ONE

    wheel, why = fetch_wheel("0.2.4")
    if wheel is None:
        pytest.fail(f"the maxtext==0.2.4 wheel is needed to read configs/types.py: {why} (`make install` fetches it)")
    with zipfile.ZipFile(wheel) as archive:
        types = archive.read("maxtext/configs/types.py").decode()
    assert "must be -1 or > 0" in types
    for key in AUTO_MINUS_ONE:
        assert re.search(rf"\b{key}: int = Field\(\s*-1,", types), key
        assert f'("{key}", self.cluster.{key})' in types, key
