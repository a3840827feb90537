"""The end of an attempt that has its capacity but cannot start: an image that cannot be pulled, or pods on
their nodes that do not all become Ready (READY_WAIT_SECONDS and IMAGE_PULL_FAILING_SECONDS below say why
each bound). Neither counts against the JobSet's bounds: a failed pull never starts a container, so the
Job's backoffLimit never sees it, and the stall bound (stall.py) counts only while every pod is Ready. `run` deletes the JobSet (capacity.py, by its UID) and stops with
one line that names what did not start.

The kubelet's waiting reasons (kubernetes/kubernetes pkg/kubelet/images/types.go @64c0164c): InvalidImageName
("Unable to parse the image name", returned before any pull, image_manager.go applyDefaultImageTag) and an
ErrImagePull the registry answered "not found" (MISSING_IMAGE) end the step at once, as no retry can change
them; any other ErrImagePull, and ImagePullBackOff ("kubelet is backing off image pull"), once the pull has
kept failing for IMAGE_PULL_FAILING_SECONDS, since ErrImagePull is also what one dropped connection gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tpu_rl.recipes.capacity.modes import READY_WAIT_SECONDS
from tpu_rl.recipes.outcome import StepFailed
from tpu_rl.scripts.cloud.jobsets import (JobSetState, container_image, container_statuses, has_had_node, is_finishing,
                                          is_ready, restart_total)
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.session import Session, hms

# How long a container's image pull may keep failing (FAILING_PULL): the kubelet backs off 10 s doubling to
# 300 s (kubernetes/kubernetes pkg/kubelet/kubelet.go MaxImageBackOff), so this is five failed pulls in a
# row (docs/provenance.md#kubelet-image-pull-back-off).
IMAGE_PULL_FAILING_SECONDS = 5 * 60

UNPARSABLE_IMAGE = ("InvalidImageName",)
# evalCRIPullErr (kubernetes/kubernetes pkg/kubelet/images/image_manager.go @cfce511e) also names a failed pull
# RegistryUnavailable or SignatureValidationFailed when the runtime's error starts with k8s.io/cri-api's error
# of that name (staging/src/k8s.io/cri-api/pkg/errors/errors.go; CRI-O returns them, containerd does not);
# the kubelet backs off and retries them as any other pull.
FAILING_PULL = ("ErrImagePull", "ImagePullBackOff", "RegistryUnavailable", "SignatureValidationFailed")
# An ErrImagePull's message is the runtime's error as gRPC renders it ("rpc error: code = %s desc = %s",
# grpc-go internal/status/status.go); containerd answers NotFound when the registry has no such tag or
# repository (errdefs.ErrNotFound from core/remotes/docker/resolver.go, errgrpc.ToGRPC): no retry finds it.
MISSING_IMAGE = "rpc error: code = NotFound "


@dataclass
class StartFailed(StepFailed):
    """The step's attempt cannot start: `run` deletes JobSet `uid` and stops with `why`."""

    why: str
    uid: str = ""
    then: str = ""  # what to do before running it again

    def __post_init__(self) -> None:
        StepFailed.__init__(self, self.why)


def _waiting(container: dict) -> dict:
    return (container.get("state") or {}).get("waiting") or {}


def _not_ready_reason(pod: dict) -> str:
    """Why a pod is not Ready, in the kubelet's words: its first container that waits or has exited."""
    for container in container_statuses(pod):
        waiting, terminated = _waiting(container), (container.get("state") or {}).get("terminated") or {}
        if waiting.get("reason") or terminated:
            said = waiting.get("reason") or f"{terminated.get('reason', 'exited')} (exit code " \
                                            f"{terminated.get('exitCode')})"
            restarts = int(container.get("restartCount") or 0)
            return f"container {container['name']} {said}" + (f", {restarts} restarts" if restarts else "")
    return "no container says why"


@dataclass
class StartWatch:
    """Follows the current attempt's pods once they have nodes; StartFailed past a bound."""

    session: Session
    job: StepJob
    attempt: int | None = None
    since: datetime | None = None  # since when every pod has a node and not every pod is Ready
    restarts: int | None = None  # the attempt's container restarts at the last poll
    pulls: dict[tuple[str, str], tuple[datetime, str]] = field(default_factory=dict)  # failing, since; message

    def observe(self, state: JobSetState, pods: list[dict], uid: str) -> None:
        """One poll of a running JobSet's current attempt."""
        now = self.session.now()
        if state.restarts != self.attempt:  # a new attempt starts its own clocks
            self.attempt, self.since, self.restarts, self.pulls = state.restarts, None, None, {}
        self._pulls(pods, uid, now)
        self._ready(pods, uid, now)

    def _pulls(self, pods: list[dict], uid: str, now: datetime) -> None:
        failing = {}
        for pod in pods:
            for container in container_statuses(pod):
                reason, message = _waiting(container).get("reason", ""), _waiting(container).get("message", "")
                if reason not in UNPARSABLE_IMAGE + FAILING_PULL:
                    continue
                key = (pod["metadata"]["name"], container["name"])
                since, said = self.pulls.get(key, (now, ""))
                said = said if reason == "ImagePullBackOff" and said else f"{reason}: {message}".rstrip(": ")
                failing[key] = (since, said)
                waited = (now - since).total_seconds()
                at_once = reason in UNPARSABLE_IMAGE or (reason == "ErrImagePull" and message.startswith(MISSING_IMAGE))
                if at_once or waited >= IMAGE_PULL_FAILING_SECONDS:
                    image = container_image(pod, container["name"])
                    kept = "" if at_once else f" for {hms(waited)}, the kubelet retrying"
                    raise StartFailed(f"container {container['name']} of pod {key[0]} cannot pull image "
                                      f"{image} ({said}){kept}", uid, "fix the image in recipes/recipes.toml "
                                      f"({self.session.command('preflight')} checks each one)")
        self.pulls = failing  # a container that pulled, or went away, starts again from nothing

    def _ready(self, pods: list[dict], uid: str, now: datetime) -> None:
        """Every pod on a node and some not Ready (nor finishing): bounded by READY_WAIT_SECONDS. The clock
        stops only at two polls in a row with every pod Ready and no container restarted between them, so
        a container that crash-loops (Ready for a moment between its back-offs) keeps it going."""
        restarts, previous = restart_total(pods), self.restarts
        self.restarts = restarts
        if not pods or not all(map(has_had_node, pods)):
            self.since = None  # a pod without a node waits for capacity (admission.py), not to start
            return
        starting = [pod for pod in pods if not is_ready(pod) and not is_finishing(pod)]
        if not starting:
            if previous == restarts:
                self.since = None
            return
        self.since = self.since or now
        waited = (now - self.since).total_seconds()
        if waited > READY_WAIT_SECONDS:
            pod = starting[0]
            raise StartFailed(f"its pods have had their nodes but not all been Ready for {hms(waited)}, longer "
                              f"than READY_WAIT's {hms(READY_WAIT_SECONDS)}; pod {pod['metadata']['name']}: "
                              f"{_not_ready_reason(pod)}", uid, f"its logs: {self.session.logs_hint(self.job.step)}")
