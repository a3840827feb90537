"""The phases of a step while `run` waits for it, with their times: where the time (and, for the TPU
slice, the money) went. Read from what the cluster shows at each poll:

- queued: the JobSet is suspended and Kueue has not given it quota (its Workload is pending or absent);
- provisioning: Kueue holds it for its flex-start ProvisioningRequest, or its pods wait for a node
  (not scheduled yet: a pool scaling up from zero), the TPU workers among them;
- waiting for head (train only): the TPU workers have their nodes, and bill, while the Pathways head
  waits for a node of the CPU pool;
- pulling images: every pod has a node and a container still waits with reason ContainerCreating or
  PodInitializing, the kubelet's reasons for a container that is not created yet, which is while its
  image is pulled and its volumes mounted (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go,
  "Container state reason list");
- loading (train only): every container runs, and the trainer has logged no train step yet (tunix's
  "Train step" line, scripts/rundata/progress.py): the model is loaded and the first rollout compiled;
- training: a train step was logged; running: a CPU step's container runs;
- saving (train only): orbax has logged the start of a checkpoint save and not yet that the trainer goes
  on (scripts/pipeline/saving.py): the TPUs do no training meanwhile.

Which phases bill TPU time while nothing trains: TPU_IDLE_PHASES (recipes/costs/standing.py prices them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from rich.markup import escape

from tpu_rl.scripts.cloud.jobsets import JobSetState, has_had_node, tpu_pods
from tpu_rl.scripts.pipeline.session import hms

NOT_CREATED = ("ContainerCreating", "PodInitializing")  # kubelet_pods.go, "Container state reason list"


def _creating(pod: dict) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return True  # a scheduled pod whose containers the kubelet has not reported yet
    return any(((s.get("state") or {}).get("waiting") or {}).get("reason") in NOT_CREATED for s in statuses)


def phase_of(state: JobSetState, waiting_for_request: bool, pods: list[dict], train: bool,
             stepped: bool, saving: bool = False) -> str | None:
    """The step's phase now (see the module), None when it is over or between attempts."""
    if state.phase == "suspended":
        return "provisioning" if waiting_for_request else "queued"
    if state.phase != "running" or not pods:
        return None
    if not all(map(has_had_node, pods)):
        tpu = tpu_pods(pods)
        return "waiting for head" if tpu and all(map(has_had_node, tpu)) else "provisioning"
    if any(_creating(pod) for pod in pods):
        return "pulling images"
    if not train:
        return "running"
    if saving:
        return "saving"
    return "training" if stepped else "loading"


@dataclass
class Phases:
    """The phases one step went through, in order, each with its start and length."""

    step: str
    spans: list[list] = field(default_factory=list)  # [phase, started, seconds]
    capacity: str | None = None  # the mode the TPU workers last had their nodes on (admission.py)
    restarts: list[dict] = field(default_factory=list)  # each JobSet restart (gke/observers.py restart_of)
    # Called with the phases at each new phase (capacity.py writes them into run.json, for `runs`' cost).
    on_change: Callable[["Phases"], object] | None = field(default=None, repr=False, compare=False)

    def observe(self, phase: str | None, now: datetime) -> str | None:
        """Count up to `now`; the line to print when the phase changed, else None."""
        if self.spans:
            last = self.spans[-1]
            last[2] = (now - last[1]).total_seconds()
            if phase is None or phase == last[0]:
                return None
        elif phase is None:
            return None
        self.spans.append([phase, now, 0.0])
        if self.on_change is not None:
            self.on_change(self)
        if len(self.spans) == 1:
            return None
        before = self.spans[-2]
        return escape(f"{self.step}: {phase} (after {before[0]} for {hms(before[2])})")

    def seconds(self) -> dict[str, float]:
        """Seconds per phase, all spans of a phase together."""
        total: dict[str, float] = {}
        for phase, _, seconds in self.spans:
            total[phase] = total.get(phase, 0.0) + seconds
        return total

    def as_record(self) -> list[dict]:
        return [{"phase": phase, "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "seconds": round(seconds)}
                for phase, started, seconds in self.spans]
