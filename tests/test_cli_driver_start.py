"""A run's driver pod that never starts is named, with the API's reason, and bounded: `run` shows why it
waits (the pod's PodScheduled condition, its container's waiting reason, its Warning events), ends past
DRIVER_START_SECONDS (at once for an image that does not exist) with one line that names the reason and
the fix, and deletes the Job, which ran nothing; `status` shows why. The fake API leaves the pod as the
real components would (peers/pod_start.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from cli_helpers import RECIPE, error_line
from peers.fixtures import peer_settings, spec_of
from peers.pod_start import NO_ROOM, mount_error
from tpu_rl.jobs.driver import driver_name
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

DRIVER = driver_name(spec_of(get_recipe(RECIPE)))
BUCKET = peer_settings().gcs_bucket
ACCOUNT = "rl-test-gke-wl-sa@tpu-rl-test.iam.gserviceaccount.com"
TICK = timedelta(minutes=2)  # the run's clock, per reading of it
ENDS_WITHIN_SECONDS = 60  # real time; the run's own bound is its clock's 20 min


def _ticking_clock(monkeypatch) -> None:
    """Each reading of the run's clock is TICK later: the start bound passes in a few polls."""
    from tpu_rl.scripts.cli import cloud as cli_cloud

    build, clock = cli_cloud.make_session, [datetime.now(timezone.utc)]

    def now() -> datetime:
        clock[0] += TICK
        return clock[0]

    def make_session(spec, settings, *args):
        session = build(spec, settings, *args)
        session.now = now
        return session

    monkeypatch.setattr(cli_cloud, "make_session", make_session)


def _run(*args: str):
    """`tpu-rl run` in a thread, so that a run that never ends fails the test instead of hanging it."""
    done: list = []
    thread = threading.Thread(target=lambda: done.append(CliRunner().invoke(app, ["run", RECIPE, *args])),
                              daemon=True)
    thread.start()
    thread.join(ENDS_WITHIN_SECONDS)
    assert done, f"run did not end within {ENDS_WITHIN_SECONDS} s while its driver pod never started"
    return done[0]


def _stuck_run(cloud, monkeypatch, how: str):
    """`run` whose driver pod is stuck as `how` says (peers/pod_start.py), on the ticking clock: the fake
    API, the result (ended as a failed job) and the pod the Events are about."""
    kube = cloud["kube"]
    kube.driver_stuck = how
    _ticking_clock(monkeypatch)
    result = _run()
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    (pod,) = {event["involvedObject"]["name"] for event in kube.events}
    return kube, result, pod


@pytest.mark.parametrize("how, reason, said, fix", [
    ("forbidden", "FailedMount", mount_error("forbidden", BUCKET, ACCOUNT),
     f"the driver's service account cannot read gs://{BUCKET} through Workload Identity yet (it takes a few minutes "
     f"after a deploy): check that `npx cdktf deploy {RECIPE}` completed"),
    ("no bucket", "FailedMount", mount_error("no bucket", BUCKET, ACCOUNT),
     f"bucket gs://{BUCKET} does not exist: deploy the artifacts stack (`npx cdktf deploy artifacts`) or fix "
     "GCS_BUCKET"),
])
def test_a_driver_pod_that_never_starts_ends_run_at_the_bound_naming_the_reason_and_the_fix(
        cloud, monkeypatch, how, reason, said, fix):
    kube = cloud["kube"]
    kube.driver_stuck = how
    _ticking_clock(monkeypatch)
    result = _run()
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    (pod,) = [event["involvedObject"]["name"] for event in kube.events]
    waiting = [line for line in result.output.splitlines() if line.startswith("driver: pod")]
    assert waiting and waiting[0].startswith(f"driver: pod {pod} not started after "), result.output
    assert waiting[0].endswith(f"(run waits up to 0:20:00): {reason}: {said}")
    assert error_line(result) == (
        f"error: the run's driver did not start within 0:20:00 (pod {pod}: {reason}: {said}); {fix}; its Job "
        f"{DRIVER} was deleted before it ran anything: then rerun `tpu-rl run {RECIPE}`")
    assert kube.jobs == {} and kube.created == []  # nothing ran, nothing was submitted


