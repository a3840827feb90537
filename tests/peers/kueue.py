"""What Kueue v0.17.1 and GKE's queued provisioning write while a JobSet waits, for the fake Kubernetes API.

Each JobSet gets the Workload Kueue's JobSet integration makes for it, and a flex-start one the
ProvisioningRequests Kueue's provisioning admission check files; their shapes follow the vendored CRDs
(tests/contracts/vendor/kueue, tests/contracts/vendor/provisioningrequest) and tests/test_kueue_workload.py
validates them there. What Kueue writes, and when, follows v0.17.1:
- the Workload: name jobset-<name>-<hash>, the hash the first 5 hex digits of the SHA-1 of kind, group,
  name and UID, one a line (pkg/controller/jobframework/workload_names.go GetWorkloadNameForOwnerWithGVK,
  getHash), and label kueue.x-k8s.io/job-uid (reconciler.go); condition QuotaReserved False reason Pending with the flavor
  assigner's message while it has no quota (pkg/scheduler/scheduler.go, flavorassigner.go Message);
- the flex-start check: one request <workload>-<check>-<attempt> (provisioning.go ProvisioningRequestName)
  owned by the Workload; a Failed one is retried while attempt <= backoffLimitCount (3 by default,
  provisioningrequestconfig_types.go), with the check in Retry ("Retrying after failure: <message>") and
  requeueAfterSeconds = backoffBaseSeconds * 2^retryCount, capped at backoffMaxSeconds (60 and 1800 by
  default; pkg/workload/admissionchecks.go UpdateAdmissionCheckRequeueState, pkg/util/wait/backoff.go),
  then Rejected with the request's own message (admissionchecks/provisioning/controller.go 543-557);
  CapacityRevoked rejects it at once;
- a Retry evicts the Workload (Evicted reason AdmissionCheck, "At least one admission check is false";
  Requeued False, same reason), resets the check to Pending with retryCount + 1 (admissionchecks.go
  resetChecksOnEviction) and sets status.requeueState.requeueAt to the check's transition time plus its
  requeueAfterSeconds, without a count (admissionchecks.go GetMaxRetryTime, NeedsRequeueAtUpdate;
  workload_controller.go 268-276, SetRequeueState(.., false)); only after requeueAt does it go back to
  the queue (requeueAt cleared, Requeued True reason BackoffFinished, workload_controller.go 396-459),
  get quota again, and the next request is filed;
- a Rejected check deactivates the Workload: DeactivationTarget "Admission check(s): <names>, were
  rejected", then spec.active false, Evicted reason DeactivatedDueToAdmissionCheck "The workload is
  deactivated due to <that>", the quota released and with it the flex-start check (deactivate below);
- a retry's new request supersedes the old: Kueue deletes every owned request but the newest
  (admissionchecks/provisioning/controller.go 164, 208-228).
The messages GKE itself puts on a request's conditions are not published; the fake's are the test's own
text, which `run` must repeat verbatim.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from typing import Callable

CHECK = "flex-start-slice"  # tpu_rl.recipes.conventions.FLEX_START_ADMISSION_CHECK
# Kueue's default retryStrategy (apis/kueue/v1beta2/provisioningrequestconfig_types.go 77, 137-153).
BACKOFF_LIMIT_COUNT, BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS = 3, 60, 1800
QUEUE = "tpu-rl"
JOBSET_GROUP = "jobset.x-k8s.io"
# Without the ShortWorkloadNames gate (off by default in v0.17, pkg/features/kube_features.go 555), the
# name is at most 253 characters: a prefix of 253 - 1 - 5 and the hash (workload_names.go 30-50).
HASH_LENGTH, MAX_NAME_LENGTH = 5, 253


def _real_clock() -> datetime:
    return datetime.now(timezone.utc)


_clock: list[Callable[[], datetime]] = [_real_clock]


def use_clock(clock: Callable[[], datetime] | None) -> None:
    """The time Kueue sees (a drill's virtual clock, shared with `run`'s); None: the real one."""
    _clock[0] = clock or _real_clock


def moment() -> datetime:
    return _clock[0]()


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> str:
    return stamp(moment())


def workload_name(owner: str, uid: str, kind: str = "JobSet", group: str = JOBSET_GROUP) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK (workload_names.go 64-110), without an extra part."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner}\n{uid}".encode()).hexdigest()[:HASH_LENGTH]
    return f"{(kind.lower() + '-' + owner)[:MAX_NAME_LENGTH - 1 - HASH_LENGTH]}-{digest}"


def condition(kind: str, status: bool, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": now(), "observedGeneration": 1}


def workload_for(jobset: dict) -> dict:
    """The Workload Kueue's JobSet integration makes: one pod set per replicated job."""
    meta = jobset["metadata"]
    pod_sets = [{"name": rj["name"], "count": int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1)),
                 "template": {"metadata": {}, "spec": {"containers": [
                     {"name": c["name"], "image": c.get("image", "busybox"), "resources": c.get("resources") or {}}
                     for c in rj["template"]["spec"]["template"]["spec"]["containers"]]}}}
                for rj in jobset["spec"]["replicatedJobs"]]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": workload_name(meta["name"], meta["uid"]), "namespace": "default", "uid": f"wl-{meta['uid']}",
                     "creationTimestamp": now(), "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                          "name": meta["name"], "uid": meta["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"active": True, "queueName": QUEUE, "podSets": pod_sets},
        "status": {"conditions": []},
    }


