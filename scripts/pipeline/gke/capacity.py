"""Capacity that does not come, or goes away, while `run` waits for a step: the next mode, or the same
step submitted again, or one line. docs/capacity.md says why `run` decides this rather than Kueue.

- No capacity within the mode's CAPACITY_WAIT, or a workload Kueue deactivated before it ever ran (its
  flex-start request failed its retries): the JobSet is deleted, which deletes its Workload and the
  Workload's ProvisioningRequests (owner references), so nothing bills and nothing stays queued, and
  the step is submitted again with its TPU pods pinned to the next place: the same mode in the next zone
  of ZONE, then the next mode of CAPACITY (recipes/capacity/placement.py).
- A slice lost after the step ran (a flex-start slice at its max_run_duration, whose queued-provisioning
  pool gets nodes only through a new request, which Kueue v0.17.1 never files for an admitted workload):
  the JobSet is deleted and submitted again from the first mode, and training resumes from its last
  checkpoint; at most MAX_LOST_SLICES times.
- After the last place: one line naming what was tried, for how long, and the next command.
- A CPU step (convert, export) without a node for its pods within CAPACITY_WAIT's `cpu`, or a train
  step's Pathways head without one: deleted, and one line naming what it waited for, for how long, and
  the next command; the CPU pool has no next mode.
- A step that has its capacity but cannot start (an image it cannot pull, pods not Ready within
  READY_WAIT; starting.py): deleted, and one line naming the pod and container."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.markup import escape

from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL
from tpu_rl.recipes.capacity.modes import CPU, describe_waits
from tpu_rl.recipes.capacity.placement import Place
from tpu_rl.recipes.costs.standing import idle_tpu
from tpu_rl.recipes.outcome import ApiError, StepFailed
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.cloud.jobsets import capacity_of
from tpu_rl.scripts.pipeline.gke.admission import CapacityShortfall, CapacityWatch, find_place, pinned_job, places_of
from tpu_rl.scripts.pipeline.gke.starting import StartFailed
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.gke.wait import wait_for_jobset
from tpu_rl.scripts.pipeline.phases import Phases
from tpu_rl.scripts.pipeline.record import RunCancelled, RunRecord
from tpu_rl.scripts.pipeline.session import Session, hms

# How many lost slices one `run` submits again before it stops: as many as the JobSet's own restarts on
# preemptible capacity (tpu_rl.jobs.train.PREEMPTIBLE_MAX_RESTARTS), each resuming from the last checkpoint.
MAX_LOST_SLICES = 3


@dataclass(frozen=True)
class Attempt:
    mode: str
    waited: float
    why: str
    place: Place | None = None

    @property
    def label(self) -> str:
        return self.place.label if self.place else self.mode

    def as_record(self) -> dict:
        zone = {"zone": self.place.zone} if self.place and self.place.zone else {}
        return {"mode": self.mode, **zone, "waited_seconds": round(self.waited), "what_happened": self.why}


def _resumes_from(session: Session) -> str:
    try:
        step = gcs.latest_checkpoint_step(session.clients.storage(), session.paths)
    except ApiError as error:
        return f"its latest checkpoint in {session.paths.actor_checkpoints} ({error})"
    return f"checkpoint step {step}" if step is not None else "step 0 (no finished checkpoint yet)"


def wait_with_capacity(session: Session, job: StepJob, follow_logs: bool, record: RunRecord,
                       go_on: str, on_head_log: Callable[[str], object] | None = None,
                       first: StepJob | None = None) -> None:
    """wait_for_jobset, moving on to the next capacity mode or submitting the step again as above.
    `go_on` is the command that goes on after a stop; `on_head_log` as in wait_for_jobset; `first` the
    step's JobSet as rendered, which a lost slice is submitted again as (`job` may be pinned like the
    JobSet a reattaching `run` found)."""
    phases = Phases(job.step, on_change=lambda seen: record.note_while_running(job.step, phases=seen.as_record()))
    try:
        _wait_with_capacity(session, job, follow_logs, record, go_on, phases, on_head_log, first or job)
    except RunCancelled:
        raise  # the record is the one `tpu-rl cancel` wrote (RunRecord.finish)
    except BaseException:
        note_phases(session, job, record, phases)
        raise
    note_phases(session, job, record, phases)


def note_phases(session: Session, job: StepJob, record: RunRecord, phases: Phases) -> None:
    """The step's phases into run.json and, for train, the TPU time billed while nothing trained."""
    if not phases.spans:
        return
    phases.observe(None, session.now())
    fields: dict = {"phases": phases.as_record(), **({"restarts": phases.restarts} if phases.restarts else {})}
    if job.step == "train":
        by_phase = phases.seconds()
        idle = idle_tpu(session.recipe, by_phase, phases.capacity or _mode_ran_on(session, job))
        fields["tpu_idle"] = idle.as_record()
        session.console.print(escape(idle.line(job.step, by_phase)))
    record.note(job.step, **fields)


