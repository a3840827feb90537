"""What JobSet and pod objects say, read as plain dicts in the API's own JSON shape: a JobSet's phase and
restarts, a pod's problems and disruption, the current attempt's pods and the capacity they run on. Pure:
nothing here talks to a cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpu_rl.recipes.conventions import CAPACITY_NODE_LABEL, TPU_ACCELERATOR_LABEL, ZONE_NODE_LABEL

# JobSet v0.12.0 labels every Job and pod with the restart attempt it belongs to, status.restarts at the
# time it was created (pkg/constants RestartsKey; pkg/controllers/jobset_controller.go labelAndAnnotateObject).
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

JobSetPhase = Literal["absent", "running", "succeeded", "failed", "suspended"]


@dataclass(frozen=True)
class JobSetState:
    phase: JobSetPhase
    reason: str = ""
    message: str = ""
    created: str | None = None
    restarts: int = 0
    finished: str | None = None  # when it succeeded or failed: its Completed/Failed condition's lastTransitionTime
    max_restarts: int = 0  # spec.failurePolicy.maxRestarts: how many restarts it may take before it fails


def jobset_state(obj: dict | None) -> JobSetState:
    if obj is None:
        return JobSetState("absent")
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    created = obj.get("metadata", {}).get("creationTimestamp")
    restarts = int(status.get("restarts") or 0)
    bound = int(((obj.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0)
    terminal = status.get("terminalState")
    ended: tuple[tuple[JobSetPhase, str], ...] = (("failed", "Failed"), ("succeeded", "Completed"))
    for phase, kind in ended:
        if kind in conditions or terminal == kind:
            condition = conditions.get(kind, {})
            return JobSetState(phase, condition.get("reason", kind), condition.get("message", ""), created, restarts,
                               condition.get("lastTransitionTime"), bound)
    # Suspended is what spec.suspend says (Kueue clears it on admission), not the Suspended condition, which
    # JobSet v0.12.0 keeps True under InOrder until every replicated job is ready (pkg/controllers/
    # jobset_controller.go resumeJobsIfNecessary; docs/provenance.md#jobset-suspended-condition-under-inorder).
    if obj.get("spec", {}).get("suspend"):
        condition = conditions.get("Suspended", {})
        return JobSetState("suspended", condition.get("reason", "Suspended"),
                           condition.get("message", "waiting for Kueue to admit it"), created, restarts,
                           max_restarts=bound)
    if "StartupPolicyInProgress" in conditions:
        condition = conditions["StartupPolicyInProgress"]
        return JobSetState("running", condition.get("reason", ""), condition.get("message", ""), created,
                           restarts, max_restarts=bound)
    return JobSetState("running", created=created, restarts=restarts, max_restarts=bound)


def _true_condition(pod: dict, kind: str) -> dict | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def pod_problems(pod: dict) -> list[str]:
    """Why a pod failed or cannot run, in one short phrase each (eviction, preemption, OOM, exit codes)."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    problems = []
    if status.get("reason") in ("Evicted", "Preempting", "OutOfcpu", "OutOfmemory", "NodeLost", "Shutdown"):
        problems.append(f"pod {name} {status['reason']}: {status.get('message', '')}".rstrip(": "))
    disruption = _true_condition(pod, "DisruptionTarget")
    if disruption:
        problems.append(f"pod {name} disrupted ({disruption.get('reason', '')}): {disruption.get('message', '')}".rstrip(": "))
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            problems.append(f"pod {name} unschedulable: {condition.get('message', '')}".rstrip(": "))
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            terminated = state.get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                problems.append(f"pod {name} container {container['name']} {terminated.get('reason', 'Error')} "
                                f"(exit code {terminated.get('exitCode')})")
                break
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff",
                                     "CreateContainerConfigError", "InvalidImageName"):
            problems.append(f"pod {name} container {container['name']} {waiting['reason']}: "
                            f"{waiting.get('message', '')}".rstrip(": "))
    return problems


def disruption_of(pod: dict) -> str | None:
    """How the pod was taken away, when Kubernetes says it was (its DisruptionTarget condition: the kubelet
    shutting its node down for a spot reclaim or maintenance, an eviction, a preemption), else None."""
    condition = _true_condition(pod, "DisruptionTarget")
    if condition is None:
        return None
    return (f"pod {pod['metadata']['name']} DisruptionTarget {condition.get('reason', '')}: "
            f"{condition.get('message', '')}").rstrip(": ")


