"""The fake Kubernetes API's Workloads and ProvisioningRequests are the real objects' shape: each state a
drill goes through validates strictly against the vendored CRDs (Kueue v0.17.1's Workload v1beta2, and
the ProvisioningRequest v1 at the autoscaler commit Kueue v0.17.1 builds against); and what `run` reads
from them (tpu_rl.scripts.cloud.kueue) is what Kueue means by them."""

from __future__ import annotations

import functools
import hashlib
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest
import yaml

from contracts.k8s_schema import strict
from tpu_rl.jobs import render_manifests
from peers import kueue
from peers.fixtures import peer_settings, spec_of
from peers.kube_api import KubeApi
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.conventions import KUEUE_VERSION
from tpu_rl.scripts.cloud.kueue import latest_request, request_state, workload_of, workload_state

VENDOR = Path(__file__).resolve().parent / "contracts" / "vendor"
CRDS = {"kueue": ("kueue.x-k8s.io_workloads.yaml", "v1beta2"),
        "provisioningrequest": ("autoscaling.x-k8s.io_provisioningrequests.yaml", "v1")}


def source(folder: str) -> dict:
    return tomllib.loads((VENDOR / folder / "SOURCE.toml").read_text())


@functools.cache
def validator(folder: str):
    found = schema(folder)
    return jsonschema.validators.validator_for(found)(found)


