"""A CPU step (convert, export) whose CPU pool gets no node (its machine type out of stock in the zone)
does not wait for ever: past CAPACITY_WAIT's `cpu` (recipes/capacity/modes.py) `run` deletes its JobSet
and stops with one line naming what it waited for, for how long, and the next command. Driven through
the fake Kubernetes API, whose CPU pods stay Unschedulable (tests/peers/jobset_plan.py, stockout "cpu")."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from cli_helpers import slow_polls
from peers.settings import spec_of
from tpu_rl.jobs import jobset_name
from peers.jobset_life import UNSCHEDULABLE
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.capacity.modes import DEFAULT_WAIT_SECONDS, parse_capacity_wait
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "gemma4-v6e64"  # its CPU pool is c4d-standard-96 (recipes/recipes.toml)
CONVERT = jobset_name(spec_of(get_recipe(RECIPE)), "convert")
runner = CliRunner()


def test_a_convert_step_without_a_cpu_node_stops_after_the_cpu_wait_with_one_line(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.plan(CONVERT, stockout=("cpu",))
    slow_polls(monkeypatch)  # 10 min a poll: the default cpu wait, 30 min, ends after a few polls
    monkeypatch.delenv("CAPACITY_WAIT", raising=False)
    started = time.monotonic()
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert time.monotonic() - started < 60, result.output
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: step convert stopped: waiting for a node of the CPU pool (c4d-standard-96): "
                           f"{UNSCHEDULABLE} for 0:"), line
    assert "longer than CAPACITY_WAIT's cpu=30m" in line
    assert line.endswith(f"JobSet {CONVERT} deleted; rerun `tpu-rl run {RECIPE} --steps convert` later, or with a "
                         "longer CAPACITY_WAIT (now cpu=30m)"), line
    assert kube.deleted == [CONVERT] and CONVERT not in kube.jobsets  # nothing stays pending
    assert "convert: waiting for a node of the CPU pool (c4d-standard-96)" in result.output


def test_the_cpu_wait_is_set_like_the_modes_and_defaults_in_the_same_table():
    assert DEFAULT_WAIT_SECONDS["cpu"] == 30 * 60
    assert dict(parse_capacity_wait("cpu=1h"))["cpu"] == 3600
    assert dict(parse_capacity_wait("cpu=1h"))["flex-start"] == 4 * 3600  # the others keep their default
    assert dict(parse_capacity_wait("45m"))["cpu"] == 45 * 60  # one duration sets every wait
