"""The observers of a step's output while `run` waits for it (wait.py): the reads of the head's log, train's
progress read from it, and the end of the wait when the output stops (JobSetStall)."""

from __future__ import annotations

from rich.markup import escape

from tpu_rl.scripts.cloud.jobsets import JobSetState
from tpu_rl.recipes.outcome import ApiError, StepFailed
from tpu_rl.scripts.pipeline import stall
from tpu_rl.scripts.pipeline.gke.admission import jobset_uid
from tpu_rl.scripts.pipeline.gke.observation import Fail, Observation, Say, Skip
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.progress import AttemptProgress, StepPace, training_line
from tpu_rl.scripts.pipeline.run_state import read_record, step_total
from tpu_rl.scripts.pipeline.saving import SaveWatch
from tpu_rl.scripts.pipeline.session import Session, hms
from tpu_rl.scripts.rundata.progress import RewardReader, TrainProgress

# How long a step's head log may go unread, in an unbroken run of failed reads of Ready pods, before `run`
# ends with exit 4: one read already retries for about half a minute, so 10 min is an outage
# (docs/pipeline.md, "Stalls").
LOG_UNREAD_SECONDS = 600


class LogUnread(ApiError):
    """A step's log went unread past LOG_UNREAD_SECONDS: the run cannot see its progress or a stall. `uid`:
    of the JobSet waited for, so that the driver deletes that one only (submit.py), not one of its name that
    another `run` submitted meanwhile."""

    def __init__(self, message: str, uid: str) -> None:
        super().__init__(message, transient=False)
        self.uid = uid


class LogReads:
    """A failed read of the head's log skips the poll (its output unknown: no progress, no stall count, no
    pause: the output's key carries the kubelet's time, so the next good read compares right); one `!` line
    a run of failed reads says so and the wait goes on, at most LOG_UNREAD_SECONDS, then LogUnread (exit 4;
    submit.py's wait names the step and the JobSet).

    The limit measures one unbroken run of failed reads of one attempt whose every pod is Ready: a poll
    that reads nothing or reads fine, a pod not Ready (train's head not up yet, a requeued JobSet) and a
    restart each start it again, so failures minutes apart, or of pods not yet up, never add up."""

    def __init__(self) -> None:
        self.since: float | None = None  # since when (stall.clock) the reads counted fail (None: not counting)
        self.attempt: int | None = None  # the attempt (JobSet restarts) whose failed reads `since` counts
        self.failing = False  # this run of failed reads has had its `!` line

    def observe(self, seen: Observation) -> Skip | Fail | None:
        head = seen.head
        if head is None or head.error is None:  # no read this poll, or one that worked: the run ends
            self.since, self.failing = None, False
            return None
        now, attempt = stall.clock(), seen.state.restarts
        if not seen.ready:
            self.since = None
        elif self.since is None or self.attempt != attempt:
            self.since, self.attempt = now, attempt
        if not self.failing:
            self.failing = True
            return Skip((f"[yellow]![/] {seen.job.step}: {escape(str(head.error))}; the poll is skipped until a "
                         f"read works; run ends after {hms(LOG_UNREAD_SECONDS)} of them",))
        if self.since is not None and now - self.since >= LOG_UNREAD_SECONDS:
            return Fail(LogUnread(f"no read of the head's log worked for {hms(now - self.since)}, the limit; the "
                                  f"last failure: {head.error}", jobset_uid(seen.jobset)))
        return Skip()


