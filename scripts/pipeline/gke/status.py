"""`tpu-rl status` and `logs` on GKE."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL, MAIN_CONTAINER, jobset_name, main_pod_selector
from tpu_rl.recipes import Step, UserError
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cloud.jobsets import JobSetState, PodCounts, current_attempt, jobset_state, placement_of, pod_counts
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch, read_admission
from tpu_rl.scripts.pipeline.gke.queue import run_positions
from tpu_rl.scripts.pipeline.gke.steps import PROGRESS_LOG_LINES, StepJob, duration, main_pod, step_jobs
from tpu_rl.scripts.pipeline.progress import training_now
from tpu_rl.scripts.pipeline.session import Session, StatusReport, StepStatus
from tpu_rl.scripts.rundata.progress import TrainProgress, last_train_step


# A suspended JobSet waits in Kueue's queue: said so, without JobSet's own reason for it (SuspendedJobs),
# which says nothing more (issue 37: `suspended (SuspendedJobs)`); the status note says what it waits for.
QUEUED = "queued in Kueue"


def unfollowed_end(session: Session, run: str) -> tuple[str, str | None] | None:
    """Nothing beyond the record: the run's driver writes run.json itself, followed or not."""
    return None


def jobset_step_status(state: JobSetState, counts: PodCounts | None, expected_pods: int,
                       now: datetime) -> tuple[str, str, str]:
    """The state, pods and time cells of one JobSet: a finished one shows "done" and how long it took."""
    reason = f" ({state.reason})" if state.reason and state.phase not in ("succeeded", "suspended") else ""
    if state.phase in ("succeeded", "failed"):
        took = duration(state.created, state.finished)
        return state.phase + reason, "done", f"took {took}" if took else ""
    if state.phase == "absent":
        return "absent", "", ""
    since = duration(state.created, now)
    pods = f"{counts.ready}/{expected_pods} ready" if counts is not None else ""
    shown = QUEUED if state.phase == "suspended" else state.phase + reason
    return shown, pods, f"{since} elapsed" if since else ""

def status_gke(session: Session) -> StatusReport:
    """Each step's JobSet, with the state, step and ending scripts/pipeline/run_state.py decides for every
    screen from it and the run's record."""
    from tpu_rl.scripts.pipeline.run_state import (ending_line, left_running_line, read_record, step_state,
                                                   step_total, train_progress)

    rows, notes = [], []
    jobs = step_jobs(session.spec, session.settings)
    record = read_record(session)
    recorded = {step: entry.get("status") for step, entry in (record.get("steps") or {}).items()}
    jobsets = {step: session.cluster.get_jobset(job.name) for step, job in jobs.items()}
    # The place of the run's waiting step (train or export; convert is shared, and carries no run), from the
    # queue `runs` reads the run's place from (Platform.queue).
    waits = [step for step, jobset in jobsets.items()
             if step != "convert" and jobset_state(jobset).phase == "suspended"]
    place = run_positions(session).get(session.paths.run_name) if waits else None
    for step, job in jobs.items():
        jobset = jobsets[step]
        state = jobset_state(jobset)
        if state.phase == "suspended":
            notes.append(admission_note(session, job, jobset, state))
        # A finished JobSet keeps its pods until its TTL, so the capacity it ran on stays readable.
        pods = (current_attempt(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"), state.restarts)
                if state.phase != "absent" else [])
        counts = pod_counts(pods) if state.phase in ("running", "suspended") else None
        cells = jobset_step_status(state, counts, job.expected_pods, session.now())
        shown = step_state(recorded.get(step), cells[0], state.phase in ("running", "suspended"),
                           place if step in waits else None)
        progress = ""
        if step == "train":
            found = train_progress(session, session.paths.run_name, _live_step(session, job, state))
            progress = training_now(found, step_total(session, record), session.clients.storage,
                                    session.paths.tensorboard, session.now)
        rows.append(StepStatus(step, shown, *cells[1:], session.output_state(step, state.phase == "succeeded"),
                               placement_of(pods) or "", progress))
    from tpu_rl.scripts.cloud.driver_job import Jobs
    from tpu_rl.scripts.pipeline.gke.driver import driver_state, steps_left_running
    from tpu_rl.scripts.pipeline.gke.driver_start import waiting_now

    driver = driver_state(session)
    waiting = waiting_now(session, Jobs(session.cluster), driver.name) if driver.phase == "running" else ""
    run = session.paths.run_name
    # a driver killed while a step runs: the line `runs` gives, in place of an ending (run_state.py)
    left = steps_left_running(session, run) if record.get("status") == "interrupted" else []
    return StatusReport(f"run {run}, JobSets {run}-<step> ({jobs['convert'].name} for convert)", rows,
                        "; ".join(notes), "; ".join(filter(None, [driver.line(), waiting, driver.drift()])),
                        left_running_line(session, run, record, left) or ending_line(session, record, unfollowed_end))

def admission_note(session: Session, job: StepJob, jobset: dict | None, state: JobSetState) -> str:
    """What a suspended step waits for, from its Kueue Workload and request; for a deactivated one, why,
    and the command that submits it again."""
    watch = CapacityWatch(session, job)
    admission = read_admission(session, jobset)
    if admission.workload.phase == "inactive" and not admission.workload.by_kueue:
        return f"{job.step}: {watch.deactivated_by_someone(admission)}"
    if admission.workload.phase == "inactive":
        return (f"{job.step}: {watch.deactivation(admission)}; it will not run: {session.command('run')} deletes "
                "and submits it again")
    return f"{job.step}: {watch.describe(state, admission, watch.mode(admission, []), [])}"

def _live_step(session: Session, job: StepJob, state: JobSetState) -> TrainProgress | None:
    """While train's JobSet runs, its step and loss from the head's log, read as `run` reads them."""
    if state.phase != "running":
        return None
    head = main_pod(current_attempt(session.cluster.list_pods(job.selector), state.restarts))
    log = session.cluster.read_log(head["metadata"]["name"], MAIN_CONTAINER, PROGRESS_LOG_LINES) if head else ""
    return last_train_step(log)


def live_train_step(session: Session, run: str) -> TrainProgress | None:
    """Platform.live_train_step: the step in the head's log of run `run`'s train JobSet while it runs."""
    spec = RunSpec.in_bucket(session.recipe, run)
    job = StepJob("train", jobset_name(spec, "train"), {}, main_pod_selector(spec, "train"), 0)
    return _live_step(session, job, jobset_state(session.cluster.get_jobset(job.name)))


def logs_gke(session: Session, step: Step, follow: bool, tail: int | None) -> Iterable[str]:
    # The names alone, not the manifests (which name the bucket): logs read only the cluster (recipes/settings/specs.py).
    pod = main_pod(session.cluster.list_pods(main_pod_selector(session.spec, step)))
    if pod is None:
        raise UserError(f"no pod for step {step} (JobSet {jobset_name(session.spec, step)} is absent, or its pods "
                        f"were removed after the 24 h TTL): see {session.command('status')}")
    name = pod["metadata"]["name"]
    if follow:
        from tpu_rl.scripts.pipeline.gke.log_stream import follow as follow_log

        return follow_log(session, name, MAIN_CONTAINER, tail)
    return session.cluster.read_log(name, MAIN_CONTAINER, tail).splitlines()
