"""Commands agree about one run (issue 37, item 4: one truth about a run), against the local peers: a run
that `tpu-rl run` started and left running, cancelled or failed is told the same way by `status`, `runs`
and `down`, on GKE and on the VM recipe (whose startup script, not `run`, writes each step's records). What a
run's step and ending are is decided in one place (scripts/pipeline/run_state.py);
these tests hold every screen to it. Their kin: tests/test_cli_commands_agree.py (settings and cloud state)."""

from __future__ import annotations

import json
from datetime import datetime

from typer.testing import CliRunner

from cli_helpers import left_running, record, run_of, status_blocks
from contracts.tunix_log import train_step_line
from peers.fixtures import put_step_output
from tpu_rl.jobs.vm import CANCELLED
from tpu_rl.scripts.cli import app
from vm_helpers import RECIPE as VM_RECIPE, RUN as VM_RUN, begin, boot_and_show, finish

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def _runs_row(run: str, recipe: str = RECIPE) -> dict:
    result = runner.invoke(app, ["runs", recipe, "--json"])
    assert result.exit_code == 0, result.output
    return next(row for row in json.loads(result.output)["runs"] if row["run"] == run)


def _runs_line(run: str, recipe: str = RECIPE) -> str:
    result = runner.invoke(app, ["runs", recipe], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith(f"{run}  "))


def _minute(iso: str) -> str:
    """A record's time as the screens show it, to the minute (`runs`' started column)."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M UTC")


def _started(cloud, monkeypatch, **plan) -> None:
    """Run exp1 left running on train (convert's output is there), its train JobSet planned as `plan`."""
    recipe, _ = run_of(run="exp1")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan("exp1-train", **plan)
    left_running(cloud, monkeypatch, "--run", "exp1")


def test_status_and_runs_show_the_same_train_step_while_it_trains(cloud, monkeypatch):
    """issue 37: `status` showed `step 46/50` (the head's log) while `runs` showed `step -` (the event files,
    which tensorboardX had not flushed yet) on the same run at the same moment."""
    _started(cloud, monkeypatch, outcome="hang", logs=f"loading\n{train_step_line(46, 0.31)}\n")
    status = runner.invoke(app, ["status", RECIPE, "--run", "exp1"])
    assert status.exit_code == 0, status.output
    assert status_blocks(status.output)["train"][1] == "step 46/50, loss 0.31", status.output
    row = _runs_row("exp1")
    assert (row["steps"]["train"], row["last_step"], row["train_steps"]) == ("running", 46, 50)
    assert ", step 46/50, " in _runs_line("exp1"), _runs_line("exp1")


def test_status_without_the_run_s_set_items_counts_its_steps_as_runs_does(cloud, monkeypatch):
    """issue 37 review: after `run --set num_batches=60 --run mine`, `status --run mine` showed `step 46/50` (the
    steps of its own command line, which has no --set) while `runs` showed `step 46/60` (the run's record)."""
    recipe, _ = run_of("num_batches=60", run="mine")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan("mine-train", outcome="hang", logs=f"loading\n{train_step_line(46, 0.31)}\n")
    left_running(cloud, monkeypatch, "--set", "num_batches=60", "--run", "mine")
    row = _runs_row("mine")
    assert (row["last_step"], row["train_steps"]) == (46, 60), row
    status = runner.invoke(app, ["status", RECIPE, "--run", "mine"])
    assert status.exit_code == 0, status.output
    assert status_blocks(status.output)["train"][1] == "step 46/60, loss 0.31", status.output


def test_after_cancel_status_says_cancelled_as_runs_does(cloud, monkeypatch):
    """issue 37: after `cancel`, `status` said `train no JobSet, no output yet` while `runs` said `cancelled`."""
    _started(cloud, monkeypatch, outcome="hang", logs=f"{train_step_line(12, 0.4)}\n")
    cancelled = runner.invoke(app, ["cancel", RECIPE, "--run", "exp1", "--yes"])
    assert cancelled.exit_code == 0, cancelled.output
    _, paths = run_of(run="exp1")
    ended = record(cloud["gcs"], paths)["ended"]
    row = _runs_row("exp1")
    assert (row["status"], row["steps"]["train"], row["ended"]) == ("cancelled", "cancelled", ended)
    status = runner.invoke(app, ["status", RECIPE, "--run", "exp1"], env={"COLUMNS": "80"})
    assert status.exit_code == 0, status.output
    assert status_blocks(status.output)["train"] == ["cancelled, no output yet"], status.output
    lines = status.output.splitlines()
    assert f"run exp1 cancelled at {_minute(ended)}" in lines, status.output


def test_a_failed_run_is_failed_in_status_as_in_runs(cloud, monkeypatch):
    """issue 37: train's JobSet succeeded without its output, so `run` recorded train failed; `status` said
    `train succeeded … no output yet` and `runs` said `train failed`."""
    recipe, paths = run_of(run="exp1")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan("exp1-train")  # succeeds, and writes no checkpoint
    result = runner.invoke(app, ["run", RECIPE, "--run", "exp1"])
    assert result.exit_code != 0, result.output
    data = record(cloud["gcs"], paths)
    assert (data["status"], data["steps"]["train"]["status"]) == ("failed", "failed")
    row = _runs_row("exp1")
    assert (row["status"], row["steps"]["train"]) == ("failed", "failed")
    status = runner.invoke(app, ["status", RECIPE, "--run", "exp1"], env={"COLUMNS": "80"})
    assert status.exit_code == 0, status.output
    train = status_blocks(status.output)["train"]
    assert train[0].startswith("failed, pods done, took ") and train[0].endswith(", no output yet"), status.output
    text = " ".join(status.output.split())
    assert f"run exp1 failed at {_minute(data['ended'])}: {' '.join(data['error'].split())}" in text, status.output


def test_runs_without_the_cluster_takes_the_step_from_the_event_files_and_asks_the_cluster_once(cloud, monkeypatch,
                                                                                                tmp_path):
    """`runs` needs only the bucket: when the cluster refuses the live read, a training run's step is the last
    loss point of its event files, and the cluster is asked once for the listing, not once a run (each ask
    of an unreachable one waits out its retries)."""
    from peers.event_files import put_event_files
    from peers.http import Fault

    for run in ("exp1", "exp2"):
        recipe, paths = run_of(run=run)
        put_step_output(cloud["gcs"], recipe, "convert")
        cloud["kube"].plan(f"{run}-train", outcome="hang", logs=f"{train_step_line(46, 0.31)}\n")
        left_running(cloud, monkeypatch, "--run", run)
        put_event_files(cloud["gcs"], paths.tensorboard, {"actor/train/loss": [(40, 0.35)]}, tmp_path / run)
    cloud["kube"].faults.append(Fault("GET", "-train", 403, times=10))
    asked = len(cloud["kube"].requests)
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["run"]: row for row in json.loads(result.output)["runs"]}
    assert (rows["exp1"]["last_step"], rows["exp2"]["last_step"]) == (40, 40), rows
    reads = [path for _, path, _ in cloud["kube"].requests[asked:] if path.endswith("-train")]
    assert len(reads) == 1, reads


