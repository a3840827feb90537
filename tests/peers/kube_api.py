"""A small, honest Kubernetes API server: stores JobSets, Secrets and pods, and moves JobSets through
their life one step per GET, following a per-JobSet plan that a test scripts (succeed, OOM, eviction...).

Shapes follow the real API: JobSet status from the v0.12.0 CRD (conditions, terminalState,
replicatedJobsStatus, restarts), pods with PodScheduled/Ready/DisruptionTarget conditions and container
states, Status objects for errors, APIResourceList for discovery.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from peers import kueue
from peers.http import PeerServer, Reply

GROUP_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
_JOBSETS = re.compile(rf"^{GROUP_PATH}/namespaces/(?P<ns>[^/]+)/jobsets(?:/(?P<name>[^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")
_WORKLOADS = re.compile(r"^/apis/kueue.x-k8s.io/v1beta2/namespaces/(?P<ns>[^/]+)/workloads$")
_REQUESTS = re.compile(r"^/apis/autoscaling.x-k8s.io/v1/namespaces/(?P<ns>[^/]+)/provisioningrequests$")
_SECRETS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets(?:/(?P<name>[^/]+))?$")
_CONFIGMAPS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?$")


# kube-scheduler's NodeAffinity filter reason (kubernetes pkg/scheduler/framework/plugins/nodeaffinity
# ErrReasonPod), as a pod's Unschedulable condition sums it up.
UNSCHEDULABLE = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def _now() -> str:
    """The time of the drill: the clock the fake Kueue and `run` share (kueue.use_clock), so the ages of
    JobSets, pods and conditions agree with `run`'s virtual time."""
    return kueue.now()


def _selected(labels: dict, query: dict) -> bool:
    """Whether labels match the request's labelSelector (equality terms key=value, comma-separated)."""
    wanted = dict(part.split("=", 1) for part in query.get("labelSelector", "").split(",") if part)
    return all(labels.get(key) == value for key, value in wanted.items())


def status(code: int, reason: str, message: str, details: dict | None = None) -> Reply:
    return Reply(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": message, "reason": reason, **({"details": details} if details else {}),
                        "code": code})


def uid_conflict(name: str, wanted: str, actual: str) -> Reply:
    """The API server's answer to a DELETE whose preconditions.uid names another object: the etcd3
    store's checkPreconditions fails with StorageError "invalid object" (code 4) and the registry turns
    it into a 409 Conflict Status (kubernetes/kubernetes staging/src/k8s.io/apiserver:
    pkg/storage/etcd3/store.go checkPreconditions, pkg/storage/errors.go StorageError.Error,
    pkg/storage/errors/storage.go InterpretDeleteError; k8s.io/apimachinery pkg/api/errors NewConflict,
    "Operation cannot be fulfilled on %s %q: %v")."""
    key = f"/registry/jobset.x-k8s.io/jobsets/default/{name}"
    return status(409, "Conflict", f'Operation cannot be fulfilled on jobsets.jobset.x-k8s.io "{name}": StorageError: '
                                   f"invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: "
                                   f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}",
                  {"name": name, "group": "jobset.x-k8s.io", "kind": "jobsets"})


