"""The run's driver in the cluster (issue 27, §1, §2 and §5): `run` starts it and only follows it.

Against the local peers, the fake API's kubelet runs the driver's container as a real process
(`python -m tpu_rl.scripts.cli drive ...`, stdin /dev/null, its output a pipe: no terminal; peers/kubelet.py).
"""

from __future__ import annotations

import json

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_helpers import record
from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES, RETRY_EXIT_CODE, driver_name
from tpu_rl.jobs.driver_runtime import DRIVER_CONTAINER, DRIVER_VERSION_ANNOTATION
from tpu_rl.jobs.paths import ArtifactPaths
from peers import simulated_run
from peers.fixtures import REPO, VENV_BIN, jobset_of, peer_settings, put_step_output, spec_of
from peers.kubelet import ProcessKubelet
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.conventions import NAMESPACE
from tpu_rl.recipes.outcome import DRIVER_BACKOFF_LIMIT, ExitCode
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.pipeline.gke.driver_wheel import runtime_version

RECIPE = "qwen3-v6e32"
DRIVER = driver_name(spec_of(get_recipe(RECIPE)))
PATHS = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings())
DEFAULT_GRACE_SECONDS = 30  # PodSpec terminationGracePeriodSeconds when unset (core/v1 types.go)
BOUND_SECONDS = 180  # a driver process starts in seconds; every run here ends well within this
runner = CliRunner()


@pytest.fixture
def kubelet(cloud) -> ProcessKubelet:
    """The fake API's kubelet runs each driver pod as a process with the test's endpoints; the driver
    polls every 0.05 s (each GET moves a JobSet one step on)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TPU_RL_POLL_SECONDS": "0.05"}
    cloud["kube"].kubelet = ProcessKubelet(env)
    return cloud["kube"].kubelet


def wait_for(what: str, condition, kube, seconds: float = BOUND_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        logs = "\n----\n".join(kube.pod_logs.values())
        assert time.monotonic() < deadline, f"waited {seconds:g} s for {what}; the driver's log:\n{logs}"
        time.sleep(0.1)


def driver_ended(kube) -> str | None:
    """Complete or Failed once the driver's Job ended, else None."""
    conditions = ((kube.jobs.get(DRIVER) or {}).get("status") or {}).get("conditions") or []
    return next((c["type"] for c in conditions if c["type"] in ("Complete", "Failed")), None)


def driver_log(kube) -> str:
    return "".join(kube.pod_logs.values())


def whole_run(cloud, train_ticks: int = 2) -> None:
    simulated_run.script_successful_run(cloud["kube"], cloud["gcs"], get_recipe(RECIPE), train_ticks=train_ticks)
    cloud["kube"].plans[jobset_of(RECIPE, "train")].ticks = train_ticks


def test_run_detach_returns_at_once_and_the_driver_with_no_terminal_takes_the_run_to_a_verified_export(
        cloud, kubelet):
    kube = cloud["kube"]
    whole_run(cloud, train_ticks=40)
    result = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert result.exit_code == 0, result.output
    assert driver_ended(kube) is None  # it returned while the driver runs
    lines = result.output.splitlines()
    assert f"run {PATHS.run_name}: started its driver, Job {DRIVER}, in the cluster" in lines
    assert f"detached: run {PATHS.run_name} goes on in the cluster" in lines
    for command in (f"`tpu-rl run {RECIPE}`", f"`tpu-rl status {RECIPE}`", f"`tpu-rl cancel {RECIPE}`"):
        assert any(line.strip().endswith(command) for line in lines), result.output
    wait_for("the driver to end", lambda: driver_ended(kube), kube)
    log = driver_log(kube)
    assert driver_ended(kube) == "Complete", log
    assert "export: output verified" in log and "done: convert, train, export verified" in log, log
    assert "\x1b[" not in log  # a plain console: no colours, no cursor movement
    assert kube.created == [jobset_of(RECIPE, step) for step in ("convert", "train", "export")]
    assert record(cloud["gcs"], PATHS)["status"] == "succeeded"
    # run.json's command is the attaching `run`'s (here the test's process), not the driver's `tpu-rl drive`
    assert record(cloud["gcs"], PATHS)["command"] == sys.argv
    status = runner.invoke(app, ["status", RECIPE])
    assert f"driver: finished (Job {DRIVER}" in " ".join(status.output.split()), status.output


