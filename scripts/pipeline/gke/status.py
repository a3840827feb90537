"""`tpu-rl status` and `logs` on GKE."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL, MAIN_CONTAINER, jobset_name, main_pod_selector
from tpu_rl.recipes import Step, UserError
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.scripts.cloud.kube_objects import JobSetState, PodCounts, current_attempt, jobset_state, placement_of, pod_counts
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch, read_admission
from tpu_rl.scripts.pipeline.gke.steps import PROGRESS_LOG_LINES, StepJob, duration, main_pod, step_jobs
from tpu_rl.scripts.pipeline.progress import training_now
from tpu_rl.scripts.pipeline.session import Session, StatusReport, StepStatus
from tpu_rl.scripts.rundata.progress import last_train_step


# A suspended JobSet waits in Kueue's queue: said so, without JobSet's own reason for it (SuspendedJobs),
# which says nothing more (issue 37: `suspended (SuspendedJobs)`); the status note says what it waits for.
QUEUED = "queued in Kueue"


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
    rows, notes = [], []
    jobs = step_jobs(session.spec, session.settings)
    for step, job in jobs.items():
        jobset = session.cluster.get_jobset(job.name)
        state = jobset_state(jobset)
        if state.phase == "suspended":
            notes.append(admission_note(session, job, jobset, state))
        # A finished JobSet keeps its pods until its TTL, so the capacity it ran on stays readable.
        pods = (current_attempt(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"), state.restarts)
                if state.phase != "absent" else [])
        counts = pod_counts(pods) if state.phase in ("running", "suspended") else None
        rows.append(StepStatus(step, *jobset_step_status(state, counts, job.expected_pods, session.now()),
                               session.output_state(step, state.phase == "succeeded"), placement_of(pods) or "",
                               _training_now(session, job, state) if step == "train" else ""))
    from tpu_rl.scripts.cloud.kube_jobs import Jobs
    from tpu_rl.scripts.pipeline.gke.driver import driver_state
    from tpu_rl.scripts.pipeline.gke.driver_start import waiting_now

    driver = driver_state(session)
    waiting = waiting_now(session, Jobs(session.cluster), driver.name) if driver.phase == "running" else ""
    run = session.paths.run_name
    return StatusReport(f"run {run}, JobSets {run}-<step> ({jobs['convert'].name} for convert)", rows,
                        "; ".join(notes), "; ".join(filter(None, [driver.line(), waiting, driver.drift()])))

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

def _training_now(session: Session, job: StepJob, state: JobSetState) -> str:
    """While train runs, its step and loss from the head's log and its reward, read as `run` reads them."""
    if state.phase != "running":
        return ""
    head = main_pod(current_attempt(session.cluster.list_pods(job.selector), state.restarts))
    log = session.cluster.read_log(head["metadata"]["name"], MAIN_CONTAINER, PROGRESS_LOG_LINES) if head else ""
    return training_now(last_train_step(log), trained_steps(session.recipe), session.clients.storage,
                        session.paths.tensorboard, session.now)


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
