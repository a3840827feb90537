"""What JobSet and pod objects say, read as plain dicts in the API's own JSON shape: a JobSet's phase and
restarts, a pod's problems and disruption, the current attempt's pods and the capacity they run on. Pure:
nothing here talks to a cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from recipes.conventions import CAPACITY_NODE_LABEL

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
    for phase, kind in (("failed", "Failed"), ("succeeded", "Completed")):
        if kind in conditions or terminal == kind:
            condition = conditions.get(kind, {})
            return JobSetState(phase, condition.get("reason", kind), condition.get("message", ""), created, restarts,
                               condition.get("lastTransitionTime"), bound)
    if "Suspended" in conditions or obj.get("spec", {}).get("suspend"):
        condition = conditions.get("Suspended", {})
        return JobSetState("suspended", condition.get("reason", "Suspended"),
                           condition.get("message", "waiting for Kueue to admit it"), created, restarts,
                           max_restarts=bound)
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
