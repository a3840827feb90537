"""A GKE step whose pods are all up but whose output stopped does not keep its slice, and `run`, waiting for
ever: past the stall bound (scripts/pipeline/stall.py, the VM's rule) `run` ends with one line and exit 1,
leaving the JobSet running, and run.json records it. Slow output, the wait for capacity and a restart do
not count. Driven through the fake Kubernetes API on the drills' virtual clock (10 min a poll), which the
stall's monotonic clock follows here; a poll budget ends a wait that has no bound (the old code's) with
Ctrl-C's exit instead of hanging the test."""

from __future__ import annotations

import json

import pytest
from cli_helpers import (CONVERT, RECIPE, TRAIN, error_line, run_record, run_train, stall_clock, succeeds,
                         trained_run)
from contracts.tunix_log import absl_info, evaluation_line, restored_line, train_step_line
from peers.fixtures import put_step_output, spec_of
from typer.testing import CliRunner

from tpu_rl.jobs import jobset_name
from tpu_rl.jobs.evaluate import eval_run_name
from tpu_rl.recipes import STEPS, get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()

# Lines MaxText's to_maxtext writes while it converts with lazy loading (as on GKE), max_logging.log =
# absl.logging.info with the caller's file and line (maxtext 0.2.4 wheel, maxtext/checkpoint_conversion/
# to_maxtext.py lines 925, 1020, 1025, 1079; maxtext/utils/max_logging.py log).
CONVERT_LINES = [absl_info(message, line, file="to_maxtext.py") for message, line in (
    ("Lazy loading ENABLED. Initializing LazyHFLoader for: Qwen/Qwen3-30B-A3B...", 925),
    ("Parameter mappings and hooks obtained.", 1020),
    ("Starting weight transformation...", 1025),
    ("Weight transformation preparation complete.", 1079))]


def steps_log(*steps: int) -> str:
    return "".join(f"{train_step_line(step, 0.5)}\n" for step in steps)