def set_condition(workload: dict, new: dict) -> None:
    conditions = [c for c in workload["status"].get("conditions", []) if c["type"] != new["type"]]
    workload["status"]["conditions"] = [*conditions, new]


def pending(workload: dict, flavor: str, chips: int) -> None:
    """No quota yet: the scheduler's Pending condition with the flavor assigner's message."""
    set_condition(workload, condition(
        "QuotaReserved", False, "Pending", f"couldn't assign flavors to pod set worker: insufficient unused quota "
        f"for google.com/tpu in flavor {flavor}, {chips} more needed"))


def reserve(workload: dict, flavor: str, checked: bool) -> None:
    """Quota reserved on `flavor` for the TPU pod sets (cpu for the rest); a flex-start one gets its check."""
    status = workload["status"]
    status["admission"] = {"clusterQueue": QUEUE, "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"],
         "flavors": {r: (flavor if any("google.com/tpu" in (c["resources"].get("limits") or {})
                                       for c in ps["template"]["spec"]["containers"]) else "cpu")
                     for r in ("cpu", "memory")}}
        for ps in workload["spec"]["podSets"]]}
    set_condition(workload, condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {QUEUE}"))
    if checked and not status.get("admissionChecks"):
        status["admissionChecks"] = [{"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": now()}]


def tpu_chips(workload: dict) -> int:
    """The TPU chips the workload's pod sets ask for (0 for a CPU step)."""
    return sum(int(ps["count"]) * int((c["resources"].get("limits") or {}).get("google.com/tpu", 0))
               for ps in workload["spec"]["podSets"] for c in ps["template"]["spec"]["containers"])


def _true(workload: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in workload["status"].get("conditions") or [])


def evicted(workload: dict) -> bool:
    return _true(workload, "Evicted")


def finished(workload: dict) -> bool:
    return _true(workload, "Finished")


def holds_quota(workload: dict) -> bool:
    """Quota reserved and not finished: a finished workload's quota is free again."""
    return _true(workload, "QuotaReserved") and not finished(workload)


def queue_order_timestamp(workload: dict) -> str:
    """pkg/workload/workload.go Ordering.GetQueueOrderTimestamp: a workload evicted by its admission check
    (Evicted True, reason AdmissionCheck) queues from its eviction, any other from its creation."""
    evicted = next((c for c in workload["status"].get("conditions") or [] if c["type"] == "Evicted"), {})
    if evicted.get("status") == "True" and evicted.get("reason") == "AdmissionCheck":
        return evicted["lastTransitionTime"]
    return workload["metadata"]["creationTimestamp"]


def queue_order(workloads: list[dict]) -> list[dict]:
    """Pending workloads in the order Kueue v0.17.1 admits them (pkg/cache/queue/cluster_queue.go
    baseCompareFunc): priority, then the queue-order timestamp (queue_order_timestamp), then the UID."""
    return sorted(workloads, key=lambda wl: (-int(wl["spec"].get("priority") or 0),
                                             queue_order_timestamp(wl), wl["metadata"]["uid"]))


def finish(workload: dict, succeeded: bool, message: str) -> None:
    """The job reconciler on a finished JobSet: Finished True, reason Succeeded or Failed, the JobSet's
    Completed or Failed message (kubernetes-sigs/kueue v0.17.1 pkg/controller/jobframework/reconciler.go
    487-491; jobs/jobset/jobset_controller.go Finished 168-176); its quota is free again."""
    set_condition(workload, condition("Finished", True, "Succeeded" if succeeded else "Failed", message))


def admit(workload: dict) -> None:
    set_condition(workload, condition("Admitted", True, "Admitted", "The workload is admitted"))


def set_check(workload: dict, state: str, message: str) -> None:
    kept = {key: value for key, value in (workload["status"].get("admissionChecks") or [{}])[0].items()
            if key in ("retryCount", "requeueAfterSeconds")}
    workload["status"]["admissionChecks"] = [{"name": CHECK, "state": state, "message": message,
                                              "lastTransitionTime": now(), **kept}]


def retry(workload: dict, message: str) -> None:
    """A Failed request that will be retried (see the module): the check in Retry with its backoff, the
    workload evicted with its quota released, the check reset to Pending, and requeueState.requeueAt."""
    status = workload["status"]
    set_check(workload, "Retry", f"Retrying after failure: {message}")
    check = status["admissionChecks"][0]
    retries = int(check.get("retryCount", 0))
    check["requeueAfterSeconds"] = min(BACKOFF_BASE_SECONDS * 2 ** retries, BACKOFF_MAX_SECONDS)
    requeue_at = moment() + timedelta(seconds=check["requeueAfterSeconds"])
    status["requeueState"] = {"requeueAt": stamp(requeue_at)}
    status.pop("admission", None)
    set_condition(workload, condition("Evicted", True, "AdmissionCheck", "At least one admission check is false"))
    set_condition(workload, condition("QuotaReserved", False, "Pending", "At least one admission check is false"))
    set_condition(workload, condition("Requeued", False, "AdmissionCheck", "At least one admission check is false"))
    check.update(state="Pending", message="Reset to Pending after eviction. Previously: Retry", retryCount=retries + 1)


def backing_off(workload: dict) -> bool:
    """Whether the workload waits out its backoff; once over, it is requeued (requeueAt cleared,
    Requeued True BackoffFinished)."""
    requeue = workload["status"].get("requeueState") or {}
    if not requeue.get("requeueAt"):
        return False
    if moment() < datetime.strptime(requeue["requeueAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc):
        return True
    requeue.pop("requeueAt")
    set_condition(workload, condition("Requeued", True, "BackoffFinished", "The workload backoff was finished"))
    return False


def request_for(workload: dict, attempt: int, max_run_seconds: str = "604800") -> dict:
    name = f"{workload['metadata']['name']}-{CHECK}-{attempt}"
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": "default", "uid": f"pr-{name}", "creationTimestamp": now(),
                     "labels": {"kueue.x-k8s.io/managed": "true"},
                     "ownerReferences": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                          "name": workload["metadata"]["name"], "uid": workload["metadata"]["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                 "parameters": {"maxRunDurationSeconds": max_run_seconds},
                 "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-worker"}, "count": 8}]},
        "status": {"conditions": [condition("Accepted", True, "Accepted", "the test's accepted message"),
                                  condition("Provisioned", False, "NotProvisioned", "the test's waiting message")]},
    }


