"""`tpu-rl` at a terminal: start-up imports, help, version, usage errors, 80 columns, Ctrl-C at a prompt."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_helpers import ctrl_c_at_the_prompt
from peers.fixtures import peer_settings, spec_of
from tpu_rl.recipes import all_recipes, get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.recipes.settings.specs import CONFIG_ENV, SPECS
from tpu_rl.scripts.cli import app

REPO = Path(__file__).resolve().parents[1]
TPU_RL = Path(sys.executable).parent / "tpu-rl"
SETTINGS_ENV = (*(spec.env for spec in SPECS), CONFIG_ENV)  # unset: render then uses the example settings
# What the offline commands never use and must not pay for at start-up.
HEAVY = ("kubernetes", "google.cloud", "google.api_core", "google.auth")
runner = CliRunner()


# -- start-up ---------------------------------------------------------------------------------------
def imported_modules(args: list[str], cwd: Path) -> set[str]:
    """Every module the installed entry point imports for `args`, from `python -X importtime`."""
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_ENV}
    done = subprocess.run([sys.executable, "-X", "importtime", str(TPU_RL), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {match[1] for match in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", done.stderr, re.M)}
    assert "tpu_rl.scripts.cli" in names, "importtime output not understood"
    return names


@pytest.mark.parametrize("args", [["--help"], ["recipes"], ["render", "qwen3-v6e32", "--out", "rendered"]],
                         ids=["help", "recipes", "render"])
def test_offline_commands_import_no_cloud_client(args, tmp_path):
    names = imported_modules(args, tmp_path)
    heavy = sorted(name for name in names if name.startswith(HEAVY) and name.split(".")[0] in ("kubernetes", "google"))
    assert heavy == [], f"`tpu-rl {' '.join(args)}` imports {heavy[:8]}"


def test_help_imports_no_rich_either(tmp_path):
    assert not any(name == "rich" or name.startswith("rich.") for name in imported_modules(["--help"], tmp_path))


# -- help, version, usage errors ----------------------------------------------------------------------
def test_short_help_and_version_exist():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    short = runner.invoke(app, ["-h"])
    assert short.exit_code == 0 and short.output.startswith("Usage: ") and "--version" in short.output
    assert runner.invoke(app, ["run", "-h"]).output == runner.invoke(app, ["run", "--help"]).output
    shown = runner.invoke(app, ["--version"])
    assert shown.exit_code == 0 and shown.output == f"tpu-rl {version}\n"


def test_json_is_a_flag_in_the_help_and_takes_no_value():
    help_text = runner.invoke(app, ["recipes", "--help"]).output
    [line] = [line for line in help_text.splitlines() if "--json" in line]
    assert line.split() == ["--json", "Machine-readable", "output."], line
    assert "<bool>" not in help_text


@pytest.mark.parametrize(("args", "expected"), [
    (["recipes", "--json", "true"], "error: got unexpected extra argument(s) (true); see `"),
    (["logs", "qwen3-v6e32"], "error: missing argument 'STEP'; see `"),
    (["run", "qwen3-v6e32", "--follow"], "error: no such option: --follow (Possible options: --follow-logs); see `"),
])
def test_usage_errors_are_one_line_exit_2(args, expected):
    result = runner.invoke(app, args)
    assert result.exit_code == ExitCode.BAD_INPUT
    [line] = result.output.splitlines()
    assert line.startswith(expected) and line.endswith(f" {args[0]} --help`"), line


# -- 80 columns ---------------------------------------------------------------------------------------
def test_recipes_fit_80_columns_with_every_name_model_and_price_in_full(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["recipes"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    facts = json.loads(runner.invoke(app, ["recipes", "--json"]).output)
    assert [item["name"] for item in facts] == list(all_recipes())
    for item in facts:
        [name_line] = [line for line in lines if line.split()[:1] == [item["name"]]]
        assert item["hourly_estimate"] in name_line  # e.g. "$63.76/h (TPU reserved)", whole
        # the leading figure says what it is, apart from the account's with no run (issue 37's review)
        assert f"during a run: {item['hourly_estimate']}" in name_line
        said = " ".join(result.output.split())
        assert f"with no run, stack {item['name']} bills ${item['idle_usd_per_hour']:,.2f}/h" in said
        assert any(line.split()[-1:] == [item["model"]] for line in lines), item["model"]
    # README step 1 says what a newcomer sees at 80 columns: five lines a recipe, its name and four indented
    starts = [index for index, line in enumerate(lines) if line.split()[:1] in ([n] for n in all_recipes())]
    blocks = [1 + next(i for i, line in enumerate([*lines[start + 1:], ""]) if not line.startswith("  "))
              for start in starts]
    assert blocks == [5] * len(starts), result.output
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    assert "`tpu-rl recipes` prints each recipe's model, TPU, image, HBM a chip and hourly price (five lines a " \
           "recipe at 80 columns" in readme


def test_recipes_in_a_wide_terminal_is_one_table_with_a_model_column(monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")
    result = runner.invoke(app, ["recipes"])
    header = next(line for line in result.output.splitlines() if "recipe" in line and "model" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")][:2] == ["recipe", "model"]
    row = next(line for line in result.output.splitlines() if "qwen3-v6e32" in line)
    assert get_recipe("qwen3-v6e32").model.hf_repo in row and "/h" in row


# -- Ctrl-C at the [y/N] prompt -----------------------------------------------------------------------


def test_ctrl_c_at_the_replace_prompt_is_an_interruption_not_a_failed_step(cloud):
    from tpu_rl.jobs import render_manifests

    recipe = get_recipe("qwen3-v6e32")
    cloud["kube"].put_jobset(render_manifests(spec_of(recipe), peer_settings())["convert"], "failed")
    asked, rest, code = ctrl_c_at_the_prompt(["run", recipe.name, "--steps", "convert"])
    assert "Delete it and submit again? [y/N]" in " ".join(asked.split()), asked  # wrapped to the terminal's width
    assert code == ExitCode.INTERRUPTED, asked + rest
    assert "error: interrupted at the prompt; nothing was submitted or deleted" in rest
    assert "Traceback" not in rest and "Aborted" not in rest
    assert cloud["kube"].created == [] and cloud["kube"].deleted == []