def test_run_follows_the_drivers_log_past_a_rotation_reading_only_what_is_new(cloud, kubelet):
    """The kubelet rotates a container's log at containerLogMaxSize, after which a read returns only the
    newest file: `run` prints every line once, and each read once a line was printed asks only for the lines
    from its time on (sinceTime)."""
    kube = cloud["kube"]
    whole_run(cloud, train_ticks=40)

    def rotate_mid_train() -> None:
        deadline = time.monotonic() + BOUND_SECONDS
        while time.monotonic() < deadline:
            logs = dict(kube.pod_logs)
            for pod, text in logs.items():
                if "convert: output verified" in text:
                    kube.rotate_log(pod)
                    return
            time.sleep(0.02)

    rotation = threading.Thread(target=rotate_mid_train, daemon=True)
    rotation.start()
    result = runner.invoke(app, ["run", RECIPE])
    rotation.join(timeout=BOUND_SECONDS)
    assert result.exit_code == 0, result.output
    [pod] = kubelet.started
    after = kube.pod_logs[pod].splitlines()  # what the pod wrote after the rotation: its newest file
    assert after and not any(line.startswith("driver: tpu-rl") for line in after)  # rotated mid-run
    lines = result.output.splitlines()
    # lines written before the rotation and not read yet are gone with the old file; each line after it
    # is printed as often as the driver wrote it
    for line in after:
        assert (sum(shown.startswith(line[:40]) for shown in lines)
                == sum(written.startswith(line[:40]) for written in after)), (line, result.output)
    reads = [query for _, method, path, query in kube.calls if method == "GET" and path.endswith(f"/pods/{pod}/log")]
    assert len(reads) > 2 and all(query.get("timestamps") == "true" for query in reads)
    since = [query.get("sinceTime") for query in reads]
    printed = next(i for i, at in enumerate(since) if at)  # the reads before the driver's first line take all
    assert printed > 0 and all(since[printed:]) and since[printed:] == sorted(since[printed:]), since


def _attached_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "run.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    process = subprocess.Popen([str(VENV_BIN / "tpu-rl"), "run", RECIPE], stdin=subprocess.DEVNULL,
                               stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    return process, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_killing_the_attached_run_does_not_stop_the_run(cloud, kubelet, tmp_path, sig):
    kube = cloud["kube"]
    whole_run(cloud, train_ticks=60)
    process, log = _attached_run(tmp_path)
    try:
        wait_for("the attached run to show train running",
                 lambda: f"train: submitted JobSet {jobset_of(RECIPE, 'train')}" in log.read_text(), kube)
        process.send_signal(sig)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if sig == signal.SIGINT:
        assert code == ExitCode.INTERRUPTED, log.read_text()
        said = log.read_text()
        assert f"interrupted: detached; run {PATHS.run_name} goes on in the cluster" in said, said
        assert f"follow it: `tpu-rl run {RECIPE}`" in said, said
    assert driver_ended(kube) is None
    wait_for("the driver to end", lambda: driver_ended(kube), kube)
    assert driver_ended(kube) == "Complete", driver_log(kube)
    assert record(cloud["gcs"], PATHS)["status"] == "succeeded"


@pytest.mark.parametrize("how", ["killed", "evicted"])
def test_a_driver_killed_mid_train_resumes_in_its_next_pod_without_a_duplicate_submission(cloud, kubelet, how):
    """The driver's process dies while train runs (SIGKILL: a crash, OOM; or an eviction, which the Job's
    podFailurePolicy does not count): the Job starts another pod, whose driver reattaches to train."""
    kube = cloud["kube"]
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    whole_run(cloud, train_ticks=80)
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    wait_for("train to run", lambda: f"train: submitted JobSet {jobset_of(RECIPE, 'train')}" in driver_log(kube),
             kube)
    [first] = kubelet.started
    (kubelet.kill if how == "killed" else kubelet.evict)(first)
    wait_for("the driver to end", lambda: driver_ended(kube), kube)
    assert driver_ended(kube) == "Complete", driver_log(kube)
    assert len(kubelet.started) == 2
    second = kube.pod_logs[kubelet.started[1]]
    assert f"train: JobSet {jobset_of(RECIPE, 'train')} is running; reattaching to it" in second, second
    assert kube.created == [jobset_of(RECIPE, step) for step in ("train", "export")]  # each once
    assert kube.jobs[DRIVER]["status"].get("failed", 0) == (1 if how == "killed" else 0)
    assert record(cloud["gcs"], PATHS)["status"] == "succeeded"


