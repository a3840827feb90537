"""Capacity that goes away (issue 16): each drill ends in a resumed run, or one line and a non-zero exit,
within a bounded time, and run.json tells what happened. Driven through the fake Kubernetes API, whose
Workloads and ProvisioningRequests follow Kueue v0.17.1 and the vendored CRDs (tests/peers/kueue.py)."""

from __future__ import annotations

import json
from datetime import timedelta

from typer.testing import CliRunner

from cli_helpers import (POLL_MINUTES, RECIPE, TRAIN, error_line, put_actor_checkpoint, run_record, run_train, slow_polls,
                         succeeds, tpu_selector)
from peers.fixtures import peer_settings, spec_of
from peers.jobset_life import UNSCHEDULABLE
from peers.jobset_plan import Plan
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()


def test_a_request_that_fails_its_retries_stops_with_the_checks_own_message_and_the_next_command(cloud, monkeypatch):
    kube = cloud["kube"]
    slow_polls(monkeypatch)  # Kueue waits 1, 2 and 4 min before its retries
    kube.plan(TRAIN, capacity="flex-start", provisioning=["Failed"], **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    # Kueue filed the first request and its 3 retries (backoffLimitCount), then rejected the check and
    # deactivated the workload; the request keeps GKE's message, which the line repeats.
    assert f"request jobset-{TRAIN}-" in line and "-flex-start-slice-4 Failed: the test's Failed message" in line
    assert f"Kueue deactivated workload jobset-{TRAIN}-" in line
    assert "Admission check(s): flex-start-slice, were rejected" in line
    assert line.startswith("error: step train got no TPU capacity: tried flex-start for ")
    assert f"rerun `tpu-rl run {RECIPE} --steps train` later" in line
    assert "CAPACITY_WAIT (now flex-start=4h)" in line
    assert kube.deleted == [TRAIN] and TRAIN not in kube.jobsets and not kube.provreqs  # nothing stays queued
    # Between attempts Kueue evicts the workload and requeues it after its backoff (status.requeueState).
    assert f"train: Kueue evicted workload jobset-{TRAIN}-" in result.output
    assert "and requeues it at 20" in result.output and "(AdmissionCheck: At least one admission check is false)" in result.output
    assert f"request jobset-{TRAIN}-" in result.output and "in state Accepted: the test's accepted message" in result.output
    train = run_record(cloud)["steps"]["train"]
    assert train["status"] == "failed"
    [attempt] = train["capacity_attempts"]
    assert attempt["mode"] == "flex-start" and "Failed: the test's Failed message" in attempt["what_happened"]


def test_a_spot_stockout_moves_on_to_on_demand_after_the_spot_wait(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", stockout=("spot",), **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot,on-demand", "spot=2s")
    assert result.exit_code == 0, result.output
    assert kube.created == [TRAIN, TRAIN] and kube.deleted == [TRAIN]
    # Kueue admitted the first to spot (quota order); the second selects on-demand, so Kueue's flavor
    # assigner can give it only the on-demand flavor.
    assert tpu_selector(kube.jobsets[TRAIN])["tpu-rl/capacity"] == "on-demand"
    assert f"train: waiting for nodes for the v6e-32 slice (spot): {UNSCHEDULABLE} (waited 0:00:0" in result.output
    [hop] = [line for line in result.output.splitlines() if line.startswith("train: no spot capacity after")]
    assert hop.endswith(f"JobSet {TRAIN} deleted; submitting it on on-demand"), hop
    assert "train: output verified" in result.output
    train = run_record(cloud)["steps"]["train"]
    assert train["status"] == "succeeded" and train["capacity"] == "on-demand"
    assert [a["mode"] for a in train["capacity_attempts"]] == ["spot"]


def test_a_stockout_on_the_last_mode_stops_with_one_line_naming_each_mode_tried(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", stockout=("spot", "on-demand"), **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot,on-demand", "0.5s")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith("error: step train got no TPU capacity: tried spot for 0:00:0")
    assert "; on-demand for 0:00:0" in line and "longer than CAPACITY_WAIT's" in line
    assert "CAPACITY_WAIT (now spot=0.5s,on-demand=0.5s)" in line
    assert kube.deleted == [TRAIN, TRAIN] and TRAIN not in kube.jobsets
    assert [a["mode"] for a in run_record(cloud)["steps"]["train"]["capacity_attempts"]] == ["spot", "on-demand"]


def test_a_flex_start_slice_that_ends_mid_run_is_submitted_again_and_resumes(cloud, monkeypatch):
    """The slice ends at max_run_duration: JobSet recreates the workers, but a queued-provisioning pool
    gets nodes only through a new request, which Kueue files for no admitted workload; `run` deletes the
    JobSet and submits it again, for a new Workload and request."""

    kube = cloud["kube"]
    saved = put_actor_checkpoint(cloud["gcs"], get_recipe(RECIPE), 20)
    kube.plan(TRAIN, capacity="flex-start", reclaimed_after=3, nodes_return=False,
              resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=3s")
    assert result.exit_code == 0, result.output
    assert kube.created == [TRAIN, TRAIN] and kube.deleted == [TRAIN]
    [lost] = [line for line in result.output.splitlines() if line.startswith("train: the flex-start slice went away")]
    assert f"JobSet {TRAIN} deleted and submitted again, for a new slice; training resumes from checkpoint step 20" in lost
    assert UNSCHEDULABLE in lost
    assert saved.endswith("/20/")
    assert "pin" not in json.dumps(tpu_selector(kube.jobsets[TRAIN]))  # from the first mode again
    assert [r["metadata"]["name"][-2:] for r in kube.provreqs.values()] == ["-1"]  # the new Workload's first
    train = run_record(cloud)["steps"]["train"]
    assert train["status"] == "succeeded" and len(train["capacity_attempts"]) == 1


def test_a_revoked_flex_start_slice_deactivates_the_workload_and_run_submits_it_again(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="flex-start", reclaimed_after=3, nodes_return=False, revoked=True,
              resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=4h")
    assert result.exit_code == 0, result.output
    [lost] = [line for line in result.output.splitlines() if line.startswith("train: the flex-start slice went away")]
    assert "CapacityRevoked: the test's CapacityRevoked message" in lost
    assert kube.created == [TRAIN, TRAIN]


def test_status_and_a_new_run_read_a_deactivated_workload_and_submit_it_again(cloud, monkeypatch):
    from tpu_rl.jobs import render_manifests
    from tpu_rl.recipes import load_settings

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("CAPACITY", "flex-start")
    kube = cloud["kube"]
    recipe = load_settings().recipe(get_recipe(RECIPE))
    kube.plan(TRAIN, capacity="flex-start", provisioning=["Failed"], resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    kube.put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    clock = slow_polls(monkeypatch)
    for _ in range(12):  # Kueue files the request and its retries, then deactivates the workload
        clock[0] += timedelta(minutes=POLL_MINUTES)  # past each retry's backoff
        kube._advance(TRAIN)
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    note = " ".join(status.output.split())
    assert f"train: Kueue deactivated workload jobset-{TRAIN}-" in note
    assert "Failed: the test's Failed message; it will not run: `tpu-rl run qwen3-v6e32` deletes and submits it again" in note
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=4h")
    assert result.exit_code == 0, result.output
    assert "plan: train replace" in result.output
    assert kube.deleted == [TRAIN] and kube.created == [TRAIN]


def test_a_user_who_may_not_read_workloads_still_gets_the_wait_and_the_run(cloud, monkeypatch):
    from peers.http import Fault

    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", admitted_after=2, **succeeds(cloud))
    kube.faults.append(Fault("GET", "/workloads", 403, times=10_000))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == 0, result.output
    assert kube.faults[0].hits >= 1
    assert f"train: waiting for Kueue to admit JobSet {TRAIN} (no Workload of it is readable yet)" in result.output


def test_a_second_zone_serves_flex_start_when_the_first_has_no_stock(cloud, monkeypatch):
    """ZONE lists two zones that offer v6e flex-start: the first's request stays queued (no stock) past
    CAPACITY_WAIT, so `run` deletes the JobSet and submits it pinned to flex-start in the second zone,
    whose flavor (tpu-flex-start-a) alone matches, and which GKE provisions."""
    monkeypatch.setenv("ZONE", "us-east5-b,us-east5-a")
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="flex-start", zone="us-east5-b", stockout=("flex-start@us-east5-b",), **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=2s")
    assert result.exit_code == 0, result.output
    assert kube.created == [TRAIN, TRAIN] and kube.deleted == [TRAIN]
    selector = tpu_selector(kube.jobsets[TRAIN])
    assert selector["tpu-rl/capacity"] == "flex-start" and selector["topology.kubernetes.io/zone"] == "us-east5-a"
    assert "train: waiting for GKE to provision the v6e-32 slice (flex-start in us-east5-b, request " in result.output
    [hop] = [line for line in result.output.splitlines() if line.startswith("train: no flex-start capacity in us-east5-b after")]
    assert hop.endswith(f"JobSet {TRAIN} deleted; submitting it on flex-start in us-east5-a"), hop
    assert kube.workloads[TRAIN]["status"]["admission"]["podSetAssignments"][-1]["flavors"]["cpu"] == "tpu-flex-start-a"
    train = run_record(cloud)["steps"]["train"]
    assert train["status"] == "succeeded" and train["capacity"] == "flex-start" and train["zone"] == "us-east5-a"
    [attempt] = train["capacity_attempts"]
    assert attempt["mode"] == "flex-start" and attempt["zone"] == "us-east5-b"


def test_the_last_zone_of_the_last_mode_without_stock_stops_with_one_line_naming_each_place(cloud, monkeypatch):
    monkeypatch.setenv("ZONE", "us-east5-b,us-east5-a")
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", zone="us-east5-b", stockout=("spot",), **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "0.5s")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith("error: step train got no TPU capacity: tried spot in us-east5-b for 0:00:0"), line
    assert "; spot in us-east5-a for 0:00:0" in line
    assert kube.deleted == [TRAIN, TRAIN]
    assert [(a["mode"], a["zone"]) for a in run_record(cloud)["steps"]["train"]["capacity_attempts"]] == [
        ("spot", "us-east5-b"), ("spot", "us-east5-a")]


def test_status_shows_the_zone_the_train_step_runs_in(cloud, monkeypatch):
    from tpu_rl.jobs import render_manifests
    from tpu_rl.recipes import load_settings

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("CAPACITY", "spot")
    monkeypatch.setenv("ZONE", "us-east5-b,us-east5-a")
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", zone="us-east5-b", outcome="hang")
    recipe = load_settings().recipe(get_recipe(RECIPE))
    kube.put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert "on spot in us-east5-b" in status.output, status.output


# -- a healthy train step is never taken for a shortfall (review of issue 16, must-fix 1) -------------


def test_a_train_step_longer_than_the_wait_finishes_though_the_head_is_not_ready_at_the_end(cloud, monkeypatch):
    """The head's main container exits and its native sidecars still stop: the pod is Running, not
    Ready, for some polls before the JobSet completes, long after CAPACITY_WAIT."""
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="spot", ticks=8, finishing=3, **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot,on-demand", "30m")
    assert result.exit_code == 0, result.output
    assert kube.created == [TRAIN] and kube.deleted == []  # the slice was never given up
    assert "capacity_attempts" not in run_record(cloud)["steps"]["train"]


def test_a_worker_container_restart_after_the_wait_is_not_a_lost_slice(cloud, monkeypatch):
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="reservation", ticks=10, container_restart_at=8, **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "reservation,spot", "30m")
    assert result.exit_code == 0, result.output
    assert "Error (exit code 137)" in result.output  # the restart was seen and reported, not acted on
    assert kube.created == [TRAIN] and kube.deleted == []
    assert "went away" not in result.output


def test_the_wait_of_a_new_attempt_counts_from_its_restart_not_from_the_first_submission(cloud, monkeypatch):
    """A spot reclaim after training longer than the wait: JobSet restarts, the nodes come back, and the
    new attempt has its own CAPACITY_WAIT."""
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="spot", ticks=3, reclaimed_after=8, **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == 0, result.output
    assert "JobSet restarted" in result.output
    assert kube.created == [TRAIN] and kube.deleted == []


# -- the mode of a deactivated workload (must-fix 2) --------------------------------------------------
def test_a_failed_flex_start_request_is_reported_as_flex_start_though_the_workload_lost_its_flavors(cloud, monkeypatch):
    """CAPACITY=reservation,flex-start and Kueue admitted the unpinned JobSet to flex-start: once it is
    deactivated, its flavors are gone, but the shortfall is flex-start's, the last mode; nothing is
    submitted again on it."""
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="flex-start", provisioning=["Failed"], **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "reservation,flex-start", "4h")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith("error: step train got no TPU capacity: tried flex-start for ")
    assert "no reservation capacity" not in result.output
    assert kube.created == [TRAIN] and kube.deleted == [TRAIN]
    assert [a["mode"] for a in run_record(cloud)["steps"]["train"]["capacity_attempts"]] == ["flex-start"]


def test_a_flex_start_slice_lost_after_training_is_submitted_again_without_waiting_the_flex_start_wait(cloud, monkeypatch):
    """No node comes back to a queued-provisioning pool for an admitted workload, so `run` does not
    wait flex-start's 4 h before it submits the step again (must-fix 4)."""
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="flex-start", reclaimed_after=3, nodes_return=False,
              resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=4h")
    assert result.exit_code == 0, result.output
    [lost] = [line for line in result.output.splitlines() if line.startswith("train: the flex-start slice went away")]
    assert UNSCHEDULABLE in lost and "after the flex-start slice was had" in lost
    assert kube.created == [TRAIN, TRAIN] and kube.deleted == [TRAIN]


# -- a workload someone else deactivated (must-fix 5) -------------------------------------------------
def test_a_workload_an_admin_deactivated_is_not_replaced_without_replace(cloud, monkeypatch):
    from tpu_rl.jobs import render_manifests
    from peers import kueue
    from tpu_rl.recipes import load_settings

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("CAPACITY", "spot")
    kube = cloud["kube"]
    recipe = load_settings().recipe(get_recipe(RECIPE))
    kube.plan(TRAIN, capacity="spot", **succeeds(cloud))
    kube.put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    kueue.stop(kube.workloads[TRAIN])  # kueuectl stop workload: spec.active false, Evicted Deactivated
    status = runner.invoke(app, ["status", RECIPE])
    assert "was deactivated by someone, not by Kueue (Deactivated)" in " ".join(status.output.split())
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "was deactivated by someone, not by Kueue" in error_line(result)
    assert kube.deleted == [] and kube.created == []  # nothing deleted or submitted


def test_a_run_that_reattaches_to_a_flex_start_jobset_whose_slice_is_gone_submits_it_again_at_once(cloud, monkeypatch):
    """This `run` never saw the slice: an earlier one trained on it, and the JobSet restarted after the
    slice ended. The Workload is still admitted, its request Provisioned, the new workers unschedulable:
    no node will come (admission.slice_gone), so `run` does not wait flex-start's 4 h first."""
    from tpu_rl.jobs import render_manifests
    from tpu_rl.recipes import load_settings

    monkeypatch.setenv("CAPACITY", "flex-start")
    slow_polls(monkeypatch)
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="flex-start", reclaimed_after=3, nodes_return=False,
              resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    kube.put_jobset(render_manifests(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings())["train"])
    for _ in range(8):  # admitted on a provisioned slice, trained, the slice lost, the JobSet restarted
        kube._advance(TRAIN)
    assert kube.jobsets[TRAIN]["status"]["restarts"] == 1
    assert UNSCHEDULABLE in json.dumps([p["status"] for p in kube.pods.values()])
    result = run_train(cloud, monkeypatch, "flex-start", "flex-start=4h")
    assert result.exit_code == 0, result.output
    assert "reattaching to it" in result.output
    [lost] = [line for line in result.output.splitlines() if line.startswith("train: the flex-start slice went away")]
    assert "after the flex-start slice was had" in lost
    assert kube.deleted == [TRAIN] and kube.created == [TRAIN]  # deleted and submitted again, by this run
    [attempt] = run_record(cloud)["steps"]["train"]["capacity_attempts"]
    assert attempt["waited_seconds"] < 3600, attempt  # not flex-start's 4 h
