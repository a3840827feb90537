"""A step that has its capacity but cannot start does not keep the slice billed while `run` waits (issue 25,
section 4): an image the kubelet cannot pull, or pods on their nodes that do not all become Ready within

READY_WAIT, end `run` with one line naming the pod, the container and (for a pull) the image, and the
JobSet is deleted by its UID. The fake Kubernetes API reports the containers in the Pod status's own shape
(status.containerStatuses / initContainerStatuses [].state.waiting.reason and message, the kubelet's
words: tests/peers/jobset_life.py start_failure). Driven on the drills' virtual clock (10 min a poll) with
a poll budget, so the old code, which waited with no end, exits by Ctrl-C's code instead of hanging."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cli_helpers import CONVERT, RECIPE, TRAIN, error_line, run_record, run_train, stall_clock, succeeds
from tpu_rl.jobs.k8s import MAIN_CONTAINER
from peers.fixtures import put_step_output
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()
RERUN = f"then rerun `tpu-rl run {RECIPE} --steps train`"


def test_a_pathways_tag_that_does_not_exist_ends_train_with_one_line_naming_the_sidecar_and_its_image(
        cloud, monkeypatch):
    kube, image = cloud["kube"], get_recipe(RECIPE).pathways_images.proxy
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", ticks=400, start_fails=("pathways-proxy", "ErrImagePull"))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith(f"error: step train stopped: container pathways-proxy of pod {TRAIN}-pathways-head-0-0-"), line
    # the registry said "not found" (gRPC NotFound): at the first poll that shows the kubelet's message
    assert f"cannot pull image {image} (ErrImagePull: rpc error: code = NotFound desc = failed to pull and " \
           f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found); JobSet {TRAIN} ' \
           f"deleted, so no TPU bills; fix the image in recipes/recipes.toml (`tpu-rl preflight {RECIPE}` checks " \
           f"each one); {RERUN}" in line, line
    assert kube.deleted == [TRAIN] and TRAIN not in kube.jobsets and kube._ticks.get(TRAIN, 1) <= 2
    assert run_record(cloud)["steps"]["train"]["status"] == "failed"


def test_a_registry_that_refuses_the_pull_ends_train_once_the_kubelet_has_retried_for_five_minutes(
        cloud, monkeypatch):
    """A 403 is ErrImagePull with containerd's code Unknown, as a dropped connection is: the kubelet backs
    off and pulls again (ImagePullBackOff between), so `run` gives it IMAGE_PULL_FAILING_SECONDS."""
    kube, image = cloud["kube"], get_recipe(RECIPE).pathways_images.server
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", ticks=400, start_fails=("pathways-worker", "ErrImagePull"),
              pull_error="forbidden")
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert f"step train stopped: container pathways-worker of pod {TRAIN}-worker-0-" in line, line
    # the kubelet's own message, kept from an ErrImagePull poll though the last poll said ImagePullBackOff
    assert f"cannot pull image {image} (ErrImagePull: failed to pull and unpack " \
           f'image "{image}": ' in line and ": 403 Forbidden) for 0:10:00, the kubelet retrying; JobSet " in line, line
    assert kube.deleted == [TRAIN]


@pytest.mark.parametrize("reason, because", [("RegistryUnavailable", "the registry is unavailable: pinging "),
                                             ("SignatureValidationFailed", "the signature validation failed: ")])
def test_a_pull_the_kubelet_names_registry_unavailable_or_signature_failed_ends_train_after_its_retries(
        cloud, monkeypatch, reason, because):
    # Before: neither reason was a failing pull, so `run` waited on the billed slice for READY_WAIT instead.
    kube, image = cloud["kube"], get_recipe(RECIPE).pathways_images.server
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", ticks=400, start_fails=("pathways-worker", reason))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert f"step train stopped: container pathways-worker of pod {TRAIN}-worker-0-" in line, line
    assert f"cannot pull image {image} ({reason}: image pull failed for {image} because {because}" in line, line
    assert ") for 0:10:00, the kubelet retrying; JobSet " in line, line
    assert kube.deleted == [TRAIN]


def test_an_image_name_the_kubelet_cannot_parse_ends_convert_at_the_first_poll_that_shows_it(cloud, monkeypatch):
    kube, image = cloud["kube"], get_recipe(RECIPE).maxtext.image
    stall_clock(monkeypatch)
    kube.plan(CONVERT, outcome="hang", ticks=400, start_fails=(MAIN_CONTAINER, "InvalidImageName"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert f"container {MAIN_CONTAINER} of pod " in line and f"cannot pull image {image} (InvalidImageName: " \
           f'Failed to apply default image tag "{image}"' in line, line
    assert "retrying" not in line and "so no TPU bills" not in line, line
    assert kube.deleted == [CONVERT] and kube._ticks.get(CONVERT, 1) == 1  # at the first poll


def test_a_worker_that_crash_loops_on_its_node_ends_train_after_the_ready_wait_though_ready_between_back_offs(
        cloud, monkeypatch):
    """The worker's container runs (and its pod is Ready) at every other poll, as between back-offs; its
    restart count grows, so the count of READY_WAIT goes on."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", outcome="hang", ticks=400, start_fails=("pathways-worker", "CrashLoopBackOff"))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith("error: step train stopped: its pods have had their nodes but not all been Ready for "
                           f"1:40:00, longer than READY_WAIT's 1:30:00; pod {TRAIN}-worker-0-0-"), line
    assert re.search(r": container pathways-worker CrashLoopBackOff, \d+ restarts; JobSet ", line), line
    assert f"JobSet {TRAIN} deleted, so no TPU bills; its logs: `tpu-rl logs {RECIPE} train`; {RERUN}" in line, line
    from tpu_rl.recipes.capacity.modes import READY_WAIT_SECONDS

    assert READY_WAIT_SECONDS == 90 * 60  # the 1:30:00 above, and docs/pipeline.md's
    assert kube.deleted == [TRAIN]


def test_a_pull_that_fails_once_and_then_works_does_not_end_the_step(cloud, monkeypatch):
    """ErrImagePull is also a dropped connection: one failed pull, and the kubelet's retry pulls it."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(TRAIN, capacity="spot", ticks=4, start_fails=("pathways-worker", "ErrImagePull"), start_fails_until=2,
              pull_error="timeout", **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == 0, result.output
    assert "ErrImagePull: failed to pull and unpack" in result.output and "i/o timeout" in result.output
    assert "train: output verified" in result.output
    assert kube.deleted == []


def test_a_slow_image_pull_within_the_ready_wait_is_not_ended(cloud, monkeypatch):
    """Every pod on its node, its containers ContainerCreating for 20 min (the images pulling)."""
    kube = cloud["kube"]
    stall_clock(monkeypatch)
    kube.plan(CONVERT, pulling_ticks=2, on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == 0, result.output
    assert kube.deleted == []
