"""The observers of a step's JobSet while `run` waits for it (wait.py asks them in turn at each poll, observers_of):
each holds its own state and answers one poll (observation.py) with nothing, lines to print, a skip of the
rest of the poll, or the end of the wait. The head's log has its own (output.py): its reads, train's
progress and the stall bound."""

from __future__ import annotations

from typing import Callable

from rich.markup import escape

from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.cloud.jobsets import JobSetState, disruption_of, pod_problems
from tpu_rl.recipes.outcome import ApiError, StepFailed
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch, jobset_uid
from tpu_rl.scripts.pipeline.gke.diagnose import failure_message
from tpu_rl.scripts.pipeline.gke.observation import Done, Fail, Observation, Say
from tpu_rl.scripts.pipeline.gke.output import Progress
from tpu_rl.scripts.pipeline.gke.starting import StartWatch
from tpu_rl.scripts.pipeline.gke.steps import StepJob, elapsed_since
from tpu_rl.scripts.pipeline.phases import Phases, phase_of
from tpu_rl.scripts.pipeline.record import RunCancelled, cancellation_of
from tpu_rl.scripts.pipeline.session import Session


class Gone:
    """The JobSet is gone: `tpu-rl cancel` deleted it (the run's record says when), or someone else did."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def observe(self, seen: Observation) -> Fail | None:
        if seen.state.phase != "absent":
            return None
        job, session = seen.job, self.session
        cancelled = cancellation_of(session, job.name)
        if cancelled:
            return Fail(RunCancelled(f"step {job.step} was cancelled: `tpu-rl cancel` deleted JobSet {job.name} at "
                                     f"{cancelled}; its outputs are kept, rerun {session.command('run')} to go on"))
        return Fail(StepFailed(f"step {job.step} failed: JobSet {job.name} disappeared while running (deleted by "
                               f"someone?); rerun {session.command('run')} to resubmit"))


class Problems:
    """Each pod problem (jobsets.pod_problems), printed once: all of them kept for the failure's words,
    and `fresh`, those first seen at this poll."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.fresh: list[str] = []

    def observe(self, seen: Observation) -> Say | None:
        self.fresh = []
        for problem in (p for pod in seen.pods for p in pod_problems(pod)):
            if problem not in self.seen:
                self.seen.append(problem)
                self.fresh.append(problem)
        return Say(tuple(f"[yellow]![/] {seen.job.step}: {escape(problem)}" for problem in self.fresh)) \
            if self.fresh else None


class Restarts:
    """A JobSet restart: one line (restart_of) and its record in the step's phases (into run.json with them,
    capacity.note_phases). What took the attempt down is what was seen since the last restart: the pods
    taken away (DisruptionTarget) and the problems (those of `problems`)."""

    def __init__(self, session: Session, problems: Problems, restarts: list[dict]) -> None:
        self.session, self.problems, self.records = session, problems, restarts
        self.disruptions: list[str] = []
        self.attempt_problems: list[str] = []
        self.restarts: int | None = None  # at the last poll

    def observe(self, seen: Observation) -> Say | None:
        state = seen.state
        self.attempt_problems += self.problems.fresh
        self.disruptions += [d for d in map(disruption_of, seen.pods) if d and d not in self.disruptions]
        said = None
        if self.restarts is not None and state.restarts > self.restarts:
            line, record = restart_of(self.session, seen.job, state, self.disruptions, self.attempt_problems)
            said = Say((escape(line),))
            self.records.append(record)
            self.disruptions.clear()
            self.attempt_problems.clear()
        self.restarts = state.restarts
        return said


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
        return (f"{line}; no finished checkpoint in {paths.actor_checkpoints} yet, so training starts again at "
                "step 0"), record
    return f"{line}; training resumes from checkpoint step {step} ({paths.actor_checkpoints}{step})", record


class Starting:
    """What the step waits for before it runs, each wait bounded: its capacity (admission.CapacityWatch: a
    line when what it awaits changes) and, once it runs, its pods' start (starting.StartWatch). A failure
    of the start is checked before the line is said: a step that cannot start says only that."""

    def __init__(self, session: Session, job: StepJob, watch: CapacityWatch) -> None:
        self.watch, self.start = watch, StartWatch(session, job)

    def observe(self, seen: Observation) -> Say | Fail | None:
        try:
            awaited = self.watch.observe(seen.jobset, seen.state, seen.current)
            if seen.state.phase == "running":
                # an image that cannot be pulled, or pods on their nodes that do not become Ready
                self.start.observe(seen.state, seen.current, jobset_uid(seen.jobset))
        except StepFailed as failure:  # CapacityShortfall, StartFailed, a workload someone else deactivated
            return Fail(failure)
        return Say((escape(awaited),)) if awaited else None


class HeadLogHook:
    """Hands the head's last log lines to `on_head_log` at each poll while train runs (`run` reads the
    evaluations from them, `tpu-rl eval` its Pre line); what it raises ends the wait."""

    def __init__(self, on_head_log: Callable[[str], object]) -> None:
        self.on_head_log = on_head_log

    def observe(self, seen: Observation) -> None:
        if seen.train_running and seen.head is not None:
            self.on_head_log(seen.head.text)


class PhaseChanges:
    """The step's phase (phases.py) at each poll, counted in `phases`: a line when it changes."""

    def __init__(self, session: Session, watch: CapacityWatch, phases: Phases, progress: Progress) -> None:
        self.session, self.watch, self.phases, self.progress = session, watch, phases, progress

    def observe(self, seen: Observation) -> Say | None:
        phase = phase_of(seen.state, self.watch.waits_for_request(), seen.current, seen.job.step == "train",
                         self.progress.stepped is not None, self.progress.saving)
        changed = self.phases.observe(phase, self.session.now())
        return Say((changed,)) if changed else None


class Summary:
    """What the wait shows: the live status (train's progress once known, else the JobSet's phase and pods),
    a line when the phase, the pods or the restarts change, and for train one when the step, loss or reward
    does."""

    def __init__(self, session: Session, progress: Progress) -> None:
        self.session, self.progress = session, progress
        self.summary: str | None = None
        self.training: str | None = None

    def observe(self, seen: Observation) -> Say:
        job, state, counts = seen.job, seen.state, seen.counts
        summary = (f"{job.step}: {state.phase}, pods {counts.scheduled}/{job.expected_pods} scheduled, "
                   f"{counts.ready}/{job.expected_pods} ready")
        summary += f", {state.restarts} restart(s)" if state.restarts else ""
        elapsed = elapsed_since(state.created, self.session.now)
        training, lines = self.progress.training, []
        if summary != self.summary:
            lines.append(f"{summary}  [dim]{elapsed}[/]")
            self.summary = summary
        if training and training("") != self.training:  # a new step, loss or reward
            lines.append(escape(training(elapsed)))
            self.training = training("")
        return Say(tuple(lines), training(elapsed) if training else f"{summary}  {elapsed}")


class Ended:
    """The JobSet's end: Done when it succeeded; when it failed, StepFailed in its own and its pods' words."""

    def __init__(self, session: Session, problems: Problems) -> None:
        self.session, self.problems = session, problems

    def observe(self, seen: Observation) -> Done | Fail | None:
        if seen.state.phase == "succeeded":
            return Done(seen.state)
        if seen.state.phase == "failed":
            return Fail(StepFailed(failure_message(self.session, seen.job, seen.state, self.problems.seen)))
        return None
