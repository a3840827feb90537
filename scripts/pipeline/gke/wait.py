"""Waiting for a submitted JobSet: its pods' problems, restarts and progress on one line, its log
followed while it runs, and the end of the wait when its output stops (JobSetStall)."""

from __future__ import annotations

import threading
from typing import Callable

from rich.markup import escape

from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL, MAIN_CONTAINER
from tpu_rl.recipes.outcome import ApiError, StepFailed
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.cloud.kube_objects import JobSetState, current_attempt, disruption_of, jobset_state, pod_counts, pod_problems
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch, jobset_uid
from tpu_rl.scripts.pipeline import stall
from tpu_rl.scripts.pipeline.gke.diagnose import failure_message
from tpu_rl.scripts.pipeline.gke.log_stream import SeenUpTo
from tpu_rl.scripts.pipeline.gke.starting import StartWatch
from tpu_rl.scripts.pipeline.gke.steps import (LOG_TAIL_LINES, PROGRESS_LOG_LINES, StepJob, elapsed_since, main_pod,
                                        unstamped)
from tpu_rl.scripts.pipeline.phases import Phases, phase_of
from tpu_rl.scripts.pipeline.progress import AttemptProgress, StepPace, training_line
from tpu_rl.scripts.pipeline.record import RunCancelled, cancellation_of
from tpu_rl.scripts.pipeline.saving import SaveWatch
from tpu_rl.scripts.pipeline.session import Session, hms
from tpu_rl.scripts.rundata.progress import RewardReader, TrainProgress

# How long train's head log (its progress, saves and evaluations; eval's JobSet too) may go unread before
# `run` ends with exit 4. One read already retries for about half a minute (scripts/cloud/retry.py: 6
# tries, 1-16 s apart), so a poll whose read fails is an apiserver or kubelet hiccup of a minute or more,
# and a JobSet of a multi-hour train keeps running through it; 10 min of failed reads is an outage that
# `run` cannot see through, and it ends saying what it waited for.
LOG_UNREAD_SECONDS = 600


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
        # Lines carry the kubelet's timestamps; after a drop the stream is reopened a little before the
        # last line seen and everything up to that line is skipped, so nothing repeats or goes missing.
        seen = SeenUpTo()
        while not self.stop.is_set():
            try:
                pod = main_pod(self.session.cluster.list_pods(self.job.selector), running_only=True)
                if pod is not None:
                    for raw in self.session.cluster.stream_log(pod["metadata"]["name"], MAIN_CONTAINER,
                                                               seen.since(), timestamps=True):
                        line = seen.fresh(raw)
                        if line is not None:
                            self._print(line)
            except Exception:  # a dropped stream is not fatal; the main loop reports cluster trouble
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

    def __init__(self, session: Session, job: StepJob) -> None:
        self.session, self.job = session, job
        self.then = f"it is left running: {stall.look_and_stop(session, job.step)}"
        self.output = stall.OutputWatch(stall.clock())
        # train until its first step, convert and export throughout: their known-silent phases (stall.py)
        self.quiet = stall.QUIET_STALL_SECONDS if job.step in ("train", "convert", "export") else stall.STALL_SECONDS
        self.counting: int | None = None  # the attempt whose count runs (None: paused, say so when it starts)

    def pause(self) -> None:
        """Not counted now (a pod not Ready): the count starts again, and says so."""
        self.output.pause(stall.clock())
        self.counting = None

    def check(self, state: JobSetState, ready: bool, stepped: TrainProgress | None, saving: bool,
              last_line: str | None) -> None:
        """One poll: StepFailed when the step looks stalled."""
        now, job = stall.clock(), self.job
        if not ready:
            self.pause()
            return
        train = job.step == "train"
        if self.counting != state.restarts:
            self.counting = state.restarts
            quiet, bound = hms(self.quiet), hms(stall.STALL_SECONDS)
            # printed each time the count starts again; "silent": no new log line (or training step)
            times = f" (stepping: {bound} or {stall.STALL_STEP_TIMES} steps)" if train else ""
            self.session.console.print(f"{job.step}: all pods ready; stalled if silent {quiet}{times}")
        step = stepped.step if stepped else None
        found = self.output.observe((state.restarts, step, saving, last_line), step, train, now, self.quiet)
        if found is None:
            return
        seen = ([f"its last training step is {step}"] if step is not None else []) + \
            (["it is saving a checkpoint"] if saving else [])
        log = "its log has not changed" if last_line is not None else "its log is still empty"
        said = f"{', '.join(seen)} and {log}" if seen else log
        raise StepFailed(stall.stall_line(job.step, f"of JobSet {job.name}", said, found, self.then))


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