def conclude_request(request: dict, outcome: str, message: str) -> None:
    """The request's outcome: Provisioned, Failed or CapacityRevoked, with GKE's message."""
    conditions = [c for c in request["status"]["conditions"] if c["type"] != outcome]
    request["status"]["conditions"] = [*conditions, condition(outcome, True, outcome, message)]


def _evicted(workload: dict, reason: str, message: str) -> None:
    """The eviction, then the job reconciler releasing the quota once the job is stopped (kubernetes-sigs/
    kueue v0.17.1, 6fcc132c, pkg/controller/jobframework/reconciler.go 590-592): Requeued False with the
    Evicted reason and message (True only for preemption and node failures), QuotaReserved False with
    reason Pending and the Evicted message (workload.UnsetQuotaReservationWithCondition), and Admitted
    False NoReservation (SyncAdmittedCondition)."""
    workload["spec"]["active"] = False
    workload["status"].pop("admission", None)
    set_condition(workload, condition("Evicted", True, reason, message))
    set_condition(workload, condition("QuotaReserved", False, "Pending", message))
    set_condition(workload, condition("Admitted", False, "NoReservation", "The workload has no reservation"))
    set_condition(workload, condition("Requeued", False, reason, message))


def deactivate(workload: dict, rejected: str) -> None:
    """What Kueue v0.17.1 (6fcc132c) does after a Rejected check: DeactivationTarget (workload_controller.go
    737), spec.active false (389-393), then the eviction with reason DeactivatedDueToAdmissionCheck
    (pkg/workload/workload.go 1646, ReasonWithCause 1832) that drops DeactivationTarget (476-478) and
    releases the quota (_evicted); with no admission left, the checks limited to some flavors, as ours is
    to the flex-start one, are removed (workload.go 1506-1530, workload_controller.go 936
    syncAdmissionCheckConditions; test/integration/singlecluster/controller/core/workload_controller_test.go
    263-300)."""
    cause = f"Admission check(s): {rejected}, were rejected"
    _evicted(workload, "DeactivatedDueToAdmissionCheck", f"The workload is deactivated due to {cause}")
    workload["status"].pop("admissionChecks", None)
    workload["status"].pop("requeueState", None)  # cleared on deactivation (workload_controller.go 473-485)


def stop(workload: dict) -> None:
    """Someone (kueuectl stop, kubectl patch) sets spec.active false: Kueue evicts it with plain reason
    Deactivated and message "The workload is deactivated" (workload_controller.go 462-463), and releases
    its quota as for any eviction (_evicted)."""
    _evicted(workload, "Deactivated", "The workload is deactivated")