def test_a_second_run_attaches_to_the_running_driver_and_creates_no_second_job(cloud, kubelet):
    kube = cloud["kube"]
    kube.plan(jobset_of(RECIPE, "convert"), outcome="hang")
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    again = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert again.exit_code == 0, again.output
    assert f"its driver, Job {DRIVER}, is running; attaching to it" in again.output
    assert kube.job_calls == [("create", DRIVER)]
    other = runner.invoke(app, ["run", RECIPE, "--steps", "convert", "--detach"])  # another request
    assert other.exit_code == ExitCode.BAD_INPUT
    assert "has a driver running another request" in other.output and "--replace" in other.output
    assert kube.job_calls == [("create", DRIVER)]


def test_cancel_deletes_the_driver_and_waits_for_its_pod_before_it_deletes_the_jobsets(cloud, kubelet):
    kube = cloud["kube"]
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    kube.plan(jobset_of(RECIPE, "train"), outcome="hang")
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    wait_for("train to run", lambda: jobset_of(RECIPE, "train") in kube.jobsets, kube)
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    deletes = [(path, body) for method, path, body in kube.requests if method == "DELETE"]
    assert [path.split("?")[0].rsplit("/", 1)[1] for path, _ in deletes] == [DRIVER, jobset_of(RECIPE, "train")]
    assert json.loads(deletes[0][1]) == {"propagationPolicy": "Foreground"}  # in the body: the API reads it there
    assert all(process.poll() is not None for process in kubelet.processes.values())  # stopped first
    assert kube.jobsets == {} and kube.jobs == {}
    assert f"deleted driver Job {DRIVER}" in result.output
    status = runner.invoke(app, ["status", RECIPE])
    assert f"driver: none (no Job {DRIVER})" in " ".join(status.output.split()), status.output


def test_cancel_ends_the_driver_within_its_grace_period_and_the_record_stays_cancelled(cloud, kubelet):
    """The driver is PID 1 of its container (the fake kubelet starts it with SIGTERM ignored): it ends on
    its own SIGTERM handler, well before the pod's grace period, and cancel marks the run cancelled again
    after the driver's last write (its interrupted ending)."""
    kube = cloud["kube"]
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    kube.plan(jobset_of(RECIPE, "train"), outcome="hang")
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    wait_for("train to run", lambda: f"train: submitted JobSet {jobset_of(RECIPE, 'train')}" in driver_log(kube),
             kube)
    [pod] = kubelet.started
    began = time.monotonic()
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - began < DEFAULT_GRACE_SECONDS  # the grace a driver without a handler lives through
    assert kubelet.processes[pod].returncode == RETRY_EXIT_CODE  # its handler, not the kubelet's SIGKILL
    saved = record(cloud["gcs"], PATHS)
    assert saved["status"] == "cancelled" and saved["steps"]["train"]["status"] == "cancelled", saved
    assert [entry.get("driver") for entry in saved["cancellations"]] == [DRIVER]  # one entry, not two
    assert kube.created == [jobset_of(RECIPE, "train")] and kube.jobsets == {}