def wait_for_jobset(session: Session, job: StepJob, follow_logs: bool,
                    watch: CapacityWatch | None = None,
                    on_head_log: Callable[[str], object] | None = None, stalls: bool = True) -> JobSetState:
    """Wait until the JobSet succeeds; StepFailed when it fails or (`stalls`) stalls (JobSetStall),
    CapacityShortfall (admission.py) when its capacity does not come within CAPACITY_WAIT or Kueue
    deactivates it, StartFailed (starting.py) when it has its capacity but cannot start. `on_head_log` gets the head's last log lines at each poll while train runs (the
    evaluations are read from them; `tpu-rl eval` has its own limit and no stall bound).

    A failed read of the head's log skips the poll (its output unknown: no progress, no stall count, no
    pause), one `!` line a run of them says so and the wait goes on; for train (its progress and
    `on_head_log` need the log) at most LOG_UNREAD_SECONDS, then ApiError (exit 4)."""
    console, cluster = session.console, session.cluster
    watch = watch or CapacityWatch(session, job)
    phases = watch.phases = watch.phases or Phases(job.step)
    follower = LogFollower(session, job) if follow_logs else None
    if follower:
        follower.start()
    problems: list[str] = []  # every problem seen, printed once (and the failure's words)
    attempt_problems: list[str] = []  # those seen since the last restart: what took this attempt down
    disruptions: list[str] = []  # pods taken away (DisruptionTarget) since the last restart
    restarts_seen: int | None = None
    last_summary = None
    progress, pace, last_training, saves, saving = AttemptProgress(), StepPace(), None, SaveWatch(), False
    reward = RewardReader(session.clients.storage, session.paths.tensorboard, session.now)
    stall_watch = JobSetStall(session, job) if stalls else None
    start_watch = StartWatch(session, job)
    unread_since: float | None = None  # since when (stall.clock) the head's log reads fail
    try:
        with console.status(f"{job.step}: waiting for JobSet {job.name}") as status:
            while True:
                jobset = cluster.get_jobset(job.name)
                state = jobset_state(jobset)
                if state.phase == "absent":
                    cancelled = cancellation_of(session, job.name)
                    if cancelled:
                        raise RunCancelled(f"step {job.step} was cancelled: `tpu-rl cancel` deleted JobSet {job.name} "
                                           f"at {cancelled}; its outputs are kept, rerun {session.command('run')} "
                                           "to go on")
                    raise StepFailed(f"step {job.step} failed: JobSet {job.name} disappeared while running (deleted "
                                     f"by someone?); rerun {session.command('run')} to resubmit")
                pods = cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}")
                for problem in (p for pod in pods for p in pod_problems(pod)):
                    if problem not in problems:
                        problems.append(problem)
                        attempt_problems.append(problem)
                        console.print(f"[yellow]![/] {job.step}: {escape(problem)}")
                disruptions += [d for d in map(disruption_of, pods) if d and d not in disruptions]
                if restarts_seen is not None and state.restarts > restarts_seen:
                    line, restart = restart_of(session, job, state, disruptions, attempt_problems)
                    console.print(escape(line))
                    phases.restarts.append(restart)  # into run.json with the phases (capacity.note_phases)
                    disruptions.clear()
                    attempt_problems.clear()
                restarts_seen = state.restarts
                # Pods of an earlier attempt may still be terminating: count, and read progress from, the
                # current attempt's only, so a step logged before the restart does not stick.
                pods = current_attempt(pods, state.restarts)
                counts = pod_counts(pods)
                summary = (f"{job.step}: {state.phase}, pods {counts.scheduled}/{job.expected_pods} scheduled, "
                           f"{counts.ready}/{job.expected_pods} ready")
                awaited = watch.observe(jobset, state, pods)  # what the step really waits for, bounded
                if state.phase == "running":
                    start_watch.observe(state, pods, jobset_uid(jobset))  # an image or a pod that will not start
                if awaited:
                    console.print(escape(awaited))
                stepped = training = last_line = None
                ready = state.phase == "running" and counts.ready >= job.expected_pods
                train_running = job.step == "train" and state.phase == "running"
                if train_running or (ready and stall_watch):
                    try:
                        head = main_pod(current_attempt(cluster.list_pods(job.selector), state.restarts))
                        log, last_line = head_log(session, head, PROGRESS_LOG_LINES if train_running else 1)
                        unread_since = None
                    except ApiError as error:
                        # This poll is skipped (no progress, no stall count, no pause: the output's key
                        # carries the kubelet's time, so the next good read compares right); one `!` line
                        # a run of failed reads; train's goes on at most LOG_UNREAD_SECONDS.
                        unread_since = _unread(session, job, error, unread_since, train_running)
                        session.sleep(session.poll_interval)
                        continue
                if job.step == "train" and state.phase == "running":
                    stepped = progress.update(state.restarts, log)
                    saving = saves.update(state.restarts, log)
                    training = _training(session, state, stepped, reward.latest(), pace)
                    if on_head_log:
                        on_head_log(log)
                changed = phases.observe(phase_of(state, watch.waits_for_request(), pods, job.step == "train",
                                                  stepped is not None, saving), session.now())
                if changed:
                    console.print(changed)
                if state.restarts:
                    summary += f", {state.restarts} restart(s)"
                elapsed = elapsed_since(state.created, session.now)
                status.update(training(elapsed) if training else f"{summary}  {elapsed}")
                if summary != last_summary:
                    console.print(f"{summary}  [dim]{elapsed}[/]")
                    last_summary = summary
                if training and training("") != last_training:  # a new step, loss or reward
                    console.print(escape(training(elapsed)))
                    last_training = training("")
                if state.phase == "succeeded":
                    return state
                if state.phase == "failed":
                    raise StepFailed(failure_message(session, job, state, problems))
                if stall_watch:
                    stall_watch.check(state, ready, stepped, saving, last_line)
                session.sleep(session.poll_interval)
    finally:
        if follower:
            follower.finish()