def test_a_run_whose_driver_was_interrupted_while_train_runs_is_running_in_runs_as_in_status(cloud, monkeypatch):
    """issue 37: a GKE driver killed by SIGINT records `interrupted` and exits while its train JobSet goes on;
    `runs` said `interrupted` while `status` showed train running beside `driver: failed`. Both now say the
    run runs, in the same line: its driver ended, and the command that follows it again."""
    _started(cloud, monkeypatch, outcome="hang")  # the driver, too, is interrupted at its first wait
    cloud["kube"].kubelet.close()  # the driver's pod has ended
    _, paths = run_of(run="exp1")
    assert record(cloud["gcs"], paths)["status"] == "interrupted"
    line = ("run exp1: train still runs on the cluster, but its driver ended, so nothing takes it on to the next "
            f"step; follow it again with `tpu-rl run {RECIPE} --run exp1`")
    row = _runs_row("exp1")
    assert (row["status"], row["steps"]["train"], row["ended"], row["left_running"]) == ("running", "running",
                                                                                         None, line)
    runs = runner.invoke(app, ["runs", RECIPE])
    assert runs.exit_code == 0, runs.output
    assert _runs_line("exp1").startswith("exp1  running, "), runs.output
    assert line in " ".join(runs.output.split()), runs.output
    status = runner.invoke(app, ["status", RECIPE, "--run", "exp1"], env={"COLUMNS": "80"})
    assert status.exit_code == 0, status.output
    assert status_blocks(status.output)["train"][0].startswith("running"), status.output
    assert line in " ".join(status.output.split()), status.output


