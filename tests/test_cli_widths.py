"""Every command's output in an 80x24 terminal (COLUMNS=80), against the local peers (issue 18): no line
over 80 columns but one that is a single path, URL or image reference longer than that, never broken
(test_cli_status_logs.fits_80_columns_with_whole_paths). An `error: ` line is one line, whole, where stderr is
no terminal (a file, a program, CI logs, as here), so that it can be searched for (docs/pipeline.md); in a
terminal it wraps at word boundaries to the width, a command in backquotes kept whole (issue 37)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli_helpers import fits_80_columns_with_whole_paths
from tpu_rl.jobs import render_manifests
from peers.fixtures import TOKEN, SETTINGS, deploy_vm, jobset_of, peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app

GKE, VM = "qwen3-v6e32", "llama31-v6e8"
RECIPE, VM_RECIPE = GKE, VM
runner = CliRunner()

COMMANDS = [
    ["--help"], ["run", "--help"], ["recipes"], ["render", GKE, "--out", "rendered"],
    ["render", VM, "--out", "rendered"],
    ["preflight", GKE], ["preflight", VM], ["secret", "set"], ["run", GKE, "--dry-run"], ["run", VM, "--dry-run"],
    ["status", GKE], ["status", VM], ["runs", GKE], ["runs", VM], ["cancel", GKE, "--yes"], ["cancel", VM, "--yes"],
    ["logs", GKE, "train"], ["metrics", GKE], ["eval", GKE, "--run", "rl"], ["check-rewards", "rewards.py:short"],
]


def too_wide(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if not line.startswith("error: ")]
    return [line for line in lines if not fits_80_columns_with_whole_paths(line)]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_command_fits_an_80_column_terminal(args, cloud, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("CAPACITY", "spot")  # preflight's quota lines are its longest
    (tmp_path / "rewards.py").write_text("def short(prompts, completions, tmvp_config, **kwargs):\n"
                                         "    return [0.0] * len(completions)\n")
    deploy_vm(cloud["google"], SETTINGS)
    put_step_output(cloud["gcs"], get_recipe(GKE), "convert")
    result = runner.invoke(app, args, input=TOKEN)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert not too_wide(result.output), "\n".join(too_wide(result.output))


@pytest.fixture(autouse=True)
def _eighty(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def words(output: str) -> str:
    return " ".join(output.split())


def test_a_dry_run_of_three_steps_fits(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert "expected: about 170 min, $180.66 for convert, train, export (estimates from list prices)" in \
        words(result.output)


def test_a_dry_run_that_attaches_to_a_running_step_fits(cloud):
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="hang", logs="loading\n")
    cloud["kube"].put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["train"], "running")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert "train: attach: JobSet" in result.output and "up to about 90 min, $95.64" in words(result.output)


def test_runs_without_a_run_fits(cloud):
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert words(result.output).startswith(f"no run of {RECIPE} in gs://")


def test_cancel_with_nothing_to_cancel_fits_on_gke(cloud):
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert result.output.startswith("nothing to cancel")


def test_cancel_with_nothing_to_cancel_fits_on_a_tpu_vm(settings_env, gcs, google):
    result = runner.invoke(app, ["cancel", VM_RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert result.output.startswith("nothing to cancel: TPU VM")


def test_render_fits_with_each_written_path_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "a-directory-with-a-rather-long-name" / "rendered-manifests-for-the-first-run"
    result = runner.invoke(app, ["render", RECIPE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    for step in ("convert", "train", "export"):
        assert f"{out / step}.yaml" in result.output.replace(",", " ").split()


def test_secret_set_fits_with_the_version_name_whole(settings_env, google):
    result = runner.invoke(app, ["secret", "set"], input=TOKEN + "\n")  # a token the Hub peer knows
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    assert "projects/tpu-rl-test/secrets/hf-token/versions/2" in result.output.split()


def test_an_error_in_a_terminal_wraps_at_words_and_keeps_its_commands_whole(settings_env, monkeypatch):
    # issue 37: every `error:` line was one line of 100-540 characters, broken mid-word by an 80-column terminal.
    from tpu_rl.scripts.cli import core

    args = ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6", "--name", "My Sweep!"]
    piped = runner.invoke(app, args)
    [line] = piped.output.splitlines()  # no terminal: one line, as a program or grep reads it
    assert piped.exit_code == 2 and len(line) > 80 and line.startswith("error: --name 'My Sweep!' is not")
    monkeypatch.setattr(core, "_stderr_is_a_terminal", lambda: True)
    shown = runner.invoke(app, args)
    lines = shown.output.splitlines()
    assert shown.exit_code == 2 and len(lines) > 1 and lines[0].startswith("error: --name")
    assert all(len(each) <= 80 for each in lines), shown.output
    assert " ".join(each.strip() for each in lines) == line  # broken only at spaces: no word cut
    assert "  `tpu-rl runs`" in lines, shown.output  # a command that does not fit takes a line of its own, whole


def test_the_cancel_prompt_fits_80_columns(cloud, monkeypatch):
    # issue 37: the question `cancel` asks was 89 columns, broken by the terminal.
    from cli_helpers import left_running
    from tpu_rl.scripts.cli import core

    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="hang")
    left_running(cloud, monkeypatch)
    monkeypatch.setattr(core, "_stdin_is_a_terminal", lambda: True)
    result = runner.invoke(app, ["cancel", RECIPE, "train"], input="n\n")
    assert result.exit_code == 0 and "nothing was cancelled" in result.output, result.output
    asked = result.output[:result.output.index("[y/N]")]
    assert "Delete JobSet(s)" in asked and "\n" in asked.strip(), result.output
    assert all(len(each) <= 80 for each in result.output.splitlines()), result.output