class LogUnread(ApiError):
    """Train's log went unread past LOG_UNREAD_SECONDS: the run cannot see its progress or a stall."""

def _unread(session: Session, job: StepJob, error: ApiError, since: float | None, train: bool) -> float:
    """A failed read of the head's log at this poll: the `!` line at the first of a run of them, ApiError
    when train's log has gone unread for LOG_UNREAD_SECONDS; since when the reads fail."""
    now = stall.clock()
    if since is None:
        limit = f"; run ends after {hms(LOG_UNREAD_SECONDS)} of them" if train else ""
        session.console.print(f"[yellow]![/] {job.step}: {escape(str(error))}; the poll is skipped until a "
                              f"read works{limit}")
        return now
    if train and now - since >= LOG_UNREAD_SECONDS:
        raise LogUnread(f"no read of the head's log worked for {hms(now - since)}, the limit; the last "
                        f"failure: {error}", transient=False)  # submit.py's wait names the step and the JobSet
    return since


def _training(session: Session, state: JobSetState, found, reward: float | None, pace: StepPace):
    """The training line as a function of the elapsed text (None while nothing is known): the line the
    live status shows and `run` prints when the step, loss or reward changes, fitting 80 columns."""
    total, now = trained_steps(session.recipe), session.now()
    left = pace.seconds_left(state.restarts, found, total, now)
    if training_line("train", found, total, reward, "", left) is None:
        return None
    return lambda elapsed: training_line("train", found, total, reward, elapsed, left if elapsed else None)


def restart_of(session: Session, job: StepJob, state: JobSetState, disruptions: list[str],
               problems: list[str]) -> tuple[str, dict]:
    """One line for a JobSet restart, and its record for run.json: when, what took the step down (a
    preemption when a pod was disrupted, in the pod's DisruptionTarget words; else the pods' problem),
    the restart against its bound, and for train the checkpoint training resumes from, read from the
    bucket (None when none is finished yet, absent when the bucket could not be read)."""
    preempted = bool(disruptions)
    reason = disruptions[-1] if preempted else (problems[-1] if problems else "its pods were replaced before they "
                                                                              "said why")
    cause = f"preempted ({reason})" if preempted else f"failed ({reason})"
    record: dict = {"at": session.now().strftime("%Y-%m-%dT%H:%M:%SZ"), "restart": state.restarts,
                    "preempted": preempted, "reason": reason}
    bound = f" ({state.restarts} of {state.max_restarts})" if state.max_restarts else ""
    line = f"{job.step}: {cause}; JobSet restarted{bound}"
    if job.step != "train":
        return line, record
    paths = session.paths
    try:
        step = gcs.latest_checkpoint_step(session.clients.storage(), paths)
    except ApiError as error:
        return f"{line}; training resumes from the latest checkpoint in {paths.actor_checkpoints} ({error})", record
    record["resumes_from_step"] = step
    if step is None:
        return f"{line}; no finished checkpoint in {paths.actor_checkpoints} yet, so training starts again at step 0", record
    return f"{line}; training resumes from checkpoint step {step} ({paths.actor_checkpoints}{step})", record