@dataclass
class Plan:
    """What happens to a JobSet after it is created: `ticks` GETs of running, then `outcome`.

    outcome: succeed | oom | evicted | preempted | fail | hang. `on_success` runs when it succeeds (the
    test writes the step's output to the GCS emulator there, as the container would).

    `reclaimed_after` scripts a spot reclaim that the JobSet survives: after that many GETs of running,
    the node of one TPU worker shuts down (the pod fails with the kubelet's node-shutdown status and a
    DisruptionTarget condition); at the next GET the JobSet restarts (status.restarts += 1, the old pods
    terminating, as BlockingRecreate leaves them until they are gone); at the next, the new attempt's pods
    start, labelled with it, and the plan's `ticks` then `outcome` run again. Their log is
    `logs_after_restart`. `log_reads` makes the first attempt's log grow while it runs: each read of it
    returns the next of these texts (the last one stays), instead of `logs`; an entry may instead be a list
    of (seconds after the pod started, line): the kubelet's time of each line. `capacity` is the mode of the ResourceFlavor Kueue admitted the TPU pods to: it
    copies the flavor's nodeLabels into their nodeSelector.
    """

    outcome: str = "succeed"
    ticks: int = 2
    admitted_after: int = 0  # GETs during which Kueue has not admitted it yet (spec.suspend, no pods run)
    logs: str = ""
    on_success: Callable[[], None] | None = None
    reclaimed_after: int | None = None
    logs_after_restart: str = ""
    capacity: str | None = None
    log_reads: list = field(default_factory=list)
    # Kueue and GKE (peers/kueue.py). `provisioning`: the outcome of each ProvisioningRequest Kueue files
    # for a flex-start workload, in turn (Provisioned, Failed, CapacityRevoked, or Pending: GKE keeps it
    # queued); the last one repeats. `stockout`: modes whose zone has no stock: Kueue admits the workload,
    # but its TPU pods stay unschedulable; "cpu": the CPU pool's machine type has none, so every pod of a
    # CPU step stays unschedulable. A TPU pod template that selects a mode (tpu-rl/capacity) is
    # admitted to that mode's flavor, as Kueue's flavor assigner does; otherwise to `capacity`.
    provisioning: list = field(default_factory=list)
    stockout: tuple = ()
    # The zone Kueue admits an unpinned JobSet to: the first of ZONE, whose flavors have no zone letter in
    # their names (recipes/placement.py). With it, the TPU flavors carry the zone label GKE sets on nodes,
    # which Kueue copies into the pods' nodeSelector; a pod template that selects a zone
    # (topology.kubernetes.io/zone) is admitted to that zone's flavor. A `stockout` entry "<mode>@<zone>"
    # is a mode out of stock in one zone only; for flex-start, GKE then keeps the request queued.
    zone: str | None = None
    # GETs after admission during which every pod has its node and its containers still wait with reason
    # ContainerCreating, the kubelet's reason while it pulls the images (kubelet_pods.go).
    pulling_ticks: int = 0
    # With `reclaimed_after`: whether the nodes come back for the next attempt (a spot pool scales up
    # again; a queued-provisioning flex-start pool gets nodes only through a new request, so they do
    # not), and whether GKE marks the request CapacityRevoked, which makes Kueue deactivate the workload.
    nodes_return: bool = True
    revoked: bool = False
    resubmitted: "Plan | None" = None  # the plan of the next JobSet created under the same name
    # `finishing`: GETs after `ticks` in which the head's main container has exited 0 but its native
    # sidecars still stop, so its pod is Running and not Ready (ContainersNotReady) before the JobSet
    # completes. `container_restart_at`: the tick at which one TPU worker's container has restarted
    # (exit 137, restartCount 1) and is not ready again yet; ready at the next tick.
    finishing: int = 0
    container_restart_at: int | None = None