# --- the VM recipe: its startup script runs the steps and writes their records, followed or not -------------

def _vm_status_states() -> dict[str, str]:
    """Each step's state as `status` of the VM recipe shows it (the first word of its block)."""
    status = runner.invoke(app, ["status", VM_RECIPE], env={"COLUMNS": "80"})
    assert status.exit_code == 0, status.output
    return {step: block[0].split(",")[0] for step, block in status_blocks(status.output).items()}


def _vm_runs_states() -> dict[str, str]:
    """Each step's state as `runs` shows it, in its JSON and in its table (the same)."""
    row = _runs_row(VM_RUN, VM_RECIPE)
    result = runner.invoke(app, ["runs", VM_RECIPE], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    block = lines[next(at for at, line in enumerate(lines) if line.startswith(f"{VM_RUN}  ")):]
    steps = next(line for line in block if line.startswith("  steps  "))
    assert steps.split(None, 1)[1] == ", ".join(f"{step} {state}" for step, state in row["steps"].items()), steps
    return row["steps"]


def test_a_detached_vm_run_that_succeeded_shows_each_step_done_in_runs_as_in_status(settings_env, gcs, vm, guest):
    """Found by the sandbox: after a detached run succeeded on the VM, `runs` said `succeeded` but every step
    `waiting` (run.json, which `run --detach` wrote before the VM started), while `status` showed each done
    (the startup script's progress markers)."""
    started = runner.invoke(app, ["run", VM_RECIPE, "--detach"])
    assert started.exit_code == 0, started.output
    assert boot_and_show(guest, gcs, vm) == 0  # the VM runs it, nobody attached
    assert _runs_row(VM_RUN, VM_RECIPE)["status"] == "succeeded"
    assert _vm_runs_states() == _vm_status_states() == {"convert": "done", "train": "done", "export": "done"}


def test_after_cancel_of_a_vm_run_runs_shows_its_steps_as_status_does(settings_env, gcs, vm):
    """Found by the sandbox: after `cancel` of a detached run past convert, `status` said `convert done` (its
    marker) while `runs` said `convert waiting` (run.json, whose cancel marks only the steps not done)."""
    started = runner.invoke(app, ["run", VM_RECIPE, "--detach"])
    assert started.exit_code == 0, started.output
    for act in (begin(vm, gcs, "convert"), finish(vm, gcs, "convert"), begin(vm, gcs, "train")):
        act()
    cancelled = runner.invoke(app, ["cancel", VM_RECIPE, "--yes"])
    assert cancelled.exit_code == 0, cancelled.output
    assert _runs_row(VM_RUN, VM_RECIPE)["status"] == "cancelled"
    assert _vm_runs_states() == _vm_status_states() == {"convert": "done", "train": CANCELLED, "export": CANCELLED}


def test_runs_of_the_vm_recipe_gives_the_standing_account_once_its_run_ended(settings_env, gcs, vm, guest):
    """issue 37's review: `runs` printed what GKE's stack bills with no run, but nothing for the VM recipe's
    (VmPlatform.idle answered None); it gives the same account `down` and `recipes` give, once the run ended,
    and none while the VM runs it."""
    import vm_helpers
    from tpu_rl.recipes import get_recipe
    from tpu_rl.recipes.costs.standing import account, idle_bill

    started = runner.invoke(app, ["run", VM_RECIPE, "--detach"])
    assert started.exit_code == 0, started.output
    listed = runner.invoke(app, ["runs", VM_RECIPE], env={"COLUMNS": "250"})
    assert listed.exit_code == 0 and "with no run, stack" not in listed.output, listed.output
    assert boot_and_show(guest, gcs, vm) == 0
    recipe = get_recipe(VM_RECIPE)
    for status, vm_up in (("RUNNING", True), ("TERMINATED", False)):  # kept up after its run; stopped
        vm.instances[vm_helpers.VM] = status
        listed = runner.invoke(app, ["runs", VM_RECIPE], env={"COLUMNS": "250"})
        assert listed.exit_code == 0, listed.output
        said = " ".join(listed.output.split())
        assert f"no run of {VM_RECIPE} is active or queued on TPU VM" in said, listed.output
        for line in account(idle_bill(recipe, vm_up=vm_up), recipe):
            assert " ".join(line.split()) in said, listed.output