class Progress:
    """Train's progress while it runs, read from the head's log at each poll: the furthest step of the
    attempt (`stepped`), whether it saves a checkpoint (`saving`) and its training line (`training`)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.steps, self.pace, self.saves = AttemptProgress(), StepPace(), SaveWatch()
        self.reward = RewardReader(session.clients.storage, session.paths.tensorboard, session.now)
        self.stepped: TrainProgress | None = None
        self.saving = False
        self.training = None  # the training line as a function of the elapsed text (_training)
        self.total: int | None = None  # the run's step total (run_state.step_total), read once train runs

    def observe(self, seen: Observation) -> None:
        self.stepped = self.training = None
        if not seen.train_running or seen.head is None:
            return
        state, log = seen.state, seen.head.text
        self.stepped = self.steps.update(state.restarts, log)
        self.saving = self.saves.update(state.restarts, log)
        if self.total is None:
            self.total = step_total(self.session, read_record(self.session))
        self.training = _training(self.session, state, self.stepped, self.reward.latest(), self.pace, self.total)


def _training(session: Session, state: JobSetState, found, reward: float | None, pace: StepPace, total: int):
    """The training line as a function of the elapsed text (None while nothing is known): the line the
    live status shows and `run` prints when the step, loss or reward changes, fitting 80 columns."""
    now = session.now()
    left = pace.seconds_left(state.restarts, found, total, now)
    if training_line("train", found, total, reward, "", left) is None:
        return None
    return lambda elapsed: training_line("train", found, total, reward, elapsed, left if elapsed else None)


class JobSetStall:
    """The stall bound (scripts/pipeline/stall.py) of a step's JobSet. Its output: for train, the furthest
    training step of the attempt (AttemptProgress), whether it saves a checkpoint (saving.py) and the head's
    last log line; for convert and export, the main pod's last log line; each line with the kubelet's time of
    it, so that a line repeated is new output too. It counts only while the JobSet runs with every pod of
    its current attempt Ready: the wait for capacity has its own bound (admission.py), and a restart, a new
    attempt or the start or end of a save starts the count again.

    At the bound `run` ends (StepFailed, exit 1, as the VM's stall) and leaves the JobSet running, as it
    leaves the VM's step: a stall is a guess from silence (stall.py); deleting the JobSet on it would lose
    the training since the last checkpoint and the slice itself, which flex-start may take hours to get
    again, while the line names `tpu-rl cancel` to stop it and a rerun of `run` reattaches to it.
    Train until its first step, convert and export have the longer QUIET_STALL_SECONDS (stall.py), and
    each time the count starts again `run` prints its bounds."""

    def __init__(self, session: Session, job: StepJob, progress: Progress) -> None:
        self.job, self.progress = job, progress
        self.then = f"it is left running: {stall.look_and_stop(session, job.step)}"
        self.output = stall.OutputWatch(stall.clock())
        # train until its first step, convert and export throughout: their known-silent phases (stall.py)
        self.quiet = stall.QUIET_STALL_SECONDS if job.step in ("train", "convert", "export") else stall.STALL_SECONDS
        self.counting: int | None = None  # the attempt whose count runs (None: paused, say so when it starts)

    def pause(self) -> None:
        """Not counted now (a pod not Ready): the count starts again, and says so."""
        self.output.pause(stall.clock())
        self.counting = None

    def observe(self, seen: Observation) -> Say | Fail | None:
        """One poll: the bounds when the count starts, StepFailed when the step looks stalled."""
        now, job, state = stall.clock(), self.job, seen.state
        if not seen.ready:
            self.pause()
            return None
        train, said = job.step == "train", None
        if self.counting != state.restarts:
            self.counting = state.restarts
            quiet, bound = hms(self.quiet), hms(stall.STALL_SECONDS)
            # said each time the count starts again; "silent": no new log line (or training step)
            times = f" (stepping: {bound} or {stall.STALL_STEP_TIMES} steps)" if train else ""
            said = Say((f"{job.step}: all pods ready; stalled if silent {quiet}{times}",))
        stepped, saving = self.progress.stepped, self.progress.saving
        step = stepped.step if stepped else None
        last_line = seen.head.last_line if seen.head else None
        # a count that starts again sees new output (its key holds the attempt, or follows a pause): never a stall
        found = self.output.observe((state.restarts, step, saving, last_line), step, train, now, self.quiet)
        if found is None:
            return said
        known = ([f"its last training step is {step}"] if step is not None else []) + \
            (["it is saving a checkpoint"] if saving else [])
        log = "its log has not changed" if last_line is not None else "its log is still empty"
        told = f"{', '.join(known)} and {log}" if known else log
        return Fail(StepFailed(stall.stall_line(job.step, f"of JobSet {job.name}", told, found, self.then)))
