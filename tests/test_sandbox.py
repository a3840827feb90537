"""`make sandbox`: the local peers kept running (tests/peers/sandbox.py), in which any run, sweep, eval, cancel
and down a user types works with a simulated outcome, each command's output labelled a simulation. Nothing is
scripted under a run's name here: the names are the ones the commands choose."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from peers.fixtures import REPO, VENV_BIN
from peers.sandbox import start_sandbox
from peers.sandbox_daemon import serving
from tpu_rl.scripts.cli.core import SANDBOX_ENV, SIMULATION_LINE

RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"  # a VM recipe: its TPU VM's startup script runs the steps (peers/sandbox_vm.py)
COMMAND_SECONDS = 180  # the longest any one command may take here (a whole run: seconds at no poll interval)
SETTLE_SECONDS = 180  # a sweep's runs, which go on in their drivers after `sweep` returns


@pytest.fixture
def sandbox(tmp_path):
    with start_sandbox(tmp_path / "sandbox", poll_seconds="0") as started:
        yield started


def tpu_rl(warm_cli, sandbox, *args: str) -> subprocess.CompletedProcess:
    """One real `tpu-rl` command in the sandbox's environment, as a user's shell runs it (the console script on
    its PATH, no terminal), in a process forked from the warm interpreter (tests/forked_cli.py): the sweep's
    wait alone runs `runs` a dozen times, each of which would pay the CLI's imports again."""
    return warm_cli.run([str(VENV_BIN / "tpu-rl"), *args], env=sandbox.env, cwd=sandbox.home, timeout=COMMAND_SECONDS)


def labelled(result: subprocess.CompletedProcess) -> bool:
    return result.stderr.splitlines()[:1] == [SIMULATION_LINE]


def settled_runs(warm_cli, sandbox, count: int, ended: bool = True) -> list[dict]:
    """`runs --json` once `count` runs are listed and (with `ended`) have ended; fails after SETTLE_SECONDS,
    naming what it saw."""
    deadline, runs = time.monotonic() + SETTLE_SECONDS, []
    while time.monotonic() < deadline:
        result = tpu_rl(warm_cli, sandbox, "runs", RECIPE, "--json")
        assert result.returncode == 0 and labelled(result), result.stderr
        runs = json.loads(result.stdout)["runs"]
        if len(runs) >= count and (not ended or all(run["status"] in ("succeeded", "failed", "cancelled")
                                                    for run in runs)):
            return runs
        time.sleep(0.5)
    raise AssertionError(f"the runs did not {'end' if ended else 'show'} within {SETTLE_SECONDS} s: {runs}")


def test_an_unscripted_run_and_sweep_succeed_in_the_sandbox_each_screen_labelled_a_simulation(sandbox, warm_cli):
    run = tpu_rl(warm_cli, sandbox, "run", RECIPE, "--set", "learning_rate=2e-6")
    assert run.returncode == 0, run.stdout + run.stderr
    assert labelled(run), run.stderr
    assert (run.stdout + run.stderr).count(SIMULATION_LINE) == 1  # not again in the driver's lines it shows
    for step in ("convert", "train", "export"):
        assert f"✓ {step}: output verified" in run.stdout.splitlines()
    assert "accuracy 40.6% → 59.4% (+18.8) on 64 gsm8k test questions" in run.stdout
    assert "done: convert, train, export verified in gs://" in run.stdout

    sweep = tpu_rl(warm_cli, sandbox, "sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6")
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    assert labelled(sweep) and "2 runs started" in sweep.stdout
    runs = settled_runs(warm_cli, sandbox, 3)
    assert [run["status"] for run in runs] == ["succeeded"] * 3, runs
    assert sorted(run["differs"][0] for run in runs) == ["learning_rate=1e-6", "learning_rate=2e-6",
                                                         "learning_rate=3e-6"]
    assert all(run["last_step"] == run["train_steps"] == 50 for run in runs)


def test_eval_and_down_work_in_the_sandbox_and_down_destroys_its_simulated_stack_once(sandbox, warm_cli):
    assert tpu_rl(warm_cli, sandbox, "run", RECIPE).returncode == 0
    [run] = settled_runs(warm_cli, sandbox, 1)
    evaluated = tpu_rl(warm_cli, sandbox, "eval", RECIPE, "--run", run["run"])
    assert evaluated.returncode == 0 and labelled(evaluated), evaluated.stdout + evaluated.stderr
    assert f"run {run['run']}: accuracy 40.6% (26/64) at checkpoint 50" in evaluated.stdout

    down = tpu_rl(warm_cli, sandbox, "down", RECIPE, "--yes")
    assert down.returncode == 0 and labelled(down), down.stdout + down.stderr
    assert (f"simulation: `cdktf destroy {RECIPE}` in the local sandbox: its Terraform state removed, nothing "
            "real destroyed") in down.stdout
    assert f"stack {RECIPE} destroyed" in down.stdout
    again = tpu_rl(warm_cli, sandbox, "down", RECIPE, "--yes")
    assert again.returncode == 0 and again.stdout.startswith("nothing to stop: no resource in the state"), again.stdout