def announced(output: str, step: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{step}: all pods ready; ")]


TRAIN_COUNTS = "train: all pods ready; stalled if silent 1:30:00 (stepping: 0:30:00 or 10 steps)"


def test_a_train_whose_step_stops_advancing_ends_run_at_the_grown_bound_and_stays_running(cloud, monkeypatch):
    """Steps 1, 2, 3 one a poll (10 min apart), then nothing new: the bound is 10 times the slowest step,
    1:40:00, counted from the poll that showed step 3."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang",
              log_reads=["loading\n", steps_log(1), steps_log(1, 2), steps_log(1, 2, 3)])
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line == (f"error: step train of JobSet {TRAIN} looks stalled: its last training step is 3 and its log "
                    "has not changed for 1:40:00 (the bound: 1:40:00); it is left running: look with `tpu-rl logs "
                    f"{RECIPE} train`, and stop it with `tpu-rl cancel {RECIPE}`"), line
    assert announced(result.output, "train") == [TRAIN_COUNTS], result.output
    assert len(TRAIN_COUNTS) <= 80
    assert TRAIN in kube.jobsets and kube.deleted == []  # left running, as the VM's step is
    record = run_record(cloud)
    assert record["status"] == "failed" and record["steps"]["train"]["status"] == "failed"
    assert record["error"] == line.removeprefix("error: ")


def test_a_train_whose_steps_are_slow_but_advancing_is_not_stalled(cloud, monkeypatch):
    """Steps 20 min apart, then 50 min apart (longer than 30 min, within 10 times the slowest step so
    far); the log changes only with a step."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    reads = ["loading\n"] + [steps_log(1)] * 2 + [steps_log(1, 2)] * 5 + [steps_log(1, 2, 3)] * 5 + \
        [steps_log(1, 2, 3, 4)]
    kube.plan(TRAIN, capacity="spot", ticks=len(reads) + 1, log_reads=reads, **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == 0, result.output
    assert "looks stalled" not in result.output and "train: output verified" in result.output
    assert len(announced(result.output, "train")) == 1, result.output


def test_a_convert_whose_log_keeps_growing_is_not_stalled(cloud, monkeypatch):
    """One new line every 20 min for 80 min: longer than the bound in all, never that long silent."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    reads = [("".join(f"{line}\n" for line in CONVERT_LINES[:n]),) * 2 for n in range(1, len(CONVERT_LINES) + 1)]
    reads = [text for pair in reads for text in pair]
    kube.plan(CONVERT, ticks=len(reads) + 1, log_reads=reads,
              on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == 0, result.output
    assert "looks stalled" not in result.output and "convert: output verified" in result.output
    assert announced(result.output, "convert") == ["convert: all pods ready; stalled if silent 1:30:00"], result.output


def test_a_convert_whose_log_stops_ends_run_at_the_bound(cloud, monkeypatch):
    """Convert's bound is the long one (stall.QUIET_STALL_SECONDS): its tensor loop logs no line."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(CONVERT, outcome="hang", logs="".join(f"{line}\n" for line in CONVERT_LINES[:2]))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line == (f"error: step convert of JobSet {CONVERT} looks stalled: its log has not changed for 1:30:00 "
                    f"(the bound: 1:30:00); it is left running: look with `tpu-rl logs {RECIPE} convert`, and stop "
                    f"it with `tpu-rl cancel {RECIPE}`"), line
    assert CONVERT in kube.jobsets and kube.deleted == []
    record = run_record(cloud)
    assert record["steps"]["convert"]["status"] == "failed" and record["error"] == line.removeprefix("error: ")


def test_the_wait_for_capacity_does_not_count(cloud, monkeypatch):
    """An hour suspended (Kueue has not admitted it), then every pod ready and the log never changes: the
    stall comes 30 min after the pods are ready, not while it waited."""
    kube = cloud["kube"]
    clock = stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", admitted_after=6, outcome="hang", logs=steps_log(5))
    started = clock[0]
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert "waiting for Kueue to admit JobSet" in result.output
    assert error_line(result).startswith(f"error: step train of JobSet {TRAIN} looks stalled: its last training "
                                         "step is 5 and its log has not changed for 0:30:00 (the bound: 0:30:00)")
    assert (clock[0] - started).total_seconds() >= 90 * 60  # an hour suspended, then the 30 min


def test_a_restart_starts_the_count_again(cloud, monkeypatch):
    """Ready for 20 min at step 5, a spot reclaim restarts the JobSet, and the new attempt, resumed at step
    4, shows nothing new: it stalls 30 min after its own pods are ready (counting through the restart it
    would have stalled before they were)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", reclaimed_after=3, outcome="hang", logs=steps_log(5),
              logs_after_restart=steps_log(4))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    output = result.output.splitlines()
    restart = next(i for i, line in enumerate(output) if "JobSet restarted" in line)
    counts = [i for i, line in enumerate(output) if line.startswith("train: all pods ready; ")]
    assert len(counts) == 2 and counts[0] < restart < counts[1], result.output  # one count per attempt
    assert error_line(result).startswith(f"error: step train of JobSet {TRAIN} looks stalled: its last training "
                                         "step is 4 and its log has not changed for 0:30:00 (the bound: 0:30:00)")


def test_an_eval_whose_head_stops_logging_ends_at_its_own_limit_not_at_a_stall_bound(cloud, monkeypatch):
    """`tpu-rl eval`'s JobSet has no stall bound: its head restored the checkpoint and then logs nothing
    (it never logs a training step), and eval's own 90 min, counted from the same moment, end it; eval
    deletes its scratch JobSet, as on any failure."""
    _, paths = trained_run(cloud)
    scratch = f"{eval_run_name(paths.run_name, 20)}-train"
    stall_clock(monkeypatch)
    cloud["kube"].plan(scratch, outcome="hang", logs=f"{restored_line(20)}\n")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith(f"error: JobSet {scratch} logged no evaluation within 90 min"), result.output
    assert "looks stalled" not in result.output and announced(result.output, "train") == [], result.output
    assert cloud["kube"].deleted[-1] == scratch


def test_a_train_before_its_first_step_has_the_long_bound(cloud, monkeypatch):
    """Before the first training step train_rl restores and compiles without a line: 1:30:00, not 0:30:00."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", logs="loading\n")
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith(f"error: step train of JobSet {TRAIN} looks stalled: its log has not "
                                         "changed for 1:30:00 (the bound: 1:30:00)"), result.output


