"""`check-rewards` waits on a user's file in a clean Python (scripts/rewards/subprocess_run.py): a wait with an end,
which says what it waits for once it lasts (issue 37: a file that loops was silent for 60 s)."""

from __future__ import annotations

import os
import time

from typer.testing import CliRunner

from tpu_rl.scripts.cli import app
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.recipes.settings.tuning import CHECK
from tpu_rl.scripts.rewards import subprocess_run

runner = CliRunner()
LOOPS = "def short(prompts, completions, tmvp_config, **kwargs):\n    while True:\n        pass\n"
QUICK = "def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0] * len(completions)\n"


def test_a_file_that_loops_is_said_waited_for_then_refused_at_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess_run, "NOTICE_SECONDS", 0.5)
    monkeypatch.setenv("TPU_RL_CHECK_SECONDS", "3")  # the bound, 60 s unless set
    (tmp_path / "rewards.py").write_text(LOOPS)
    children = []
    popen = subprocess_run.subprocess.Popen

    def recorded(*args, **kwargs):
        children.append(popen(*args, **kwargs))
        return children[-1]

    monkeypatch.setattr(subprocess_run.subprocess, "Popen", recorded)
    started = time.monotonic()
    result = runner.invoke(app, ["check-rewards", f"{tmp_path / 'rewards.py'}:short"])
    assert time.monotonic() - started < 10, result.output
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    waiting, refused = result.output.strip().splitlines()
    assert waiting == (f"--rewards {tmp_path / 'rewards.py'}:short: waiting for a clean Python to import rewards.py "
                       "and call it on sample rows, at most 3 s")
    assert refused.startswith("error: --rewards") and refused.endswith(
        "importing and calling it took over 3 s (TPU_RL_CHECK_SECONDS): make it return within seconds (a loop that "
        "never ends, or a wait on the network?)")
    [child] = children
    assert child.returncode is not None and not os.path.exists(f"/proc/{child.pid}")  # not left looping


def test_a_check_done_before_the_notice_says_nothing_of_waiting(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess_run, "NOTICE_SECONDS", 30)  # well past a quick check, even on a loaded machine
    (tmp_path / "rewards.py").write_text(QUICK)
    result = runner.invoke(app, ["check-rewards", f"{tmp_path / 'rewards.py'}:short"])
    assert result.exit_code == 0, result.output
    assert "waiting for" not in result.output


def test_the_bound_is_60_seconds_unless_set_and_a_bad_one_is_refused(tmp_path, monkeypatch):
    assert CHECK.seconds({}) == 60
    (tmp_path / "rewards.py").write_text(QUICK)
    monkeypatch.setenv("TPU_RL_CHECK_SECONDS", "0")
    result = runner.invoke(app, ["check-rewards", f"{tmp_path / 'rewards.py'}:short"])
    assert result.exit_code == ExitCode.BAD_INPUT and result.output.strip() == (
        "error: TPU_RL_CHECK_SECONDS='0' is not a number of seconds more than 0: set e.g. TPU_RL_CHECK_SECONDS=60 or "
        "unset it (default 60)"), result.output