def test_cancel_stops_a_run_the_user_started_in_the_sandbox(tmp_path, warm_cli):
    with start_sandbox(tmp_path / "sandbox", poll_seconds="1") as sandbox:  # a run slow enough to catch
        started = tpu_rl(warm_cli, sandbox, "run", RECIPE, "--set", "learning_rate=4e-6", "--detach")
        assert started.returncode == 0 and labelled(started), started.stdout + started.stderr
        # Once the driver has recorded the run: a cancel before that deletes the driver before it writes its
        # run.json, and the run is then listed nowhere (the test failed so under load, fresh processes too).
        settled_runs(warm_cli, sandbox, 1, ended=False)
        cancelled = tpu_rl(warm_cli, sandbox, "cancel", RECIPE, "--set", "learning_rate=4e-6", "--yes")
        assert cancelled.returncode == 0 and labelled(cancelled), cancelled.stdout + cancelled.stderr
        # its driver, or the step it had submitted by then
        assert re.search(r"^cancelled run qwen3-v6e32-[0-9a-f]+: outputs in gs://rl-test-artifacts are kept",
                         cancelled.stdout, re.M), cancelled.stdout
        [run] = settled_runs(warm_cli, sandbox, 1)
        assert run["status"] == "cancelled", run


@pytest.fixture
def paced_sandbox(tmp_path):
    """A sandbox whose commands poll each second: a VM run takes its steps' time (peers/sandbox_vm.py), which
    polls at no interval would spin through."""
    with start_sandbox(tmp_path / "sandbox", poll_seconds="1") as started:
        yield started


