"""What Kueue's Workload and the cluster autoscaler's ProvisioningRequest say about a JobSet, read as plain
dicts in the API's own JSON shape: queued, checking, admitted, evicted and why; a request's state. Pure:
nothing here talks to a cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Shapes: Kueue v0.17.1 apis/kueue/v1beta2/workload_types.go (vendored CRD in tests/contracts/vendor/kueue)
# and kubernetes/autoscaler@adfbe7e4 cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1
# (the commit Kueue v0.17.1's go.mod builds against; vendored CRD in tests/contracts/vendor/provisioningrequest).
# Kueue labels the Workload of a job with the job's UID (pkg/controller/constants JobUIDLabel).
WORKLOAD_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Why Kueue evicted a workload: its own deactivations evict with reason Deactivated + "DueTo" + the cause
# (kubernetes-sigs/kueue v0.17.1 pkg/workload/workload.go ReasonWithCause), someone else's setting
# spec.active false with plain Deactivated (docs/provenance.md#why-kueue-evicted-a-workload).
EVICTED_DEACTIVATED = "Deactivated"
EVICTED_DEACTIVATED_BY_KUEUE = "DeactivatedDueTo"  # the prefix of Kueue's own deactivations
# The states of one admission check (apis/kueue/v1beta2/admissioncheck_types.go).
CHECK_REJECTED, CHECK_READY, CHECK_RETRY = "Rejected", "Ready", "Retry"
# The ProvisioningRequest conditions (autoscaling.x-k8s.io/v1 types.go), in the order Kueue's provisioning
# admission check tests them (pkg/controller/admissionchecks/provisioning/controller.go syncCheckStates).
REQUEST_CONDITIONS = ("Failed", "CapacityRevoked", "BookingExpired", "Provisioned", "Accepted")

WorkloadPhase = Literal["absent", "queued", "checking", "admitted", "evicted", "inactive", "finished"]


@dataclass(frozen=True)
class AdmissionCheck:
    name: str
    state: str  # Pending, Ready, Retry, Rejected
    message: str


@dataclass(frozen=True)
class WorkloadState:
    phase: WorkloadPhase
    name: str = ""
    uid: str = ""
    reason: str = ""  # of the condition that decides the phase
    message: str = ""
    flavors: tuple[str, ...] = ()  # the ResourceFlavors Kueue admitted the pod sets to
    checks: tuple[AdmissionCheck, ...] = ()
    by_kueue: bool = False  # an inactive workload that Kueue deactivated itself, not an admin
    requeue_at: str = ""  # status.requeueState.requeueAt: an evicted one waits out its backoff until then
    reserved_at: str = ""  # when its quota was reserved (QuotaReserved True's lastTransitionTime), if it is
    evicted_before: bool = False  # it has an Evicted condition: its quota was taken back at least once

    def check(self, name: str) -> AdmissionCheck | None:
        return next((check for check in self.checks if check.name == name), None)


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def _is_true(conditions: dict[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def workload_state(obj: dict | None) -> WorkloadState:
    """What Kueue says about a job's Workload: finished; inactive (deactivated: spec.active false, or
    evicted for it, or marked DeactivationTarget); evicted (and requeued by Kueue); admitted (quota and
    every admission check); checking (quota reserved, a check such as the flex-start ProvisioningRequest
    not Ready yet); queued (no quota yet). The reason and message are those of the deciding condition."""
    if obj is None:
        return WorkloadState("absent")
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conditions = _conditions(obj)
    flavors = tuple(sorted({flavor for assignment in (status.get("admission") or {}).get("podSetAssignments") or []
                            for flavor in (assignment.get("flavors") or {}).values()}))
    checks = tuple(AdmissionCheck(c.get("name", ""), c.get("state", ""), c.get("message", ""))
                   for c in status.get("admissionChecks") or [])

    evicted = _is_true(conditions, "Evicted")
    eviction = (conditions.get("Evicted") or {}).get("reason", "") if evicted else ""
    by_kueue = _is_true(conditions, "DeactivationTarget") or eviction.startswith(EVICTED_DEACTIVATED_BY_KUEUE)

    def state(phase: WorkloadPhase, kind: str) -> WorkloadState:
        condition = conditions.get(kind) or {}
        return WorkloadState(phase, meta.get("name", ""), meta.get("uid", ""), condition.get("reason", ""),
                             condition.get("message", ""), flavors, checks, by_kueue and phase == "inactive",
                             (status.get("requeueState") or {}).get("requeueAt") or "",
                             (conditions.get("QuotaReserved") or {}).get("lastTransitionTime", "")
                             if _is_true(conditions, "QuotaReserved") else "", "Evicted" in conditions)

    if _is_true(conditions, "Finished"):
        return state("finished", "Finished")
    if spec.get("active") is False or eviction.startswith(EVICTED_DEACTIVATED):
        return state("inactive", "Evicted")
    if _is_true(conditions, "DeactivationTarget"):
        return state("inactive", "DeactivationTarget")
    if evicted:
        return state("evicted", "Evicted")
    if _is_true(conditions, "Admitted"):
        return state("admitted", "Admitted")
    if _is_true(conditions, "QuotaReserved"):
        return state("checking", "QuotaReserved")
    return state("queued", "QuotaReserved")


def workload_of(workloads: list[dict], jobset: dict | None) -> dict | None:
    """The Workload Kueue made for this JobSet: labelled with its UID, or owned by it."""
    uid = ((jobset or {}).get("metadata") or {}).get("uid")
    if not uid:
        return None
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if (meta.get("labels") or {}).get(WORKLOAD_JOB_UID_LABEL) == uid or \
                any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
            return workload
    return None


@dataclass(frozen=True)
class RequestState:
    name: str
    state: str  # the first true condition of REQUEST_CONDITIONS, else "Pending"
    message: str
    attempt: int


def request_attempt(name: str) -> int:
    """Kueue names a workload's requests <workload>-<check>-<attempt> (provisioning.go ProvisioningRequestName)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def request_state(obj: dict) -> RequestState:
    name = (obj.get("metadata") or {}).get("name", "")
    conditions = _conditions(obj)
    for kind in REQUEST_CONDITIONS:
        if _is_true(conditions, kind):
            return RequestState(name, kind, conditions[kind].get("message", ""), request_attempt(name))
    waiting = conditions.get("Provisioned") or conditions.get("Accepted") or {}
    return RequestState(name, "Pending", waiting.get("message", ""), request_attempt(name))


def latest_request(requests: list[dict], workload_uid: str) -> RequestState | None:
    """The newest ProvisioningRequest Kueue filed for a workload (its controller reference), by attempt."""
    owned = [request for request in requests
             if any(ref.get("uid") == workload_uid for ref in (request.get("metadata") or {}).get("ownerReferences") or [])]
    states = [request_state(request) for request in owned]
    return max(states, key=lambda state: state.attempt, default=None)