def converts_repeating(cloud, monkeypatch, text: str) -> None:
    """Convert logs `text` again every hour (the kubelet's time of it differs), for 4 hours: it is never
    1:30:00 silent although the text never changes, and it succeeds."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    reads = [[(hour * 3600, text)] for hour in range(4) for _ in range(6)]  # a poll is 10 min
    kube.plan(CONVERT, ticks=len(reads) + 1, log_reads=reads,
              on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == 0, result.output
    assert "looks stalled" not in result.output and "convert: output verified" in result.output


def test_a_repeated_line_with_a_later_time_is_new_output(cloud, monkeypatch):
    """Convert logs the same line again every hour (the kubelet's time of it differs): never 1:30:00 silent
    although its text never changes."""
    converts_repeating(cloud, monkeypatch, CONVERT_LINES[1])


def test_a_pod_not_ready_within_an_attempt_pauses_the_count_and_says_when_it_starts_again(cloud, monkeypatch):
    """At step 5 from the first poll; a worker's container restarts (not Ready for a poll) 20 min after the
    pods are ready: the count starts again when it is Ready, says so, and the stall comes 30 min after."""
    kube = cloud["kube"]
    clock = stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", ticks=100, logs=steps_log(5), container_restart_at=5)
    started = clock[0]
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert announced(result.output, "train") == [TRAIN_COUNTS] * 2, result.output
    assert "JobSet restarted" not in result.output
    assert error_line(result).startswith(f"error: step train of JobSet {TRAIN} looks stalled: its last training "
                                         "step is 5 and its log has not changed for 0:30:00"), result.output
    assert (clock[0] - started).total_seconds() >= 60 * 60, result.output  # 20 min + a poll + 30 min


def failing_reads(monkeypatch, fails) -> list:
    """Cluster.read_log fails (ApiError, as after retry.py's tries) at the reads for which `fails(n)` holds,
    n counting from 1; returns the pods read, one a call. The attached `run`'s reads of its driver's log
    are not counted: the reads are the pipeline's, which the driver makes."""
    from tpu_rl.jobs.driver import DRIVER_PREFIX
    from tpu_rl.recipes.outcome import ApiError
    from tpu_rl.scripts.cloud.cluster import Cluster

    read, calls = Cluster.read_log, []

    def read_log(self, pod, container, *args, **kwargs):
        if pod.startswith(DRIVER_PREFIX):
            return read(self, pod, container, *args, **kwargs)
        calls.append(pod)
        if fails(len(calls)):
            raise ApiError(f"lost contact with the cluster reading logs of pod {pod}")
        return read(self, pod, container, *args, **kwargs)

    monkeypatch.setattr(Cluster, "read_log", read_log)
    return calls


def warnings_of(output: str, step: str) -> list[str]:
    return [line for line in output.splitlines() if "lost contact" in line and line.startswith(f"! {step}: ")]


def test_a_failed_log_read_of_convert_skips_the_poll_and_the_step_goes_on(cloud, monkeypatch):
    """Convert's log is read only for the stall bound: a read fails, one `!` line says so, and convert succeeds
    (an older code ended run with exit 4; two failed reads in a row, a poll of 10 min apart, reach
    LOG_UNREAD_SECONDS)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(CONVERT, ticks=6, logs=f"{CONVERT_LINES[0]}\n",
              on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    failing_reads(monkeypatch, lambda n: n == 2)
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == 0, result.output
    assert "convert: output verified" in result.output
    assert len(warnings_of(result.output, "convert")) == 1, result.output


def test_a_hung_convert_whose_log_reads_often_fail_still_stalls_at_its_bound(cloud, monkeypatch):
    """Every third read fails: each failure skips its poll without starting the count again (the old code
    paused it, so a hung convert never stalled), and each run of failures has its own `!` line."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(CONVERT, outcome="hang", logs="".join(f"{line}\n" for line in CONVERT_LINES[:2]))
    calls = failing_reads(monkeypatch, lambda n: n % 3 == 0)
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith(f"error: step convert of JobSet {CONVERT} looks stalled: its log has not "
                                         "changed for 1:30:00 (the bound: 1:30:00)"), result.output
    assert announced(result.output, "convert") == ["convert: all pods ready; stalled if silent 1:30:00"]
    assert len(warnings_of(result.output, "convert")) == len(calls) // 3 >= 3, result.output


def test_a_train_whose_log_reads_fail_for_a_while_goes_on(cloud, monkeypatch):
    """A read fails at two polls of a train that then succeeds (an apiserver or kubelet hiccup): each poll
    is skipped with its `!` line, and the run goes on (the old code ended it with exit 4)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    reads = ["loading\n", steps_log(1), steps_log(1, 2), steps_log(1, 2, 3), steps_log(1, 2, 3, 4)]
    kube.plan(TRAIN, capacity="spot", ticks=len(reads) + 3, log_reads=reads, **succeeds(cloud))
    failing_reads(monkeypatch, lambda n: n in (2, 4))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == 0, result.output
    assert "train: output verified" in result.output and "looks stalled" not in result.output
    warned = warnings_of(result.output, "train")
    assert len(warned) == 2 and all(line.endswith("; run ends after 0:10:00 of them") for line in warned), warned


def test_a_train_whose_log_cannot_be_read_for_10_min_ends_run_with_exit_4_and_says_why(cloud, monkeypatch):
    """Train's read feeds its progress: reads failing for LOG_UNREAD_SECONDS (two polls 10 min apart) end
    run with one line naming what it waited for; the run's driver, whose ending leaves nobody watching,
    deletes the train JobSet so that it does not bill unwatched (its checkpoints are kept)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", logs=steps_log(1))
    failing_reads(monkeypatch, lambda n: True)
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.API_ERROR, result.output
    line = error_line(result)
    assert line.startswith("error: lost contact with the cluster while waiting for train (no read of the head's log "
                           "worked for 0:10:00, the limit; the last failure: lost contact with the cluster reading "
                           "logs of pod "), line
    assert line.endswith(f"); JobSet {TRAIN} was deleted so that it does not bill unwatched; its checkpoints are "
                         f"kept: rerun `tpu-rl run {RECIPE} --steps train` to resume"), line
    assert len(warnings_of(result.output, "train")) == 1, result.output
    assert TRAIN not in kube.jobsets and TRAIN in kube.deleted


def test_a_train_replaced_meanwhile_is_left_alone_when_its_log_cannot_be_read(cloud, monkeypatch):
    """The driver deletes the JobSet it waited for by its UID: one of the name that another `run --replace`
    submitted meanwhile is left alone, and the line says so (an older code deleted by name)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", logs=steps_log(1))
    kube.replaced_before_delete = True
    failing_reads(monkeypatch, lambda n: True)
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert error_line(result).endswith(
        f"); nothing was deleted; JobSet {TRAIN} was meanwhile replaced by another of the same name (another `run "
        f"--replace`?), which is left alone; see `tpu-rl status {RECIPE}`"), result.output
    assert TRAIN in kube.jobsets and kube.deleted == []


@pytest.mark.parametrize("step, rerun", [("convert", "the conversion starts over: rerun `tpu-rl run {} --steps convert` "
                                                    "to convert again"),
                                         ("export", "the export starts over: rerun `tpu-rl run {} --steps export` to "
                                                    "export again")])
def test_a_convert_or_export_whose_log_cannot_be_read_for_10_min_ends_run_with_exit_4(cloud, monkeypatch, step,
                                                                                       rerun):
    """Their log serves only the stall bound, which a failed read skips: with the pods Ready and every read
    failing, the wait ends at LOG_UNREAD_SECONDS as train's does (the old code waited until the test's poll
    budget, Ctrl-C), and the driver deletes that JobSet (by its UID) so that it does not bill unwatched,
    saying what a rerun does: the step starts over (an older line said its checkpoints were kept)."""
    kube, recipe = cloud["kube"], get_recipe(RECIPE)
    name = jobset_name(spec_of(recipe), step)
    stall_clock(monkeypatch)
    for before in STEPS[:STEPS.index(step)]:
        put_step_output(cloud["gcs"], recipe, before)
    kube.plan(name, outcome="hang", logs=f"{CONVERT_LINES[0]}\n")
    uids = set()  # of the JobSet whose log fails, read from the fake API while it runs
    failing_reads(monkeypatch, lambda n: uids.add(kube.jobsets[name]["metadata"]["uid"]) or True)
    result = runner.invoke(app, ["run", RECIPE, "--steps", step])
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert error_line(result).startswith(
        f"error: lost contact with the cluster while waiting for {step} (no read of the head's log worked for "
        f"0:10:00, the limit; the last failure: lost contact with the cluster reading logs of pod "), result.output
    assert error_line(result).endswith(f"); JobSet {name} was deleted so that it does not bill unwatched; "
                                       f"{rerun.format(RECIPE)}"), result.output
    assert len(warnings_of(result.output, step)) == 1, result.output
    assert name not in kube.jobsets and name in kube.deleted
    sent = [json.loads(body) for body in kube.sent("DELETE", f"/jobsets/{name}")]
    assert [body["preconditions"] for body in sent] == [{"uid": uid} for uid in uids] and len(uids) == 1, sent


def test_a_conversion_another_run_waits_on_is_kept_when_its_log_cannot_be_read(cloud, monkeypatch):
    """The convert JobSet is shared by the runs of one conversion identity (a sweep's): the driver that loses
    sight of it leaves it to the run whose record shows it waiting too (cancel's rule), where an older code
    deleted it under that run."""
    from cli_helpers import run_of

    from tpu_rl.scripts.cloud import gcs

    kube = cloud["kube"]
    _, other = run_of("learning_rate=1e-5")
    gcs.write_json(cloud["gcs"], other.run_record, {"recipe": RECIPE, "status": "running", "steps": {
        "convert": {"jobset": CONVERT, "status": "running"}}})
    stall_clock(monkeypatch)
    kube.plan(CONVERT, outcome="hang", logs=f"{CONVERT_LINES[0]}\n")
    failing_reads(monkeypatch, lambda n: True)
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert error_line(result).endswith(
        f"); JobSet {CONVERT} keeps running (the conversion is shared, and 1 run ({other.run_name}) waits on it "
        f"too): rerun `tpu-rl run {RECIPE} --steps convert` to reattach"), result.output
    assert CONVERT in kube.jobsets and kube.deleted == []


def test_an_eval_whose_head_log_read_fails_once_goes_on_to_its_evaluation(cloud, monkeypatch):
    """`tpu-rl eval`'s JobSet goes through train's read: a failed read skips that poll (the old code ended
    eval with exit 4) and the next one finds the Pre line."""
    _, paths = trained_run(cloud)
    scratch = f"{eval_run_name(paths.run_name, 20)}-train"
    stall_clock(monkeypatch)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    cloud["kube"].plan(scratch, ticks=5, logs=f"{restored_line(20)}\n{pre}\n", outcome="hang")
    failing_reads(monkeypatch, lambda n: n == 1)
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    assert f"run {paths.run_name}: accuracy 46.9% (30/64) at checkpoint 20" in result.output
    assert len(warnings_of(result.output, "train")) == 1, result.output


def test_a_tqdm_progress_entry_keeps_its_kubelet_time(cloud, monkeypatch):
    """Convert's tensor loop writes tqdm meters after "\\r" without a newline, which the runtime logs as one
    entry once 16 KiB gather (steps.unstamped): the same text again an hour later is new output, as a
    repeated line is (split at "\\r", its last piece had no time and looked unchanged)."""
    from tqdm import tqdm

    # MemoryMonitorTqdm(desc="Transforming weights", unit="param"), to_maxtext.py L1033 (maxtext 0.2.4),
    # its postfix "RAM: used/totalGB (percent%)" (checkpoint_conversion/utils/utils.py L837)
    meters = "".join("\r" + tqdm.format_meter(n, 48, 30.0 * n, prefix="Transforming weights", unit="param",
                                                postfix="RAM: 180.2/1400.0GB (12.9%)") for n in (3, 4))
    converts_repeating(cloud, monkeypatch, meters)
