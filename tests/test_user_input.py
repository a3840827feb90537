"""What the user hands tpu-rl, checked where it enters (issue 37): every file it reads is a regular UTF-8 text file
within a bound (recipes/user_text.py), refused in one line within seconds otherwise; every name, a run's, a sweep's
or a recipe's, keeps one rule (recipes/names.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tpu_rl.recipes import UserError, all_recipes
from tpu_rl.recipes.names import check_name
from tpu_rl.recipes.runs.identity import MAX_RUN_NAME, check_run_name
from tpu_rl.recipes.runs.sweeps import MAX_SWEEP_NAME, check_sweep_name, read_sweep_file, sweep_name
from tpu_rl.recipes.settings.load import read_config
from tpu_rl.recipes.user_text import read_text_file
from tpu_rl.scripts.rewards.prompts import read_tokenizer_dir

FIX = "pass a text file"


def refusal(path: Path, **bound) -> str:
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        read_text_file(path, "--file", FIX, **bound)
    assert time.monotonic() - started < 5  # within seconds: /dev/zero is never read whole
    line = str(error.value)
    assert "\n" not in line and line.startswith(f"--file {path} ") and line.endswith(f": {bound.get('smaller', FIX)}")
    return line


def test_a_text_file_is_read_whole(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text("name = \"lr\"  # é\n")
    assert read_text_file(path, "--file", FIX) == "name = \"lr\"  # é\n"


def test_a_missing_file_a_directory_and_a_device_are_refused_in_one_line(tmp_path):
    assert "does not exist" in refusal(tmp_path / "absent.toml")
    assert "is a directory, not a file" in refusal(tmp_path)
    assert "is not a regular file (a device, pipe or socket)" in refusal(Path("/dev/zero"))


def test_a_binary_file_is_refused_with_the_byte_that_is_not_text(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_bytes(b"name = 1\n\xd0\x00")
    assert "is not UTF-8 text (byte 9 is 0xd0; a binary file?)" in refusal(path)
    path.write_bytes(b"name = 1\n\x00")
    assert "is not text (byte 9 is a NUL; a binary file?)" in refusal(path)


def test_a_file_over_its_bound_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("#" * 2000)
    assert "has 2000 bytes, over the 1000 bytes tpu-rl reads of it" in refusal(path, max_bytes=1000)
    line = refusal(path, max_bytes=1000, bound="what a ConfigMap holds", smaller="make it smaller")
    assert line.endswith("has 2000 bytes, over what a ConfigMap holds: make it smaller"), line


def test_each_file_the_cli_reads_goes_through_the_one_check(tmp_path, monkeypatch):
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^--file binary is not UTF-8 text"):
        read_sweep_file("binary")
    with pytest.raises(UserError, match=r"^TPU_RL_CONFIG .*binary is not UTF-8 text .*: fix the file or unset"):
        read_config(binary)
    with pytest.raises(UserError, match=r"^TPU_RL_CONFIG /dev/zero is not a regular file"):
        read_config(Path("/dev/zero"))
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(UserError, match=r"^--tokenizer .*tokenizer_config.json is not JSON \("):
        read_tokenizer_dir(tokenizer)


@pytest.mark.parametrize("name", ["My Sweep!", "a" * 300, "lr_sweep", "-lr", "lr-", "1lr", "true", "x"])
def test_a_sweep_name_keeps_the_rule_of_a_run_name(name):
    # issue 37: `sweep --name 'My Sweep!'` and a 300-character name were accepted while run names were checked.
    with pytest.raises(UserError) as sweep:
        check_sweep_name(name)
    assert "is not a sweep name: use 2-63 lowercase letters, digits or '-', starting with a letter" in str(sweep.value)
    if len(name) <= MAX_RUN_NAME:
        with pytest.raises(UserError) as run:
            check_run_name(name)
        assert str(run.value).split(": use ")[1].split(" (")[0] == str(sweep.value).split(": use ")[1].split(
            " (")[0].replace(f"2-{MAX_SWEEP_NAME}", f"2-{MAX_RUN_NAME}")


def test_every_name_tpu_rl_makes_keeps_the_one_rule():
    for recipe in all_recipes().values():
        assert check_name(recipe.name, "recipe", "recipe", 20, "its stack") == recipe.name
        longest = sweep_name(recipe.name, ["a-run"])
        assert check_sweep_name(longest) == longest
    assert check_sweep_name("a" * MAX_SWEEP_NAME) == "a" * MAX_SWEEP_NAME


@pytest.mark.parametrize("edit, said", [
    (lambda tpu: tpu.__setitem__("slices", 0), "tpu.slices: slices takes 1 or more, not 0"),
    (lambda tpu: tpu.__setitem__("slices", "two"), "tpu.slices: slices takes a whole number, not 'two'"),
    (lambda tpu: tpu.__setitem__("colour", "red"), "tpu.colour: colour is no field here: remove it, or correct"),
    (lambda tpu: tpu.pop("topology"), "tpu.topology: topology is missing: add it"),
])
def test_the_recipe_table_is_refused_in_our_words_not_pydantics(edit, said):
    # issue 37: `Input should be greater than or equal to 1` was pydantic's line, not ours.
    import copy
    import tomllib
    from importlib import resources

    from tpu_rl.recipes.catalog.recipe import build_recipes

    table = copy.deepcopy(tomllib.loads(resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text()))
    edit(table["recipes"]["qwen3-v6e32"]["tpu"])
    with pytest.raises(UserError) as error:
        build_recipes(table)
    assert f"recipes.toml: recipes.qwen3-v6e32.{said}" in str(error.value) and "Input should" not in str(error.value)