def current_attempt(pods: list[dict], restarts: int) -> list[dict]:
    """The pods of the JobSet's current attempt: after a restart, those of an earlier attempt may still be
    terminating (a pod without the label counts as current)."""
    return [pod for pod in pods
            if (pod["metadata"].get("labels") or {}).get(RESTART_ATTEMPT_LABEL, str(restarts)) == str(restarts)]


def capacity_of(pods: list[dict]) -> str | None:
    """The capacity mode the pods run on: Kueue copies the admitted ResourceFlavor's nodeLabels, which
    include CAPACITY_NODE_LABEL, into the nodeSelector of the pods it admits to it (Kueue v0.17.1
    site/content/en/docs/concepts/resource_flavor.md). Several modes are joined with ','; None when no
    pod carries the label (a CPU-only step, or no pod left)."""
    modes = sorted({selector[CAPACITY_NODE_LABEL] for pod in pods
                    if CAPACITY_NODE_LABEL in (selector := (pod.get("spec") or {}).get("nodeSelector") or {})})
    return ",".join(modes) or None


def zone_of(pods: list[dict]) -> str | None:
    """The zone the TPU pods were admitted to: the zone label of their flavor (tpu_rl.infra.kueue_queues), which
    Kueue copies into their nodeSelector as it does CAPACITY_NODE_LABEL; None when no pod carries it."""
    zones = sorted({selector[ZONE_NODE_LABEL] for pod in pods
                    if CAPACITY_NODE_LABEL in (selector := (pod.get("spec") or {}).get("nodeSelector") or {})
                    and ZONE_NODE_LABEL in selector})
    return ",".join(zones) or None


def placement_of(pods: list[dict]) -> str | None:
    """Where the pods run, for `status`: 'spot in us-east5-b', or the mode alone when no zone is known."""
    mode, zone = capacity_of(pods), zone_of(pods)
    return f"{mode} in {zone}" if mode and zone else mode


def tpu_pods(pods: list[dict]) -> list[dict]:
    """The pods that select TPU nodes (a train step's workers; the Pathways head selects the CPU pool)."""
    return [pod for pod in pods if TPU_ACCELERATOR_LABEL in ((pod.get("spec") or {}).get("nodeSelector") or {})]


def has_had_node(pod: dict) -> bool:
    """Whether the pod has had its capacity: it is scheduled on a node (spec.nodeName, or PodScheduled
    True), or it has run (a container with a start, or restartCount > 0; core/v1 ContainerStatus). A pod
    of it that is not Ready is a container restarting, its images pulling or the step finishing, never a
    shortfall of capacity."""
    if (pod.get("spec") or {}).get("nodeName") or _true_condition(pod, "PodScheduled"):
        return True
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if status.get("restartCount") or (state.get("running") or {}).get("startedAt") \
                or (state.get("terminated") or {}).get("startedAt") or (status.get("lastState") or {}).get("terminated"):
            return True
    return False


def container_statuses(pod: dict) -> list[dict]:
    """Every container's status: the init containers' (the Pathways head's sidecars), then the others'."""
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def container_image(pod: dict, name: str) -> str:
    """The image of a container of the pod: its status's (the kubelet writes the spec's image there while
    it waits), else the spec's."""
    for container in container_statuses(pod):
        if container.get("name") == name and container.get("image"):
            return container["image"]
    spec = pod.get("spec") or {}
    return next((c.get("image", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                 if c.get("name") == name), "")


def restart_total(pods: list[dict]) -> int:
    """The restarts of every container of the pods (core/v1 ContainerStatus.restartCount)."""
    return sum(int(c.get("restartCount") or 0) for pod in pods for c in container_statuses(pod))


def is_ready(pod: dict) -> bool:
    return _true_condition(pod, "Ready") is not None


def is_finishing(pod: dict) -> bool:
    """Whether the pod is done or going: Succeeded or Failed, being deleted, or a (not init) container that
    exited 0 (the head's main container, while its native sidecars stop): not Ready, nor starting."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return True
    return any(((c.get("state") or {}).get("terminated") or {}).get("exitCode", 1) == 0
               for c in (pod.get("status") or {}).get("containerStatuses") or [])


@dataclass(frozen=True)
class PodCounts:
    total: int
    scheduled: int
    ready: int
    succeeded: int


def pod_counts(pods: list[dict]) -> PodCounts:
    return PodCounts(
        total=len(pods),
        scheduled=sum(1 for pod in pods if _true_condition(pod, "PodScheduled")),
        ready=sum(1 for pod in pods if _true_condition(pod, "Ready")),
        succeeded=sum(1 for pod in pods if pod.get("status", {}).get("phase") == "Succeeded"),
    )
