"""What the GKE commands share: each step's JobSet (name, manifest, main pod), the main pod among a
JobSet's pods, and the kubelet's times."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.k8s import MAIN_CONTAINER, jobset_name, main_pod_selector
from tpu_rl.recipes import STEPS, Settings, Step
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.pipeline.session import hms

# How many of a step's last log lines are shown when nothing was streamed, and searched for a check's reason.
LOG_TAIL_LINES = 50

# How many of the head's last log lines are searched for the trainer's step line at each poll.
PROGRESS_LOG_LINES = 200

def parse_time(text: str) -> datetime | None:
    """RFC 3339 (with nanoseconds, as the kubelet writes them) to an aware datetime; None if not one."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if not match:
        return None
    fraction = (match.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}")

def unstamped(raw: str) -> tuple[datetime | None, str]:
    """A log line read with `timestamps`: the kubelet's time of it and the line itself (None and the
    line as it is when it carries no time). The kubelet prefixes a line with its RFC3339Nano time and a
    space. A line over 16 KiB comes in partial entries, stamped each or once depending on the kubelet
    (containerd c6b9f637 internal/cri/io/logger.go redirectLogs; docs/provenance.md#kubelet-timestamps-on-long-log-lines),
    so a tail of one line may be its last fragment only; a line without a time is returned whole, never dropped."""
    stamp_text, _, line = raw.partition(" ")
    stamp = parse_time(stamp_text)
    return (stamp, line) if stamp is not None else (None, raw)

def duration(start: str | None, end: datetime | str | None) -> str:
    """h:mm:ss from an RFC 3339 start to an end (a datetime or RFC 3339); "" when either is unknown."""
    started = parse_time(start) if start else None
    ended = parse_time(end) if isinstance(end, str) else end
    if started is None or ended is None:
        return ""
    return hms((ended - started).total_seconds())

def elapsed_since(created: str | None, now: Callable[[], datetime]) -> str:
    since = duration(created, now())
    return f"{since} elapsed" if since else ""

@dataclass(frozen=True)
class StepJob:
    step: Step
    name: str
    manifest: dict
    selector: str  # the main pod
    expected_pods: int

    @property
    def kubectl_logs(self) -> str:
        return f"kubectl logs -l {self.selector} -c {MAIN_CONTAINER}"

def step_jobs(spec: RunSpec, settings: Settings, export_step: int | None = None) -> dict[Step, StepJob]:
    """Each step's JobSet; export converts checkpoint `export_step` (None: the computed last step)."""
    manifests = render_manifests(spec, settings, export_step)
    jobs = {}
    for step in STEPS:
        manifest = manifests[step]
        expected = sum(int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1))
                       for rj in manifest["spec"]["replicatedJobs"])
        jobs[step] = StepJob(step, jobset_name(spec, step), manifest, main_pod_selector(spec, step), expected)
    return jobs

def main_pod(pods: list[dict], running_only: bool = False) -> dict | None:
    running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
    if running:
        return running[0]
    if running_only:
        return None
    return max(pods, key=lambda pod: pod["metadata"].get("creationTimestamp", ""), default=None)
