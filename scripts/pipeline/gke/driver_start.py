"""Why the run's driver pod has not started, in the API's own words, and the bound on waiting for it.

A driver pod that never starts stays Pending: a FUSE mount that fails (Workload Identity not yet
effective, a wrong bucket), an image that cannot be pulled, or no room on the system pool. A Pending pod
counts against no backoffLimit and the Job has no deadline, so `run` bounds the wait for the driver's
first line by DRIVER_START_SECONDS and `status` shows why. What it reads: the pod's PodScheduled
condition, its containers' waiting reasons, and its Warning events (core/v1 Event: FailedMount,
FailedScheduling, ...), which the user's credentials may list. Sources:
docs/provenance.md#a-driver-pod-that-does-not-start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tpu_rl.jobs.driver_runtime import DRIVER_CONTAINER
from tpu_rl.recipes.conventions import SYSTEM_POOL_NAME
from tpu_rl.recipes.outcome import StepFailed
from tpu_rl.scripts.cloud.jobsets import container_statuses
from tpu_rl.scripts.pipeline.gke.starting import (FAILING_PULL, IMAGE_PULL_FAILING_SECONDS, MISSING_IMAGE,
                                                  UNPARSABLE_IMAGE)
from tpu_rl.scripts.pipeline.gke.steps import parse_time
from tpu_rl.scripts.pipeline.session import Session, hms

# The cluster autoscaler gives up on a node that has not registered within max-node-provision-time
# (15 min by default); then the image pull has IMAGE_PULL_FAILING_SECONDS, as a step's has.
NODE_PROVISION_SECONDS = 15 * 60
DRIVER_START_SECONDS = NODE_PROVISION_SECONDS + IMAGE_PULL_FAILING_SECONDS
# The gRPC codes the GCS FUSE CSI driver gives a mount it may not make (docs/troubleshooting.md of
# GoogleCloudPlatform/gcs-fuse-csi-driver, "MountVolume.SetUp failures").
NO_ACCESS_CODES = ("code = PermissionDenied", "code = Unauthenticated")
SCHEDULING = ("Unschedulable", "FailedScheduling")  # no node has room: it starts once one has
# The scheduler's Event about a pod it could not place; it outlives the pod's binding (the API server keeps
# Events for --event-ttl, 1 h), so once the pod is on a node it no longer says why the pod waits.
SCHEDULER_EVENT = "FailedScheduling"


@dataclass(frozen=True)
class NotStarted:
    """Why the driver's pod (`pod`, "" before its Job `job` made one) has not started, since `since`."""

    job: str
    pod: str
    reason: str
    said: str
    since: datetime | None

    def why(self) -> str:
        return f"{self.reason}: {self.said}" if self.said else self.reason

    @property
    def where(self) -> str:
        return f"pod {self.pod}" if self.pod else f"Job {self.job}"

    def waited(self, now: datetime) -> float:
        return (now - self.since).total_seconds() if self.since else 0.0

    def fix(self, session: Session) -> str:
        """What to do about it, in a few words."""
        bucket, recipe = session.settings.gcs_bucket, session.recipe.name
        if self.reason == "FailedMount" and any(code in self.said for code in NO_ACCESS_CODES):
            return (f"the driver's service account cannot read gs://{bucket} through Workload Identity yet (it "
                    f"takes a few minutes after a deploy): check that `npx cdktf deploy {recipe}` completed")
        if self.reason == "FailedMount" and "code = NotFound" in self.said:
            return (f"bucket gs://{bucket} does not exist: deploy the artifacts stack (`npx cdktf deploy "
                    "artifacts`) or fix GCS_BUCKET")
        if self.reason in SCHEDULING:
            return (f"the system pool {SYSTEM_POOL_NAME} has no room for it and its autoscaler added none: see "
                    f"`kubectl get pods -A -o wide` for what fills it, or end other runs' drivers")
        if self.reason in UNPARSABLE_IMAGE + FAILING_PULL:
            return "the cluster's nodes cannot pull the driver's image: check that they reach its registry"
        return f"see `kubectl describe {self.where.lower()}`"


def _started(pod: dict) -> bool:
    """Whether the driver's own container has run (a running or terminated state). Not any container: the
    GCS FUSE webhook's sidecar (an init container with restartPolicy Always, or the first container on
    older nodes) runs while the driver's container still waits on its image
    (docs/provenance.md#a-driver-pod-that-does-not-start)."""
    return any(set(container.get("state") or {}) & {"running", "terminated"}
               for container in (pod.get("status") or {}).get("containerStatuses") or []
               if container.get("name") == DRIVER_CONTAINER)


def _scheduled(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) or any(
        c.get("type") == "PodScheduled" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or [])


def _event_time(event: dict) -> str:
    """When an Event last happened: the legacy recorder's lastTimestamp, the events API's series or
    eventTime (core/v1 Event)."""
    series = (event.get("series") or {}).get("lastObservedTime")
    return event.get("lastTimestamp") or series or event.get("eventTime") or \
        (event.get("metadata") or {}).get("creationTimestamp") or ""