def test_cancel_of_one_step_while_the_driver_runs_is_refused_in_one_line(cloud):
    kube = cloud["kube"]
    kube.kubelet = None  # its pod stays Pending: the Job runs
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    result = runner.invoke(app, ["cancel", RECIPE, "train", "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert "leaves the run's other steps running unwatched: use `tpu-rl cancel" in " ".join(result.output.split())
    assert kube.job_calls == [("create", DRIVER)]  # nothing stopped


def test_the_request_configmap_is_the_requests_own_and_owned_by_its_job(cloud):
    kube = cloud["kube"]
    kube.kubelet = None
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    digest = kube.jobs[DRIVER]["metadata"]["annotations"]["tpu-rl/request-sha256"]
    [name] = [name for name in kube.configmaps if name.startswith(f"{DRIVER}-request")]
    assert name == f"{DRIVER}-request-{digest[:12]}"
    [owner] = kube.configmaps[name]["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "batch/v1", "kind": "Job", "name": DRIVER, "uid": kube.jobs[DRIVER]["metadata"]["uid"]}


def test_a_rerun_of_a_finished_drivers_request_deletes_its_configmap_before_making_it_again(cloud):
    """The same request's ConfigMap has the same name and is owned by the finished Job: left to the garbage
    collector, it could be deleted after this run made it again, and the new pod would never mount it."""
    kube = cloud["kube"]
    kube.kubelet = None
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    [name] = [name for name in kube.configmaps if name.startswith(f"{DRIVER}-request")]
    kube.jobs[DRIVER]["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    kube.calls.clear()
    result = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert result.exit_code == 0, result.output
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    made = [(method, call_path) for _, method, call_path, _ in kube.calls
            if call_path in (path, f"{path}/{name}") and method in ("DELETE", "POST")]
    assert made[:2] == [("DELETE", f"{path}/{name}"), ("POST", path)], made


def test_run_waits_for_a_driver_job_being_deleted_and_starts_a_new_one(cloud):
    kube = cloud["kube"]
    kube.kubelet = None
    going = kube.put_job(DRIVER, {"tpu-rl/run": PATHS.run_name, "tpu-rl/component": "driver"})
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    threading.Timer(1.0, lambda: kube.jobs.pop(DRIVER, None)).start()  # its pod terminated: the Job goes
    result = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert result.exit_code == 0, result.output
    assert f"run {PATHS.run_name}: started its driver, Job {DRIVER}, in the cluster" in result.output
    assert kube.job_calls == [("create", DRIVER)]


@pytest.mark.parametrize("error, retried", [
    ("ApiError", True), ("NotDeployed", True), ("RuntimeError", True), ("Terminated", True), ("SIGTERM", True),
    ("StepFailed", False), ("UserError", False), ("OutputMissing", False), ("Interrupted", False)])
def test_drive_exits_so_that_its_job_retries_every_ending_the_run_did_not_decide(monkeypatch, tmp_path, error,
                                                                                 retried):
    """The Job's podFailurePolicy fails it at once on OUTCOME_EXIT_CODES; anything else counts toward
    backoffLimit and starts the driver again (an API away, a new node's metadata server not ready)."""
    from tpu_rl.recipes import UserError
    from tpu_rl.recipes.outcome import ApiError, CredentialsMissing, Interrupted, OutputMissing, StepFailed
    from tpu_rl.scripts.cli import drive

    kinds = {"ApiError": ApiError, "RuntimeError": RuntimeError, "StepFailed": StepFailed, "UserError": UserError,
             "OutputMissing": OutputMissing,
             "Interrupted": Interrupted, "SIGTERM": Interrupted}  # the pipeline's ending after a SIGTERM
    if error == "SIGTERM":
        monkeypatch.setattr(drive, "_sigterm", threading.Event())
        drive._sigterm.set()
    cause = "no Google credentials (DefaultCredentialsError)"  # as scripts/cloud/clients.py raises it

    def fail(console, path, in_cluster):
        if error == "Terminated":
            raise drive.Terminated()
        if error == "NotDeployed":  # a NotDeployed: no credentials yet on a new node
            raise CredentialsMissing(f"{cause}: run `gcloud auth application-default login`", cause=cause)
        raise kinds[error]("a bug" if error == "RuntimeError" else "the step ended")

    monkeypatch.setattr(drive, "_drive", fail)
    out = io.StringIO()
    code = drive.drive_to(out, tmp_path / "request.json", in_cluster=True)
    assert (code == RETRY_EXIT_CODE) if retried else (code in OUTCOME_EXIT_CODES)
    assert (RETRY_EXIT_CODE not in OUTCOME_EXIT_CODES) and code != 0
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("error: ") and "gcloud auth" not in last, last  # no user's login in a pod
    if error == "NotDeployed":
        assert "service account tpu-rl-driver" in last and "Workload Identity" in last, last


def test_a_job_is_running_until_its_final_condition():
    """FailureTarget and SuccessCriteriaMet are interim (the pods still terminate): only Failed and
    Complete end it (peers/job_life.py follows the controller's order)."""
    from tpu_rl.scripts.pipeline.gke.driver import job_phase

    interim = {"status": {"conditions": [{"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"}]}}
    assert job_phase(interim) == ("running", "")
    interim["status"]["conditions"].append({"type": "Failed", "status": "True", "reason": "PodFailurePolicy"})
    assert job_phase(interim) == ("failed", "PodFailurePolicy")
    assert job_phase({"status": {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}}) == ("running", "")


def test_the_jobs_pods_created_in_one_second_are_ordered_by_their_start():
    from types import SimpleNamespace

    from tpu_rl.scripts.cloud.driver_job import Jobs

    def pod(name: str, started: str | None) -> dict:
        return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"startTime": started} if started else {}}

    listed = [pod("new", None), pod("second", "2026-01-01T00:00:01Z"), pod("first", "2026-01-01T00:00:00Z")]
    jobs = Jobs.__new__(Jobs)
    jobs.cluster = SimpleNamespace(list_pods=lambda selector: listed)
    assert [p["metadata"]["name"] for p in jobs.pods("x")] == ["first", "second", "new"]


def test_a_driver_of_another_version_is_said_in_one_line_by_run_and_status(cloud):
    kube = cloud["kube"]
    kube.kubelet = None  # its pod stays Pending: the Job runs, nothing drives
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    kube.jobs[DRIVER]["spec"]["template"]["metadata"]["annotations"][DRIVER_VERSION_ANNOTATION] = "0.0.9"
    drift = "! this run's driver runs tpu-rl 0.0.9, "
    again = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert again.exit_code == 0, again.output
    assert sum(line.startswith(drift) for line in again.output.splitlines()) == 1, again.output
    status = runner.invoke(app, ["status", RECIPE])
    assert drift in " ".join(status.output.split()), status.output


def test_status_counts_the_failures_of_a_driver_the_job_keeps_starting_again(cloud):
    """A driver that exits 75 (transient) is started again by its Job, up to its backoffLimit with a back-off
    that doubles to 10 min: `status` had said `driver: running` all along, a failing driver unseen."""
    kube = cloud["kube"]
    kube.kubelet = None  # its pods stay Pending until the test ends them, as the Job controller sees them
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    for _ in range(2):
        [pending] = [pod["metadata"]["name"] for pod in kube.pods_of_job(DRIVER)
                     if pod["status"]["phase"] == "Pending"]
        kube.pod_ended(pending, RETRY_EXIT_CODE)
    status = runner.invoke(app, ["status", RECIPE])
    line = " ".join(status.output.split())
    assert (f"driver: running (Job {DRIVER}, tpu-rl {runtime_version()}, started again after 2 of at most "
            f"{DRIVER_BACKOFF_LIMIT} failures, the last exit {RETRY_EXIT_CODE})") in line, status.output


def test_drive_without_its_request_says_so_in_one_line(settings_env, tmp_path):
    result = runner.invoke(app, ["drive", "--request", str(tmp_path / "missing.json")])
    assert result.exit_code == ExitCode.BAD_INPUT
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert f"the driver's request {tmp_path / 'missing.json'} cannot be read" in line


def test_drive_of_a_vm_recipe_is_refused_in_one_line(cloud, tmp_path):
    """The VM's startup script is its driver: `tpu-rl drive` has nothing to run there."""
    request = tmp_path / "request.json"
    request.write_text('{"recipe": "llama31-v6e8", "steps": ["train"], "sets": [], "run": null, '
                       '"replace": false, "follow_logs": false, "user_files": [], "version": "0"}')
    result = runner.invoke(app, ["drive", "--request", str(request)])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert "runs on a TPU VM, whose startup script is its driver" in line


def test_a_driver_refused_cloud_logging_says_so_in_one_line_and_its_run_succeeds(cloud, kubelet):
    """The driver's Google account has no logging role: the evaluations it did not see stream past are
    not filled in, run.json says why and which command measures the trained checkpoint."""
    from peers.http import Fault

    recipe = get_recipe(RECIPE)
    for step in ("convert", "train"):
        put_step_output(cloud["gcs"], recipe, step)
    cloud["google"].faults.append(Fault("POST", "/v2/entries:list", 403))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output + driver_log(cloud["kube"])
    why = "the run's driver may not read Cloud Logging (reading Cloud Logging failed: HTTP 403"
    [line] = [line for line in driver_log(cloud["kube"]).splitlines() if "evaluations not filled in" in line]
    assert why in line and f"`tpu-rl eval {RECIPE} --run {PATHS.run_name}`" in line, line
    assert why in record(cloud["gcs"], PATHS)["evaluations_unread"]


def test_a_log_cursor_prints_lines_of_one_timestamp_once_and_orders_trimmed_fractions():
    """The kubelet's RFC3339Nano drops a fraction's trailing zeros; lines may share a timestamp."""
    from tpu_rl.scripts.pipeline.gke.log_stream import LogCursor

    cursor = LogCursor()
    first = "2026-01-01T00:00:00.1Z a\n2026-01-01T00:00:00.1Z b\n"
    assert cursor.start() is None and cursor.new_lines(first) == ["a", "b"]
    # the next read overlaps: a and b again, a third line of the same instant, then .10000001 (later than .1)
    again = first + "2026-01-01T00:00:00.1Z c\n2026-01-01T00:00:00.10000001Z d\n2026-01-01T00:00:00.09Z old\n"
    assert cursor.start() == "2026-01-01T00:00:00Z" and cursor.new_lines(again) == ["c", "d"]
    cursor.start()
    assert cursor.new_lines(again) == []


def test_a_log_cursor_loses_no_line_of_a_read_answered_long_after_it_was_written(kube):
    """Each read starts at the kubelet's time of the last line printed (sinceTime), by the log's own clock: lines
    written minutes before a read is answered (a slow answer, a retry, a laptop asleep) still come. The window of
    the seconds since the previous read and a 10 s margin lost them: a train stall test lost the driver's `error:`
    line so when a read of the attached `run` was answered 11 s late."""
    from datetime import datetime, timedelta, timezone

    from tpu_rl.recipes.outcome import RetryPolicy
    from tpu_rl.scripts.cloud.cluster import Cluster
    from tpu_rl.scripts.cloud.kubeconfig import api_client_for
    from tpu_rl.scripts.pipeline.gke.log_stream import LogCursor

    settings = peer_settings()
    cluster = Cluster(api_client_for(settings, os.environ["KUBECONFIG"]), settings, RetryPolicy(base_delay=0))
    pod = f"{driver_name(spec_of(get_recipe(RECIPE)))}-abcde"
    written = datetime.now(timezone.utc) - timedelta(minutes=5)
    kube.pods[pod] = {"metadata": {"name": pod, "labels": {}}}
    kube.pod_logs[pod], kube.pod_log_stamps[pod] = "a\n", [written]
    cursor = LogCursor()
    assert cursor.read(cluster, pod, DRIVER_CONTAINER) == ["a"]
    # b and c came one and two minutes after a, and minutes before this read is answered
    kube.pod_logs[pod] += "b\nc\n"
    kube.pod_log_stamps[pod] += [written + timedelta(minutes=1), written + timedelta(minutes=2)]
    assert cursor.read(cluster, pod, DRIVER_CONTAINER) == ["b", "c"]
    assert cursor.read(cluster, pod, DRIVER_CONTAINER) == []
    # the first read takes the whole log; each next one from the second of the last line printed
    assert [query.get("sinceTime") for _, _, path, query in kube.calls if path.endswith(f"/pods/{pod}/log")] == [
        None, *(f"{stamp:%Y-%m-%dT%H:%M:%S}Z" for stamp in (written, written + timedelta(minutes=2)))]
