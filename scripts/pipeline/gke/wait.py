"""Waiting for a submitted JobSet: a poll of it at each tick (observation.py) that its observers
(observers.py, output.py) answer in turn: its pods' problems, restarts and progress on one line, its log
followed while it runs, and the end of the wait when it ends, a bound is passed or its output stops."""

from __future__ import annotations

import threading
from typing import Callable

from rich.markup import escape

from tpu_rl.jobs.k8s import MAIN_CONTAINER
from tpu_rl.scripts.cloud.jobsets import JobSetState
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch
from tpu_rl.scripts.pipeline.gke.log_stream import LogCursor
from tpu_rl.scripts.pipeline.gke.observation import Done, Fail, Observer, Say, Skip, poll
from tpu_rl.scripts.pipeline.gke.observers import (Ended, Gone, HeadLogHook, PhaseChanges, Problems, Restarts,
                                                   Starting, Summary)
from tpu_rl.scripts.pipeline.gke.output import JobSetStall, LogReads, Progress
from tpu_rl.scripts.pipeline.gke.steps import LOG_TAIL_LINES, StepJob, main_pod
from tpu_rl.scripts.pipeline.phases import Phases
from tpu_rl.scripts.pipeline.session import Session


class LogFollower(threading.Thread):
    """Streams the main pod's log while a step runs; reconnects after a dropped stream."""

    def __init__(self, session: Session, job: StepJob) -> None:
        super().__init__(daemon=True)
        self.session, self.job = session, job
        self.stop = threading.Event()
        self.streamed = False

    def _print(self, line: str) -> None:
        self.streamed = True
        self.session.console.print(f"[dim]{self.job.step}|[/] {escape(line)}", highlight=False, soft_wrap=True)

    def run(self) -> None:
        # Lines carry the kubelet's timestamps; after a drop the stream is reopened from the second of the
        # last line seen and the lines shown are skipped, so nothing repeats or goes missing.
        cursor = LogCursor()
        while not self.stop.is_set():
            try:
                pod = main_pod(self.session.cluster.list_pods(self.job.selector), running_only=True)
                if pod is not None:
                    for raw in self.session.cluster.stream_log(pod["metadata"]["name"], MAIN_CONTAINER,
                                                               cursor.start(), timestamps=True):
                        line = cursor.fresh(raw)
                        if line is not None:
                            self._print(line)
            except Exception:  # noqa: BLE001 -- a dropped stream is not fatal; the main loop reports cluster trouble
                pass
            self.stop.wait(max(self.session.poll_interval, 0.05))

    def finish(self, tail: int = LOG_TAIL_LINES) -> None:
        """Stop following; if the step ended before any line was streamed, show the log's last lines."""
        self.stop.set()
        self.join(timeout=10)
        if not self.streamed:
            pod = main_pod(self.session.cluster.list_pods(self.job.selector))
            if pod is not None:
                for line in self.session.cluster.read_log(pod["metadata"]["name"], MAIN_CONTAINER, tail).splitlines():
                    self._print(line)


def observers_of(session: Session, job: StepJob, watch: CapacityWatch, phases: Phases,
                 on_head_log: Callable[[str], object] | None, stalls: bool) -> list[Observer]:
    """The wait's observers, in the order they are asked: the JobSet gone, what its pods say and a restart
    first; then the waits before it runs; the head's log (a failed read skips the rest) and what it says;
    the phase and the lines shown; its end; the stall bound last, once it has neither ended nor failed."""
    problems, progress = Problems(), Progress(session)
    return [Gone(session), problems, Restarts(session, problems, phases.restarts),
            Starting(session, job, watch), LogReads(), progress,
            *([HeadLogHook(on_head_log)] if on_head_log else []), PhaseChanges(session, watch, phases, progress),
            Summary(session, progress), Ended(session, problems),
            *([JobSetStall(session, job, progress)] if stalls else [])]


def wait_for_jobset(session: Session, job: StepJob, follow_logs: bool,
                    watch: CapacityWatch | None = None,
                    on_head_log: Callable[[str], object] | None = None, stalls: bool = True) -> JobSetState:
    """Wait until the JobSet succeeds; StepFailed when it fails or (`stalls`) stalls (JobSetStall),
    CapacityShortfall (admission.py) when its capacity does not come within CAPACITY_WAIT or Kueue
    deactivates it, StartFailed (starting.py) when it has its capacity but cannot start. `on_head_log` gets
    the head's last log lines at each poll while train runs (the evaluations are read from them; `tpu-rl
    eval` has its own limit and no stall bound).

    A failed read of the head's log skips the poll (its output unknown: no progress, no stall count, no
    pause), one `!` line a run of them says so and the wait goes on, at most LOG_UNREAD_SECONDS of failed
    reads in a row of one attempt with every pod Ready (every step; LogReads), then ApiError (exit 4).

    Each poll, the observers are asked in turn: their lines are printed as they come, a skip ends the poll,
    and the first end (Done, Fail) ends the wait."""
    console = session.console
    watch = watch or CapacityWatch(session, job)
    phases = watch.phases = watch.phases or Phases(job.step)
    observers = observers_of(session, job, watch, phases, on_head_log, stalls)
    follower = LogFollower(session, job) if follow_logs else None
    if follower:
        follower.start()
    try:
        with console.status(f"{job.step}: waiting for JobSet {job.name}") as status:
            while True:
                seen = poll(session, job, stalls)
                for observer in observers:
                    verdict = observer.observe(seen)
                    if isinstance(verdict, Done):
                        return verdict.state
                    if isinstance(verdict, Fail):
                        raise verdict.error
                    if isinstance(verdict, Say) and verdict.status is not None:
                        status.update(verdict.status)
                    for line in verdict.lines if verdict else ():
                        console.print(line)
                    if isinstance(verdict, Skip):
                        break
                session.sleep(session.poll_interval)
    finally:
        if follower:
            follower.finish()