def schema(folder: str) -> dict:
    name, version = CRDS[folder]
    crd = yaml.safe_load((VENDOR / folder / name).read_text())
    found = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return strict(found["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("folder", sorted(CRDS))
def test_the_vendored_crds_are_unmodified_licensed_and_of_the_pinned_kueue(folder):
    info = source(folder)
    assert hashlib.sha256((VENDOR / folder / CRDS[folder][0]).read_bytes()).hexdigest() == info["sha256"]
    assert info.get("tag", info.get("kueue_tag")) == KUEUE_VERSION, (
        f"{folder} is vendored for Kueue {info.get('tag', info.get('kueue_tag'))}, recipes/conventions.py pins "
        f"{KUEUE_VERSION}: copy the CRD of the new version and update SOURCE.toml")
    assert info["license"] == "Apache-2.0" and "Apache License" in (VENDOR / folder / "LICENSE").read_text()


def drive(plan: dict, ticks: int) -> tuple[KubeApi, str, list[tuple[dict, list[dict]]]]:
    """A train JobSet in the fake API under `plan`, advanced `ticks` times, a minute of Kueue's clock
    apart (so a retry's backoff passes); the Workload and requests of each tick."""
    kube = KubeApi.__new__(KubeApi)
    KubeApi.__init__(kube)
    clock = [datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)]
    kueue.use_clock(lambda: clock[0])
    manifest = render_manifests(spec_of(get_recipe("qwen3-v6e32")), peer_settings())["train"]
    name = manifest["metadata"]["name"]
    kube.plan(name, **plan)
    kube._store(manifest)
    seen = []
    for _ in range(ticks):
        clock[0] += timedelta(minutes=1)
        kube._advance(name)
        seen.append((yaml.safe_load(yaml.safe_dump(kube.workloads[name])),
                     [yaml.safe_load(yaml.safe_dump(r)) for r in kube.provreqs.values()]))
    return kube, name, seen


RETRIES_OVER = 16  # ticks, a minute apart, in which 4 requests fail and Kueue waits 1 + 2 + 4 min between them
PLANS = {
    "queued": ({"admitted_after": 3, "capacity": "spot"}, 2),
    "flex-start provisioned": ({"capacity": "flex-start"}, 4),
    "flex-start failing its retries": ({"capacity": "flex-start", "provisioning": ["Failed"]}, RETRIES_OVER),
    "flex-start revoked": ({"capacity": "flex-start", "reclaimed_after": 2, "revoked": True, "nodes_return": False}, 8),
}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_every_workload_and_request_the_fake_writes_matches_the_vendored_crds(case):
    plan, ticks = PLANS[case]
    _, _, seen = drive(plan, ticks)
    for workload, requests in seen:
        validator("kueue").validate(workload)
        for request in requests:
            validator("provisioningrequest").validate(request)


def test_a_workload_goes_queued_checking_admitted_as_kueue_says():
    kube, name, seen = drive({"capacity": "flex-start", "admitted_after": 1}, 4)
    phases = [workload_state(workload).phase for workload, _ in seen]
    assert phases == ["queued", "checking", "admitted", "admitted"]
    assert workload_state(seen[0][0]).message.startswith("couldn't assign flavors to pod set worker: ")
    assert workload_state(seen[-1][0]).flavors == ("cpu", "tpu-flex-start")
    assert workload_of(list(kube.workloads.values()), kube.jobsets[name]) is kube.workloads[name]


def test_a_request_that_fails_its_retries_leaves_an_inactive_workload_whose_request_keeps_the_message():
    kube, name, seen = drive({"capacity": "flex-start", "provisioning": ["Failed"]}, RETRIES_OVER)
    workload, requests = seen[-1]
    state = workload_state(workload)
    # Kueue deactivated it itself (kueue v0.17.1 pkg/workload/workload.go 1646, 1832) ...
    assert state.phase == "inactive" and state.reason == "DeactivatedDueToAdmissionCheck" and state.by_kueue
    # ... and, its quota released, dropped the check, which applies to the flex-start flavor only
    # (workload.go 1506-1530; integration test workload_controller_test.go 263-300) ...
    assert state.check("flex-start-slice") is None and state.flavors == ()
    # ... so the request's Failed condition is where GKE's message stays: the 4th attempt (3 retries),
    # the only request left, as Kueue deletes the superseded ones (provisioning/controller.go 208-228).
    [request] = [request_state(r) for r in requests]
    assert (request.state, request.attempt, request.message) == ("Failed", 4, "the test's Failed message")
    assert latest_request(requests, state.uid) == request
    # In between, a Retry evicts and requeues the workload: evicted, not inactive.
    assert "evicted" in [workload_state(w).phase for w, _ in seen]


def test_a_failed_request_is_retried_only_after_kueues_backoff_recorded_in_requeue_state():
    """Kueue v0.17.1: the Retry sets requeueAfterSeconds to backoffBaseSeconds * 2^retryCount (60 s by
    default, "60s*2^(n-1)", pkg/workload/admissionchecks.go 253-265), the workload's
    status.requeueState.requeueAt to the check's transition plus that (workload_controller.go 268-276),
    and it is requeued, with the next request, only once requeueAt has passed."""
    _, _, seen = drive({"capacity": "flex-start", "provisioning": ["Failed"]}, RETRIES_OVER)
    backoffs, filed_while_backing_off = [], []
    for (workload, requests), (before, before_requests) in zip(seen[1:], seen):
        requeue = workload["status"].get("requeueState") or {}
        if requeue.get("requeueAt") and not (before["status"].get("requeueState") or {}).get("requeueAt"):
            [check] = workload["status"]["admissionChecks"]
            backoffs.append((check["retryCount"], check["requeueAfterSeconds"], "count" in requeue))
        elif requeue.get("requeueAt"):
            filed_while_backing_off.append(len(requests) != len(before_requests) or
                                           requests[0]["metadata"]["name"] != before_requests[0]["metadata"]["name"])
    assert backoffs == [(1, 60, False), (2, 120, False), (3, 240, False)]
    assert filed_while_backing_off and not any(filed_while_backing_off)
    assert "requeueState" not in seen[-1][0]["status"]  # cleared once deactivated


def test_the_workload_name_is_kueues_hash_of_kind_group_name_and_uid():
    """The vectors of Kueue v0.17.1's own test (pkg/controller/jobframework/workload_names_test.go 73-99,
    ShortWorkloadNames off, its default)."""
    assert kueue.workload_name("name", "uid", kind="Job", group="batch") == "job-name-ef3a1"
    long = ("marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-"
            "media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-"
            "architect-validation-checked-approved-by-legal-and-ops-dept")
    assert kueue.workload_name(long, "uid", kind="Job", group="batch") == (
        "job-marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-"
        "media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-architect-"
        "validation-checked-approved-by-l-218b8")


@pytest.mark.parametrize("how, reason, message", [
    ("deactivated by Kueue", "DeactivatedDueToAdmissionCheck",
     "The workload is deactivated due to Admission check(s): flex-start-slice, were rejected"),
    ("stopped by someone", "Deactivated", "The workload is deactivated"),
])
def test_the_fakes_evicted_workload_is_released_as_kueues_job_reconciler_does(how, reason, message):
    """kubernetes-sigs/kueue v0.17.1 (6fcc132c) pkg/controller/jobframework/reconciler.go 590-592: once the
    job is stopped, Requeued False with the Evicted condition's reason and message, and QuotaReserved
    False, reason Pending, with the Evicted message (workload.UnsetQuotaReservationWithCondition)."""
    workload = kueue.workload_for({"metadata": {"name": "x", "uid": "u-1", "namespace": "default"},
                                   "spec": render_manifests(spec_of(get_recipe("qwen3-v6e32")), peer_settings())["train"]["spec"]})
    kueue.deactivate(workload, kueue.CHECK) if how == "deactivated by Kueue" else kueue.stop(workload)
    conditions = {c["type"]: c for c in workload["status"]["conditions"]}
    assert (conditions["Evicted"]["status"], conditions["Evicted"]["reason"]) == ("True", reason)
    assert conditions["Evicted"]["message"] == message
    assert (conditions["Requeued"]["status"], conditions["Requeued"]["reason"],
            conditions["Requeued"]["message"]) == ("False", reason, message)
    assert (conditions["QuotaReserved"]["status"], conditions["QuotaReserved"]["reason"],
            conditions["QuotaReserved"]["message"]) == ("False", "Pending", message)
    assert workload["spec"]["active"] is False and "admission" not in workload["status"]
