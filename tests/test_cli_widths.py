"""Every command's output in an 80x24 terminal (COLUMNS=80), against the local peers (issue 18): no line
over 80 columns but one that is a single path, URL or image reference longer than that, never broken
(test_cli_status_logs.fits_80_columns_with_whole_paths). An `error: ` line is the exception by rule:
bad input and failures are one line, whole, so that it can be searched for (docs/pipeline.md)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from test_cli_status_logs import fits_80_columns_with_whole_paths

from peers.fixtures import TOKEN, deploy_vm, SETTINGS, put_step_output
from recipes import get_recipe
from scripts.cli import app

GKE, VM = "qwen3-v6e32", "llama31-v6e8"
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