def _mode_ran_on(session: Session, job: StepJob) -> str | None:
    try:
        return capacity_of(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"))
    except ApiError:
        return None


def replaced_meanwhile(session: Session, job: StepJob, why: str) -> str:
    return (f"{why}; JobSet {job.name} was meanwhile replaced by another of the same name (another `run "
            f"--replace`?), which is left alone; see {session.command('status')}")


def _wait_with_capacity(session: Session, job: StepJob, follow_logs: bool, record: RunRecord, go_on: str,
                        phases: Phases, on_head_log: Callable[[str], object] | None, first: StepJob) -> None:
    console, modes = session.console, session.recipe.capacity
    attempts: list[Attempt] = []
    lost = 0
    current = job
    while True:
        try:
            wait_for_jobset(session, current, follow_logs, CapacityWatch(session, current, phases=phases),
                            on_head_log)
            return
        except StartFailed as failed:  # it has its capacity and cannot start: that JobSet only, as below
            if not session.cluster.delete_jobset(current.name, failed.uid or None):
                raise StepFailed(replaced_meanwhile(session, job, f"step {job.step} stopped: {failed.why}")) from None
            bills = ", so no TPU bills" if job.step == "train" else ""
            raise StepFailed(f"step {job.step} stopped: {failed.why}; JobSet {job.name} deleted{bills}; "
                             f"{failed.then}; then rerun {go_on}") from None
        except CapacityShortfall as short:
            attempts.append(Attempt(short.mode, short.waited, short.why, short.place))
            record.step(job.step, "running", capacity_attempts=[a.as_record() for a in attempts])
            # It holds no capacity and can never run again; only that JobSet, not one of the same name
            # that a concurrent `run --replace` may have submitted meanwhile.
            if not session.cluster.delete_jobset(current.name, short.uid or None):
                raise StepFailed(replaced_meanwhile(session, job, f"step {job.step} stopped: {short.why}")) from None
            if job.step != "train" or short.mode not in modes:
                then = (f"later, or with a longer CAPACITY_WAIT (now "
                        f"{describe_waits(dict(session.settings.capacity_wait), (CPU,))})" if short.mode == CPU
                        else "to submit it again")
                bills = ", so no TPU bills" if job.step == "train" else ""
                raise StepFailed(f"step {job.step} stopped: {short.why}; JobSet {job.name} deleted{bills}; rerun "
                                 f"{go_on} {then}") from None
            if short.trained:
                lost += 1
                if lost > MAX_LOST_SLICES:
                    raise StepFailed(f"step train lost its TPU slice {lost} times ({short.why}); JobSet "
                                     f"{job.name} deleted, so no TPU bills; rerun {go_on} to go on from "
                                     f"{_resumes_from(session)}") from None
                current = first  # from the first mode again, Kueue's quota order (a reservation first)
                console.print(escape(f"train: the {attempts[-1].label} slice went away ({short.why}); JobSet {job.name} "
                                     f"deleted and submitted again, for a new slice; training resumes from "
                                     f"{_resumes_from(session)}"))
            else:
                places = places_of(session)
                here = short.place or find_place(places, short.mode, None)
                rest = places[places.index(here) + 1:] if here in places else ()
                if not rest:
                    raise StepFailed(no_capacity_line(session, job, attempts, go_on)) from None
                current = pinned_job(job, rest[0])
                console.print(escape(f"train: no {short.mode} capacity{here.in_zone if here else ''} after {hms(short.waited)} "
                                     f"({short.why}); JobSet {job.name} deleted; submitting it on {rest[0].label}"))
            session.cluster.create_jobset(current.manifest)
            console.print(f"{job.step}: submitted JobSet {current.name}")


def no_capacity_line(session: Session, job: StepJob, attempts: list[Attempt], go_on: str) -> str:
    tried = "; ".join(f"{a.label} for {hms(a.waited)} ({a.why})" for a in attempts)
    waits = describe_waits(dict(session.settings.capacity_wait), session.recipe.capacity)
    return (f"step train got no TPU capacity: tried {tried}. JobSet {job.name} deleted, so no TPU bills and no "
            f"request stays queued; outputs are kept. Next: rerun {go_on} later (training resumes from its "
            f"last checkpoint), or with another CAPACITY, or a longer CAPACITY_WAIT (now {waits})")