@dataclass
class KubeApi(PeerServer):
    jobsets: dict = field(default_factory=dict)
    pods: dict = field(default_factory=dict)
    secrets: dict = field(default_factory=dict)
    configmaps: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    crd_installed: bool = True
    created: list = field(default_factory=list)  # names, in creation order (duplicates show up here)
    deleted: list = field(default_factory=list)
    workloads: dict = field(default_factory=dict)  # by JobSet name: the Workload Kueue made for it
    provreqs: dict = field(default_factory=dict)  # ProvisioningRequests by name
    # A JobSet of the same name but a new UID takes the place of the one a DELETE names, just before the
    # DELETE arrives (a concurrent `run --replace`), once.
    replaced_before_delete: bool = False

    version: str = "v1.33.5-gke.1080000"  # the control plane's gitVersion, as GKE reports it on /version

    def __post_init__(self) -> None:
        PeerServer.__init__(self)
        kueue.use_clock(None)  # each test starts on the real clock (use_clock for a drill's own)
        self._ticks: dict[str, int] = {}
        self._terminating: set[str] = set()  # JobSets whose earlier attempt's pods are still going away
        self._filed: dict[str, int] = {}  # requests Kueue filed for the JobSet's Workload, by JobSet name

    # -- what tests use ---------------------------------------------------------------------------
    def plan(self, name: str, **kwargs) -> Plan:
        self.plans[name] = Plan(**kwargs)
        return self.plans[name]

    def put_jobset(self, manifest: dict, phase: str = "running") -> dict:
        """A JobSet left over from an earlier run, in a given phase (running, succeeded, failed)."""
        obj = self._store(json.loads(json.dumps(manifest)))
        if phase == "succeeded":
            self._finish(obj["metadata"]["name"], "succeed")
        elif phase == "failed":
            self._finish(obj["metadata"]["name"], "fail")
        else:
            self._ticks[obj["metadata"]["name"]] = 2
            self._advance(obj["metadata"]["name"], tick_only=True)
        return obj

    # -- the state machine ------------------------------------------------------------------------
    def _store(self, obj: dict) -> dict:
        meta = obj["metadata"]
        name = meta["name"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion="1", namespace="default")
        obj["status"] = {"replicatedJobsStatus": [], "restarts": 0}
        self.jobsets[name] = obj
        self._ticks[name] = 0
        self._filed[name] = 0
        self.workloads[name] = kueue.workload_for(obj)
        self._create_pods(name)
        return obj

    def _create_pods(self, name: str) -> None:
        """The pods of the JobSet's current attempt, labelled with it as JobSet does."""
        obj = self.jobsets[name]
        capacity = self.capacity_of(name)
        for rj in obj["spec"]["replicatedJobs"]:
            spec = rj["template"]["spec"]
            pod_spec = spec["template"]["spec"]
            selector = dict(pod_spec.get("nodeSelector") or {})
            if capacity and any("google.com/tpu" in (c.get("resources") or {}).get("limits", {})
                                for c in pod_spec["containers"]):
                selector["tpu-rl/capacity"] = capacity  # Kueue: the admitted flavor's nodeLabels
                if self.zone_of(name):
                    selector["topology.kubernetes.io/zone"] = self.zone_of(name)
            for replica in range(int(rj.get("replicas", 1))):
                for index in range(int(spec.get("parallelism", 1))):
                    pod = f"{name}-{rj['name']}-{replica}-{index}-{uuid.uuid4().hex[:5]}"
                    self.pods[pod] = {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod, "namespace": "default", "creationTimestamp": _now(),
                                     "labels": {"jobset.sigs.k8s.io/jobset-name": name,
                                                "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                                                "jobset.sigs.k8s.io/restart-attempt": str(obj["status"]["restarts"])}},
                        "spec": {"containers": [{"name": c["name"]} for c in pod_spec["containers"]],
                                 **({"nodeSelector": selector} if selector else {})},
                        "status": {"phase": "Pending"},
                    }

    def _pods_of(self, name: str, rj: str | None = None) -> list[dict]:
        return [pod for pod in self.pods.values()
                if pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == name
                and (rj is None or pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == rj)]

    def _main_rj(self, name: str) -> str:
        spec = self.jobsets[name]["spec"]
        targets = (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []
        return targets[0] if targets else spec["replicatedJobs"][0]["name"]

    def _advance(self, name: str, tick_only: bool = False) -> None:
        obj = self.jobsets[name]
        if obj["status"].get("terminalState"):
            return
        plan = self.plans.get(name, Plan())
        if not self._admitted(name, plan):
            obj["spec"]["suspend"] = True
            obj["status"]["conditions"] = [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
                                            "message": "jobset is suspended", "lastTransitionTime": _now()}]
            return
        obj["spec"].pop("suspend", None)
        self._startup_conditions(name)
        if name in self._terminating:  # the earlier attempt's pods are gone: the next attempt starts
            self._terminating.discard(name)
            for pod in self._pods_of(name):
                del self.pods[pod["metadata"]["name"]]
            self._create_pods(name)
            self._ticks[name] = 0
        tick = self._ticks[name] = self._ticks[name] + 1
        if plan.reclaimed_after is not None and not obj["status"]["restarts"] and not tick_only:
            if tick == plan.reclaimed_after + 1:
                self._reclaim_node(name)
                if plan.revoked:
                    self._revoke(name)
                return
            if tick == plan.reclaimed_after + 2:
                obj["status"]["restarts"] += 1
                for pod in self._pods_of(name):
                    pod["metadata"]["deletionTimestamp"] = _now()
                self._terminating.add(name)
                return
        if self._unschedulable(name, plan):
            for pod in self._pods_of(name):
                if "cpu" in plan.stockout or \
                        pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != self._main_rj(name):
                    pod["status"] = {"phase": "Pending", "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": UNSCHEDULABLE}]}
            return
        if tick <= plan.pulling_ticks and not obj["status"]["restarts"]:
            for pod in self._pods_of(name):
                pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                                 "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0,
                                                        "state": {"waiting": {"reason": "ContainerCreating"}}}
                                                       for c in pod["spec"]["containers"]]}
            return
        for pod in self._pods_of(name):
            conditions = [{"type": "PodScheduled", "status": "True"}]
            if tick >= 2:
                conditions.append({"type": "Ready", "status": "True"})
            pod["status"] = {"phase": "Running", "conditions": conditions, "containerStatuses": [
                {"name": c["name"], "ready": tick >= 2, "restartCount": 0, "state": {"running": {"startedAt": _now()}}}
                for c in pod["spec"]["containers"]]}
        if tick == plan.container_restart_at and not obj["status"]["restarts"]:
            worker = [p for p in self._pods_of(name) if p["metadata"]["labels"][
                "jobset.sigs.k8s.io/replicatedjob-name"] != self._main_rj(name)][0]
            worker["status"]["conditions"][-1] = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            worker["status"]["containerStatuses"][0].update(ready=False, restartCount=1, lastState={
                "terminated": {"exitCode": 137, "reason": "Error"}})
        if plan.ticks < tick <= plan.ticks + plan.finishing and not tick_only:
            for head in self._pods_of(name, self._main_rj(name)):
                head["status"]["conditions"][-1] = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                head["status"]["containerStatuses"][0].update(ready=False, state={
                    "terminated": {"exitCode": 0, "reason": "Completed"}})
        obj["status"]["replicatedJobsStatus"] = [
            {"name": rj["name"], "ready": len(self._pods_of(name, rj["name"])) if tick >= 2 else 0,
             "active": 1, "succeeded": 0, "failed": 0, "suspended": 0} for rj in obj["spec"]["replicatedJobs"]]
        awaiting_reclaim = plan.reclaimed_after is not None and not obj["status"]["restarts"]
        if not tick_only and tick > plan.ticks + plan.finishing and plan.outcome != "hang" and not awaiting_reclaim:
            self._finish(name, plan.outcome)

    def _startup_conditions(self, name: str) -> None:
        """The conditions of an admitted JobSet as JobSet v0.12.0 (f22e565a) sets them. Under startupPolicy
        InOrder the Suspended condition stays True (SuspendedJobs, "jobset is suspended") beside
        StartupPolicyInProgress until every replicated job is ready; then Suspended turns False (ResumeJobs,
        "jobset is resumed") and StartupPolicyCompleted replaces InProgress (pkg/controllers/
        jobset_controller.go resumeJobsIfNecessary 577-633, exclusiveConditions 1363; pkg/constants
        constants.go 101-106, InOrderStartupPolicy* reasons and messages; startup_policy.go)."""
        obj = self.jobsets[name]
        order = ((obj["spec"].get("startupPolicy") or {}).get("startupPolicyOrder"))
        if order != "InOrder":
            obj["status"]["conditions"] = []
            return
        statuses = {s["name"]: s for s in obj["status"].get("replicatedJobsStatus") or []}
        ready = all(int((statuses.get(rj["name"]) or {}).get("ready", 0)) >= int(rj.get("replicas", 1))
                    for rj in obj["spec"]["replicatedJobs"])
        # Only suspending sets Suspended True again: once resumed, a restart's attempt leaves it False.
        resumed = any(c["type"] == "Suspended" and c["status"] == "False" for c in obj["status"].get("conditions") or [])
        now = _now()
        suspended = ({"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed"}
                     if ready or resumed else
                     {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended"})
        startup = ({"type": "StartupPolicyCompleted", "status": "True", "reason": "InOrderStartupPolicyCompleted",
                    "message": "in order startup policy has completed"} if ready else
                   {"type": "StartupPolicyInProgress", "status": "True", "reason": "InOrderStartupPolicyInProgress",
                    "message": "in order startup policy is in progress"})
        obj["status"]["conditions"] = [{**suspended, "lastTransitionTime": now}, {**startup, "lastTransitionTime": now}]

    # -- Kueue and GKE ------------------------------------------------------------------------------
    def _selected(self, name: str, label: str, default: str | None) -> str | None:
        """What the TPU pod template selects for `label` (a pinned submission), else Kueue's choice."""
        for rj in self.jobsets[name]["spec"]["replicatedJobs"]:
            selector = rj["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
            if label in selector:
                return selector[label]
        return default

    def capacity_of(self, name: str) -> str | None:
        """The mode Kueue admits the TPU pods to: the one their template selects, else the plan's."""
        return self._selected(name, "tpu-rl/capacity", self.plans.get(name, Plan()).capacity)

    def zone_of(self, name: str) -> str | None:
        """The zone Kueue admits the TPU pods to: the one their template selects, else the plan's."""
        return self._selected(name, "topology.kubernetes.io/zone", self.plans.get(name, Plan()).zone)

    def flavor_of(self, name: str) -> str:
        """The admitted ResourceFlavor's name (recipes.conventions.tpu_flavor_name)."""
        capacity, zone = self.capacity_of(name), self.zone_of(name)
        if capacity in (None, "reservation"):
            return "tpu"
        first = self.plans.get(name, Plan()).zone
        return f"tpu-{capacity}" if zone in (None, first) else f"tpu-{capacity}-{zone.rsplit('-', 1)[1]}"

    def out_of_stock(self, name: str, plan: Plan) -> bool:
        capacity = self.capacity_of(name)
        return capacity in plan.stockout or f"{capacity}@{self.zone_of(name)}" in plan.stockout

    def requests_of(self, name: str) -> list[dict]:
        uid = self.workloads[name]["metadata"]["uid"]
        return [r for r in self.provreqs.values() if r["metadata"]["ownerReferences"][0]["uid"] == uid]

    def _admitted(self, name: str, plan: Plan) -> bool:
        """One step of Kueue for the JobSet's Workload; whether it is admitted (the JobSet may run)."""
        wl = self.workloads[name]
        if wl["spec"]["active"] is False:
            return False
        if any(c["state"] == "Rejected" for c in wl["status"].get("admissionChecks") or []):
            kueue.deactivate(wl, kueue.CHECK)  # a Rejected check deactivates even an admitted workload
            return False
        if any(c["type"] == "Admitted" and c["status"] == "True" for c in wl["status"]["conditions"]):
            return True
        capacity = self.capacity_of(name)
        flavor = self.flavor_of(name)
        if plan.admitted_after > 0:
            plan.admitted_after -= 1
            kueue.pending(wl, flavor, 32)
            return False
        if capacity != "flex-start":
            kueue.reserve(wl, flavor, checked=False)
            kueue.admit(wl)
            return True
        if kueue.backing_off(wl):
            return False  # evicted after a failed request, until status.requeueState.requeueAt
        kueue.reserve(wl, flavor, checked=True)
        requests = sorted(self.requests_of(name), key=lambda r: int(r["metadata"]["name"].rsplit("-", 1)[1]))
        failed = bool(requests) and any(c["type"] == "Failed" and c["status"] == "True"
                                        for c in requests[-1]["status"]["conditions"])
        if not requests or failed:  # requeued after its backoff: the next attempt (controller.go 263-268)
            for superseded in requests:  # Kueue deletes all but the newest (provisioning/controller.go 208-228)
                del self.provreqs[superseded["metadata"]["name"]]
            request = kueue.request_for(wl, self._filed.get(name, 0) + 1)
            self._filed[name] = self._filed.get(name, 0) + 1
            self.provreqs[request["metadata"]["name"]] = request
            kueue.set_check(wl, "Pending", "the test's waiting message")
            kueue.set_condition(wl, kueue.condition("Evicted", False, "QuotaReserved", "Previously: evicted"))
            return False
        outcomes = plan.provisioning or ["Provisioned"]
        outcome = outcomes[min(self._filed[name], len(outcomes)) - 1]
        if self.out_of_stock(name, plan):
            outcome = "Pending"  # GKE keeps the request queued while the zone has no flex-start stock
        if outcome == "Pending":
            return False
        message = f"the test's {outcome} message"
        kueue.conclude_request(requests[-1], outcome, message)
        if outcome == "Provisioned":
            kueue.set_check(wl, "Ready", message)
            kueue.admit(wl)
            return True
        if outcome == "Failed" and self._filed[name] <= kueue.BACKOFF_LIMIT_COUNT:
            kueue.retry(wl, message)
            return False
        kueue.set_check(wl, "Rejected", message)
        return False

    def _revoke(self, name: str) -> None:
        """GKE marks the slice's request CapacityRevoked: Kueue rejects the check (deactivating next)."""
        wl = self.workloads[name]
        request = sorted(self.requests_of(name), key=lambda r: r["metadata"]["name"])[-1]
        kueue.conclude_request(request, "CapacityRevoked", "the test's CapacityRevoked message")
        kueue.set_check(wl, "Rejected", "the test's CapacityRevoked message")  # deactivated at the next step

    def _unschedulable(self, name: str, plan: Plan) -> bool:
        """The TPU pods find no node: the mode is out of stock, or the slice is gone for good."""
        lost = plan.reclaimed_after is not None and not plan.nodes_return and self.jobsets[name]["status"]["restarts"]
        return self.out_of_stock(name, plan) or bool(lost) or "cpu" in plan.stockout

    def _reclaim_node(self, name: str) -> None:
        """A TPU worker's node shuts down, as when Compute Engine reclaims a spot VM: the kubelet's graceful
        node shutdown fails the pod with reason Terminated and its message, and adds DisruptionTarget with
        reason TerminationByKubelet (kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go,
        nodeShutdownReason and nodeShutdownMessage; k8s.io/api core/v1 PodReasonTerminationByKubelet)."""
        main = self._main_rj(name)
        victim = [pod for pod in self._pods_of(name)
                  if pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != main][-1]
        message = "Pod was terminated in response to imminent node shutdown."
        # The pod ran on that node: it stays scheduled there (PodScheduled True, as the API keeps it).
        victim["status"] = {"phase": "Failed", "reason": "Terminated", "message": message, "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message},
            {"type": "Ready", "status": "False", "reason": "PodFailed"}],
            "containerStatuses": [{"name": victim["spec"]["containers"][0]["name"],
                                   "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}

    def _finish(self, name: str, outcome: str) -> None:
        obj = self.jobsets[name]
        plan = self.plans.get(name, Plan())
        pods = self._pods_of(name)
        main = self._pods_of(name, self._main_rj(name))
        if outcome == "succeed":
            for pod in pods:
                pod["status"] = {"phase": "Succeeded", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                                      {"type": "Ready", "status": "False"}],
                                 "containerStatuses": [{"name": c["name"], "state": {"terminated": {
                                     "exitCode": 0, "reason": "Completed"}}} for c in pod["spec"]["containers"]]}
            obj["status"].update(terminalState="Completed", conditions=[
                {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                 "message": "jobset completed successfully", "lastTransitionTime": _now()}])
            if plan.on_success:
                plan.on_success()
            return
        victim = main[0] if outcome == "oom" else pods[-1]
        if outcome == "oom":
            victim["status"] = {"phase": "Failed", "containerStatuses": [
                {"name": victim["spec"]["containers"][0]["name"],
                 "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
        elif outcome == "evicted":
            victim["status"] = {"phase": "Failed", "reason": "Evicted",
                                "message": "The node was low on resource: memory.",
                                "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                "reason": "TerminationByKubelet",
                                                "message": "The node was low on resource: memory."}]}
        elif outcome == "preempted":
            victim["status"] = {"phase": "Failed", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "default-scheduler: preempting to accommodate a higher priority pod"}],
                "containerStatuses": [{"name": victim["spec"]["containers"][0]["name"],
                                       "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}
        else:
            victim["status"] = {"phase": "Failed", "containerStatuses": [
                {"name": victim["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
        obj["status"].update(terminalState="Failed", conditions=[
            {"type": "Failed", "status": "True", "reason": "FailedJobs",
             "message": "jobset failed due to one or more job failures", "lastTransitionTime": _now()}])

    # -- HTTP -------------------------------------------------------------------------------------
    def authorized(self, headers) -> bool:
        """Like GKE: no bearer token, no answer (401)."""
        return (headers.get("Authorization") or "").startswith("Bearer ")

    def error_body(self, status_code: int) -> object:
        return status(status_code, {401: "Unauthorized", 409: "AlreadyExists", 429: "TooManyRequests"}.get(status_code, "InternalError"),
                      f"injected {status_code}").body

    def route(self, method: str, path: str, query: dict, body: bytes) -> Reply:
        if path in ("/version", "/version/"):  # the Python client asks for /version/
            major, minor = self.version.lstrip("v").split(".")[:2]
            return Reply(200, {"major": major, "minor": minor, "gitVersion": self.version,
                               "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-10-01T00:00:00Z",
                               "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64"})
        if path == GROUP_PATH:
            if not self.crd_installed:
                return status(404, "NotFound", "the server could not find the requested resource")
            return Reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "jobset.x-k8s.io/v1alpha2",
                               "resources": [{"name": "jobsets", "singularName": "jobset", "namespaced": True,
                                              "kind": "JobSet", "verbs": ["create", "delete", "get", "list", "watch"]}]})
        if match := _JOBSETS.match(path):
            return self._jobsets(method, match["name"], body, query)
        if match := _PODS.match(path):
            return self._pods(method, match["name"], bool(match["log"]), query)
        if _WORKLOADS.match(path) and method == "GET":
            return Reply(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {},
                               "items": [wl for wl in self.workloads.values()
                                         if _selected(wl["metadata"].get("labels") or {}, query)]})
        if _REQUESTS.match(path) and method == "GET":
            return Reply(200, {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequestList",
                               "metadata": {}, "items": list(self.provreqs.values())})
        if match := _SECRETS.match(path):
            return self._secrets(method, match["name"], body)
        if match := _CONFIGMAPS.match(path):
            return self._configmaps(method, match["name"], body)
        return status(404, "NotFound", f"no route {method} {path}")

    def _jobsets(self, method: str, name: str | None, body: bytes, query: dict) -> Reply:
        if not self.crd_installed:
            return status(404, "NotFound", "the server could not find the requested resource")
        if method == "GET" and name is None:  # a list, by label selector as kubectl's -l (key=value,...)
            return Reply(200, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSetList", "metadata": {},
                               "items": [obj for obj in self.jobsets.values()
                                         if _selected(obj["metadata"].get("labels") or {}, query)]})
        if method == "POST":
            obj = json.loads(body)
            name = obj["metadata"]["name"]
            if name in self.jobsets:
                return status(409, "AlreadyExists", f'jobsets.jobset.x-k8s.io "{name}" already exists')
            if name in self.deleted and self.plans.get(name) and self.plans[name].resubmitted:
                self.plans[name] = self.plans[name].resubmitted
            self.created.append(name)
            return Reply(201, self._store(obj))
        if name not in self.jobsets:
            return status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{name}" not found')
        if method == "GET":
            self._advance(name)
            return Reply(200, self.jobsets[name])
        if method == "DELETE":
            # DeleteOptions preconditions.uid: the API server answers 409 Conflict for another object
            # (k8s.io/apiserver pkg/registry/generic/registry/store.go, Preconditions.Check).
            if self.replaced_before_delete:  # another client replaced it between our GET and our DELETE
                self.replaced_before_delete = False
                self.jobsets[name]["metadata"]["uid"] = str(uuid.uuid4())
            wanted = ((json.loads(body) if body else {}).get("preconditions") or {}).get("uid")
            if wanted and wanted != self.jobsets[name]["metadata"]["uid"]:
                return uid_conflict(name, wanted, self.jobsets[name]["metadata"]["uid"])
            self.deleted.append(name)
            del self.jobsets[name]
            for request in self.requests_of(name):  # owned by the Workload, which the JobSet owns
                del self.provreqs[request["metadata"]["name"]]
            del self.workloads[name]
            for pod in self._pods_of(name):
                del self.pods[pod["metadata"]["name"]]
            return Reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return status(405, "MethodNotAllowed", method)

    def _pods(self, method: str, name: str | None, log: bool, query: dict) -> Reply:
        if name is None:
            items = [pod for pod in self.pods.values() if _selected(pod["metadata"]["labels"], query)]
            return Reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        pod = self.pods.get(name)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        if not log:
            return Reply(200, pod)
        # Every line was written when the pod started, a microsecond apart; the stream then ends, as a
        # dropped follow would. sinceSeconds and timestamps behave as the kubelet's.
        jobset = pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
        started = datetime.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        plan = self.plans.get(jobset, Plan())
        attempt = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt", "0")
        text = plan.logs if attempt == "0" else plan.logs_after_restart
        if attempt == "0" and plan.log_reads:
            text = plan.log_reads.pop(0) if len(plan.log_reads) > 1 else plan.log_reads[0]
        if isinstance(text, list):  # (seconds after the start, line): each line written at its own time
            lines = [(started + timedelta(seconds=at), f"{line}\n") for at, line in text]
        else:
            lines = [(started + timedelta(microseconds=i), line) for i, line in enumerate(text.splitlines(keepends=True))]
        if query.get("sinceSeconds"):
            cutoff = kueue.moment() - timedelta(seconds=int(query["sinceSeconds"]))
            lines = [(stamp, line) for stamp, line in lines if stamp >= cutoff]
        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]):]
        if query.get("timestamps") == "true":
            return Reply(200, "".join(f"{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}" for stamp, line in lines))
        return Reply(200, "".join(line for _, line in lines))

    def _configmaps(self, method: str, name: str | None, body: bytes) -> Reply:
        return self._objects(self.configmaps, "configmaps", method, name, body)

    def _secrets(self, method: str, name: str | None, body: bytes) -> Reply:
        return self._objects(self.secrets, "secrets", method, name, body)

    @staticmethod
    def _objects(store: dict, plural: str, method: str, name: str | None, body: bytes) -> Reply:
        """Create (409 when it exists), replace, read and delete core objects kept whole (Secrets, ConfigMaps)."""
        if method == "POST":
            obj = json.loads(body)
            if obj["metadata"]["name"] in store:
                return status(409, "AlreadyExists", f'{plural} "{obj["metadata"]["name"]}" already exists')
            store[obj["metadata"]["name"]] = obj
            return Reply(201, obj)
        if method == "PUT":
            store[name] = json.loads(body)
            return Reply(200, store[name])
        if name not in store:
            return status(404, "NotFound", f'{plural} "{name}" not found')
        if method == "DELETE":
            del store[name]
            return Reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return Reply(200, store[name])


def write_kubeconfig(path, server_url: str, context: str, cluster: str | None = None) -> None:
    """A kubeconfig as gcloud writes it: context and cluster entry share the gke_<project>_<loc>_<name>
    name, unless `cluster` names the entry (a renamed context)."""
    cluster = cluster or context
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": cluster, "cluster": {"server": server_url}}],
        "users": [{"name": "tester", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": "tester"}}],
    }))