def not_started(job: dict, pod: dict | None, events: list[dict]) -> NotStarted | None:
    """Why the driver's pod has not started, or None once one of its containers has run. In order: the
    scheduler's PodScheduled False, a container's image that cannot be pulled, the latest Warning event
    about the pod (a FailedMount's message names the volume and the CSI driver's error), a container's
    waiting reason."""
    meta = job["metadata"]
    if pod is None:
        return NotStarted(meta["name"], "", "NoPod", "the Job has made no pod yet",
                          parse_time(meta.get("creationTimestamp") or ""))
    if _started(pod):
        return None
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    since = parse_time(pod["metadata"].get("creationTimestamp") or "")
    job_name = meta["name"]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return NotStarted(job_name, name, condition.get("reason") or "Unschedulable",
                              condition.get("message") or "", since)
    waiting = [((c.get("state") or {}).get("waiting") or {}) for c in container_statuses(pod)]
    for state in waiting:
        if state.get("reason") in UNPARSABLE_IMAGE + FAILING_PULL:
            return NotStarted(job_name, name, state["reason"], state.get("message") or "", since)
    stale = (SCHEDULER_EVENT,) if _scheduled(pod) else ()
    warnings = sorted((e for e in events if e.get("type") == "Warning" and e.get("reason") not in stale),
                      key=_event_time)
    if warnings:
        latest = warnings[-1]
        return NotStarted(job_name, name, latest.get("reason") or "", latest.get("message") or "", since)
    for state in waiting:
        if state.get("reason"):
            return NotStarted(job_name, name, state["reason"], state.get("message") or "", since)
    return NotStarted(job_name, name, status.get("phase") or "Pending", "", since)


def waiting_line(state: NotStarted, now: datetime) -> str:
    """What `run` shows while it waits, and `status` under its table."""
    return (f"driver: {state.where} not started after {hms(state.waited(now))} (run waits up to "
            f"{hms(DRIVER_START_SECONDS)}): {state.why()}")


class StartBound:
    """Follows the driver's newest pod until it starts: says why it waits whenever that changes, and past
    DRIVER_START_SECONDS ends the run: a pod that no node has room for is left to start once one has,
    another that never ran has its Job deleted (nothing ran, so nothing was submitted)."""

    def __init__(self, session: Session, jobs) -> None:
        self.session, self.jobs, self.said = session, jobs, ""

    def observe(self, job: dict, pods: list[dict], printed: bool, ran_before: bool) -> None:
        """One poll; `printed`: the newest pod's log has had a line (the driver runs); `ran_before`: an
        earlier pod of the Job ran (the newest replaces it, and what it submitted runs on)."""
        pod = pods[-1] if pods else None
        if printed:
            return
        state = not_started(job, pod, self.jobs.events(pod["metadata"]["name"]) if pod and not _started(pod) else [])
        if state is None:
            return
        now = self.session.now()
        if state.why() != self.said:
            self.said = state.why()
            self.session.console.print(waiting_line(state, now), markup=False, highlight=False)
        hopeless = state.reason in UNPARSABLE_IMAGE or (state.reason == "ErrImagePull"
                                                         and state.said.startswith(MISSING_IMAGE))
        if not hopeless and state.waited(now) <= DRIVER_START_SECONDS:
            return
        name, within = job["metadata"]["name"], "" if hopeless else f" within {hms(DRIVER_START_SECONDS)}"
        why = f"({state.where}: {state.why()}); {state.fix(self.session)}"
        if state.reason in SCHEDULING:  # a queue for room, as a sweep's later drivers wait: kept
            raise StepFailed(f"the run's driver found no room to start{within} {why}; its Job {name} stays and "
                             f"starts once room frees (as a sweep's earlier runs end): follow it with "
                             f"{self.session.command('status')}, or stop it with {self.session.command('cancel')}")
        if ran_before:  # its JobSets run on: stopping them is the user's call
            raise StepFailed(f"the run's driver was replaced by a pod that did not start{within} {why}; what it "
                             f"submitted runs on unwatched: see {self.session.command('status')}, or stop it "
                             f"with {self.session.command('cancel')}")
        self.jobs.delete(name)
        raise StepFailed(f"the run's driver did not start{within} {why}; its Job {name} was deleted before it ran "
                         f"anything: then rerun {self.session.command('run')}")


def waiting_now(session: Session, jobs, name: str) -> str:
    """For `status`, of a running driver: why it has not started yet, "" when it has (or is gone)."""
    job = jobs.get(name)
    if job is None:
        return ""
    pods = jobs.pods(name)
    pod = pods[-1] if pods else None
    state = not_started(job, pod, jobs.events(pod["metadata"]["name"]) if pod and not _started(pod) else [])
    return waiting_line(state, session.now()) if state else ""