def test_a_driver_pod_no_node_has_room_for_ends_run_at_the_bound_and_stays_to_start_once_one_has(
        cloud, monkeypatch):
    kube, result, pod = _stuck_run(cloud, monkeypatch, "unschedulable")
    assert error_line(result) == (
        f"error: the run's driver found no room to start within 0:20:00 (pod {pod}: Unschedulable: {NO_ROOM}); "
        "the system pool system-np has no room for it and its autoscaler added none: see `kubectl get pods -A "
        f"-o wide` for what fills it, or end other runs' drivers; its Job {DRIVER} stays and starts once room "
        f"frees (as a sweep's earlier runs end): follow it with `tpu-rl status {RECIPE}`, or stop it with "
        f"`tpu-rl cancel {RECIPE}`")
    assert list(kube.jobs) == [DRIVER] and kube.created == []


def test_a_driver_image_that_does_not_exist_ends_run_at_once(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.driver_stuck = "image"
    result = _run()
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith("error: the run's driver did not start (pod tpu-rl-driver-"), line
    assert ": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image " in line
    assert line.endswith(f"the cluster's nodes cannot pull the driver's image: check that they reach its registry; "
                         f"its Job {DRIVER} was deleted before it ran anything: then rerun `tpu-rl run {RECIPE}`")
    assert kube.jobs == {}


def test_status_shows_why_a_detached_runs_driver_has_not_started(cloud):
    kube = cloud["kube"]
    kube.driver_stuck = "forbidden"
    assert _run("--detach").exit_code == 0
    status = CliRunner().invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    text = " ".join(status.output.split())
    (pod,) = [event["involvedObject"]["name"] for event in kube.events]
    assert f"driver: pod {pod} not started after 0:00:" in text, status.output
    assert " ".join(f"(run waits up to 0:20:00): FailedMount: {mount_error('forbidden', BUCKET, ACCOUNT)}".split()) \
        in text
    assert ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings()).run_name in text


def test_a_driver_image_the_nodes_cannot_reach_is_named_and_bounded_while_the_fuse_sidecar_runs(cloud, monkeypatch):
    """The webhook's GCS FUSE sidecar runs first (an init container with restartPolicy Always), so the pod
    has a running container while the driver's own waits on its image: that is not a started driver."""
    kube, result, name = _stuck_run(cloud, monkeypatch, "unreachable image")
    (event,) = kube.events
    image = event["message"].split('"')[1]  # the kubelet's Failed: Failed to pull image "…"
    why = f'ImagePullBackOff: Back-off pulling image "{image}"'  # the kubelet's waiting reason and message
    waiting = [line for line in result.output.splitlines() if line.startswith("driver: pod")]
    assert waiting and waiting[0].endswith(f"(run waits up to 0:20:00): {why}"), result.output
    assert error_line(result) == (
        f"error: the run's driver did not start within 0:20:00 (pod {name}: {why}); the cluster's nodes cannot "
        f"pull the driver's image: check that they reach its registry; its Job {DRIVER} was deleted before it "
        f"ran anything: then rerun `tpu-rl run {RECIPE}`")
    assert kube.jobs == {} and kube.created == []


def test_a_scheduled_driver_pod_is_not_said_to_want_room_by_the_schedulers_earlier_event(cloud, monkeypatch):
    """A pod placed on a node the autoscaler added keeps the scheduler's FailedScheduling Event (the API
    server keeps Events an hour): while its image is pulled it waits with the kubelet's PodInitializing."""
    kube, result, name = _stuck_run(cloud, monkeypatch, "pulling")
    assert [event["reason"] for event in kube.events] == ["FailedScheduling"]
    assert not [line for line in result.output.splitlines() if "FailedScheduling" in line or "Insufficient" in line]
    assert error_line(result) == (
        f"error: the run's driver did not start within 0:20:00 (pod {name}: PodInitializing); see `kubectl "
        f"describe pod {name}`; its Job {DRIVER} was deleted before it ran anything: then rerun `tpu-rl run "
        f"{RECIPE}`")
    assert kube.jobs == {}