def test_an_unscripted_run_of_the_vm_recipe_succeeds_in_the_sandbox_each_screen_labelled_a_simulation(
        paced_sandbox, warm_cli):
    run = tpu_rl(warm_cli, paced_sandbox, "run", VM_RECIPE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert labelled(run), run.stderr
    assert (run.stdout + run.stderr).count(SIMULATION_LINE) == 1
    for step in ("convert", "train", "export"):
        assert f"✓ {step}: output verified" in run.stdout.splitlines()
    assert re.search(r"^done: convert, train, export verified in gs://rl-test-artifacts \(run llama31-v6e8-[0-9a-f]+\)$",
                     run.stdout, re.M), run.stdout
    # the startup script's own power-off once it verified every output, which it does after `run` has: a
    # `status` at once may still see it verifying (SETTLE_SECONDS at most)
    powered_off, deadline = "llama31-v6e8: TPU VM rl-test-vm (TERMINATED; startup script: done)", time.monotonic()
    while True:
        status = tpu_rl(warm_cli, paced_sandbox, "status", VM_RECIPE)
        if status.stdout.startswith(powered_off) or time.monotonic() > deadline + SETTLE_SECONDS:
            break
        time.sleep(0.5)
    assert status.returncode == 0 and labelled(status), status.stdout + status.stderr
    assert status.stdout.startswith(powered_off), status.stdout
    runs = tpu_rl(warm_cli, paced_sandbox, "runs", VM_RECIPE, "--json")
    assert runs.returncode == 0 and labelled(runs), runs.stderr
    assert [run["status"] for run in json.loads(runs.stdout)["runs"]] == ["succeeded"]
    # each step as `status` shows it: the startup script's progress markers, not what run.json last said
    steps = ("convert", "train", "export")
    assert [run["steps"] for run in json.loads(runs.stdout)["runs"]] == [dict.fromkeys(steps, "done")]
    shown = [line.split()[:2] for line in status.stdout.splitlines() if line.split()[:1] in [[step] for step in steps]]
    assert shown == [[step, "done"] for step in steps], status.stdout


def test_a_detached_vm_run_can_be_cancelled_and_its_stack_destroyed_in_the_sandbox(paced_sandbox, warm_cli):
    started = tpu_rl(warm_cli, paced_sandbox, "run", VM_RECIPE, "--detach")
    assert started.returncode == 0 and labelled(started), started.stdout + started.stderr
    cancelled = tpu_rl(warm_cli, paced_sandbox, "cancel", VM_RECIPE, "--yes")
    assert cancelled.returncode == 0 and labelled(cancelled), cancelled.stdout + cancelled.stderr
    assert re.search(r"^cancelled run llama31-v6e8-[0-9a-f]+: the startup script of TPU VM rl-test-vm stops step "
                     r"\w+ within 30 s", cancelled.stdout, re.M), cancelled.stdout
    down = tpu_rl(warm_cli, paced_sandbox, "down", VM_RECIPE, "--yes")  # the VM's stack goes with cdktf destroy
    assert down.returncode == 2 and labelled(down) and f"`npx cdktf destroy {VM_RECIPE}`" in down.stderr
    destroyed = subprocess.run(["npx", "cdktf", "destroy", VM_RECIPE], env=paced_sandbox.env, capture_output=True,
                               text=True, timeout=COMMAND_SECONDS)
    assert destroyed.returncode == 0 and destroyed.stdout.startswith(f"simulation: `cdktf destroy {VM_RECIPE}`")
    status = tpu_rl(warm_cli, paced_sandbox, "status", VM_RECIPE)
    assert status.returncode == 0 and labelled(status), status.stdout + status.stderr
    assert status.stdout.startswith("llama31-v6e8: TPU VM rl-test-vm (not found)"), status.stdout
    assert re.search(r"^run llama31-v6e8-[0-9a-f]+ cancelled at ", status.stdout, re.M), status.stdout


def test_a_sandbox_environment_that_reaches_beyond_it_is_refused_in_one_line(sandbox, warm_cli):
    env = {**sandbox.env, "HF_ENDPOINT": "https://huggingface.co"}
    result = warm_cli.run([str(VENV_BIN / "tpu-rl"), "runs", RECIPE], env=env, cwd=REPO, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {SANDBOX_ENV} is set, but HF_ENDPOINT is https://huggingface.co not the "
                             f"sandbox's: source the sandbox's environment again (`make sandbox`), or unset "
                             f"{SANDBOX_ENV}\n")


def test_down_in_the_sandbox_refuses_an_npx_first_on_path_that_is_not_the_sandbox_s(sandbox, tmp_path, warm_cli):
    """A real node first on PATH after sourcing the sandbox's environment: its `npx cdktf destroy` would run the
    real cdktf against the real state bucket (Terraform's GCS backend ignores STORAGE_EMULATOR_HOST). `down`
    is refused in one line, and that npx never runs."""
    other_bin, ran = tmp_path / "node" / "bin", tmp_path / "npx-ran"
    other_bin.mkdir(parents=True)
    (other_bin / "npx").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (other_bin / "npx").chmod(0o755)
    env = {**sandbox.env, "PATH": f"{other_bin}{os.pathsep}{sandbox.env['PATH']}"}
    result = warm_cli.run([str(VENV_BIN / "tpu-rl"), "down", RECIPE, "--yes"], env=env, cwd=sandbox.home,
                          timeout=COMMAND_SECONDS)
    assert result.returncode == 2 and result.stdout == "" and not ran.exists(), result.stdout + result.stderr
    assert result.stderr == (f"error: {SANDBOX_ENV} is set, but npx is {other_bin / 'npx'} not the sandbox's: "
                             f"source the sandbox's environment again (`make sandbox`), or unset {SANDBOX_ENV}\n")


def test_make_sandbox_keeps_the_peers_running_for_a_shell_and_sandbox_stop_ends_them(tmp_path):
    """What `make sandbox` runs, and a shell that evals its output, then `make sandbox-stop`."""
    directory = tmp_path / "kept"
    daemon = [sys.executable, "-m", "peers.sandbox_daemon"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    start = " ".join(daemon + ["start", "--dir", str(directory)])
    shell = subprocess.run(["bash", "-c", f'eval "$({start})" && cd {tmp_path} && tpu-rl runs {RECIPE}'],
                           env=env, capture_output=True, text=True, timeout=COMMAND_SECONDS)
    try:
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert f"no run of {RECIPE} in gs://rl-test-artifacts/" in shell.stdout
        assert SIMULATION_LINE in shell.stderr.splitlines()
        assert "`make sandbox-stop` ends it" in shell.stderr
        pid = int((directory / "pid").read_text())
    finally:
        stopped = subprocess.run(daemon + ["stop", "--dir", str(directory)], env=env, capture_output=True,
                                 text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert not serving(pid)
    assert not (directory / "env.sh").exists()


def test_make_sandbox_runs_the_daemon_the_test_runs():
    dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", "sandbox", "sandbox-stop"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "-m peers.sandbox_daemon start" in dry.stdout and "-m peers.sandbox_daemon stop" in dry.stdout
