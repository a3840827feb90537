"""One poll of a step's JobSet, as the observers of the wait (observers.py) see it, and what they answer.

The poll reads the JobSet and its pods; the head's log only when an observer first asks for it, so that the
reads keep their order: the wait for capacity and start is checked before the log is read (wait.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Protocol

from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL, MAIN_CONTAINER
from tpu_rl.scripts.cloud.jobsets import JobSetState, PodCounts, current_attempt, jobset_state, pod_counts
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.pipeline.gke.steps import PROGRESS_LOG_LINES, StepJob, main_pod, unstamped
from tpu_rl.scripts.pipeline.session import Session


@dataclass(frozen=True)
class HeadLog:
    """One read of the head's log: its last lines without the kubelet's times and the last of them with its
    time (None when the log is empty), or the read's failure."""

    text: str = ""
    last_line: str | None = None
    error: ApiError | None = None


@dataclass
class Observation:
    """What one poll saw of `job`'s JobSet: the JobSet and every pod of it (an earlier attempt's too, while
    they terminate), as the API returned them (None: the JobSet is gone), and `read_head`, which reads the
    head's log (None: this poll needs no read)."""

    job: StepJob
    jobset: dict | None
    pods: list[dict] = field(default_factory=list)
    read_head: Callable[[], HeadLog] | None = None

    @cached_property
    def state(self) -> JobSetState:
        return jobset_state(self.jobset)

    @cached_property
    def current(self) -> list[dict]:
        """The current attempt's pods: those of an earlier one may still be terminating, and what they say
        (a step logged before the restart) must not stick."""
        return current_attempt(self.pods, self.state.restarts)

    @cached_property
    def counts(self) -> PodCounts:
        return pod_counts(self.current)

    @property
    def ready(self) -> bool:
        """The JobSet runs with every pod of its current attempt Ready."""
        return self.state.phase == "running" and self.counts.ready >= self.job.expected_pods

    @property
    def train_running(self) -> bool:
        return self.job.step == "train" and self.state.phase == "running"

    @cached_property
    def head(self) -> HeadLog | None:
        """The head's log, read once, at the first observer that asks; None when this poll reads none."""
        return self.read_head() if self.read_head else None


@dataclass(frozen=True)
class Say:
    """Lines to print (rich markup), in order, and the live status's new text; the poll goes on."""

    lines: tuple[str, ...] = ()
    status: str | None = None


@dataclass(frozen=True)
class Skip:
    """What this poll read is unknown: the lines are printed and the rest of the poll is skipped."""

    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Done:
    """The JobSet succeeded: the wait returns its state."""

    state: JobSetState


@dataclass(frozen=True)
class Fail:
    """The wait ends with `error` (outcome.py: StepFailed, CapacityShortfall, StartFailed, ApiError...)."""

    error: Exception


Verdict = Say | Skip | Done | Fail


class Observer(Protocol):
    """Holds its own state across polls; None when it has nothing to say about this one."""

    def observe(self, seen: Observation) -> Verdict | None: ...


def head_log(session: Session, pod: dict | None, lines: int) -> tuple[str, str | None]:
    """The last `lines` lines of a pod's main container log, without the kubelet's times, and the last of
    them with its time (None when the log is empty or the pod unknown). Split at "\n" only, as the kubelet
    ends its lines: tqdm's "\r" stays inside a line, with its time (str.splitlines would cut there and
    leave an unstamped last piece). A line over the runtime's 16 KiB is several log entries, and the kubelet
    counts `lines` in entries and stamps only the first it writes (see steps.unstamped): `lines=1` may be
    the last fragment only, with its own time, so it still changes with the output; a line without a time
    is kept as it is, and the lines parsed for progress are short."""
    if pod is None:
        return "", None
    text = session.cluster.read_log(pod["metadata"]["name"], MAIN_CONTAINER, lines, timestamps=True)
    raw = text.removesuffix("\n").split("\n") if text else []
    return "".join(f"{unstamped(row)[1]}\n" for row in raw), (raw[-1] if raw else None)


def poll(session: Session, job: StepJob, stalls: bool) -> Observation:
    """One look at the JobSet and its pods. The head's log is read while train runs (its progress) and, for
    the stall bound (`stalls`), while every pod is Ready: train's last PROGRESS_LOG_LINES, another step's
    last line."""
    cluster = session.cluster
    jobset = cluster.get_jobset(job.name)
    if jobset is None:
        return Observation(job, None)
    seen = Observation(job, jobset, cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"))
    if seen.train_running or (stalls and seen.ready):
        lines = PROGRESS_LOG_LINES if seen.train_running else 1

        def read_head() -> HeadLog:
            try:
                head = main_pod(current_attempt(cluster.list_pods(job.selector), seen.state.restarts))
                return HeadLog(*head_log(session, head, lines))
            except ApiError as error:
                return HeadLog(error=error)

        seen.read_head = read_head
    return seen
