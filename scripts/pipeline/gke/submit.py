"""`tpu-rl run` on GKE: fill the token Secret, submit each step's JobSet in order, wait for it, verify its
output in GCS and record the run."""

from __future__ import annotations

from rich.markup import escape

from jobs.k8s import JOBSET_NAME_LABEL
from recipes import Step
from recipes.conventions import HF_TOKEN_ENV, HF_TOKEN_K8S_SECRET
from scripts.cloud import hf_token
from scripts.cloud.kube_objects import capacity_of
from scripts.outcome import ApiError, Interrupted
from scripts.pipeline.gke.plan import Action, plan_gke, show_dry_run
from scripts.pipeline.gke.steps import StepJob, step_jobs
from scripts.pipeline.gke.wait import wait_for_jobset
from scripts.pipeline.record import RunRecord
from scripts.pipeline.session import Session, verify_output


def run_gke(session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
            dry_run: bool = False, show_manifests: bool = False) -> None:
    console = session.console
    jobs = step_jobs(session.recipe, session.settings)
    if dry_run and session.confirm is not None:
        session.confirm = lambda question: True  # the plan as if the question were answered yes; it says so
    try:
        record = RunRecord.open(session)
        actions = plan_gke(session, jobs, steps, replace)
    except ApiError as error:
        raise ApiError(f"{error}; nothing was submitted") from None
    if dry_run:
        show_dry_run(session, jobs, actions, replace, show_manifests)
        return
    if any(action.kind in ("submit", "replace") for action in actions):
        token = hf_token.read_token(session.clients.secrets(), session.settings)
        session.cluster.ensure_secret(HF_TOKEN_K8S_SECRET, HF_TOKEN_ENV, token)
        del token
        console.print(f"Kubernetes Secret {HF_TOKEN_K8S_SECRET} filled from Secret Manager "
                      f"'{session.settings.hf_token_secret}'")
    console.print(f"run {session.paths.run_name}; plan: "
                  + ", ".join(f"{action.step} {action.kind}" for action in actions))
    record.start({action.step: action.kind for action in actions}, {step: job.name for step, job in jobs.items()})
    try:
        _run_actions(session, jobs, actions, steps, record, follow_logs)
    except BaseException as error:
        record.finish(error)
        raise
    record.finish(None)
    session.report_done(steps)

def _run_actions(session: Session, jobs: dict[str, StepJob], actions: list[Action], steps: tuple[Step, ...],
                 record: RunRecord, follow_logs: bool) -> None:
    console = session.console
    for action in actions:
        job = jobs[action.step]
        if action.kind == "skip":
            console.print(f"[green]✓[/] {action.step}: {action.why}, skipping")
            continue
        if action.kind == "replace":
            console.print(f"{action.step}: deleting {escape(action.why)} (--replace)")
            session.cluster.delete_jobset(job.name)
        if action.kind in ("submit", "replace"):
            session.cluster.create_jobset(job.manifest)
            console.print(f"{action.step}: submitted JobSet {job.name}")
        else:
            console.print(f"{action.step}: {action.why}; reattaching to it (not submitting a duplicate)")
        record.step(action.step, "running")
        reattach = session.command("run", "--steps", ",".join(steps[steps.index(action.step):]))
        try:
            wait_for_jobset(session, job, follow_logs)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted: JobSet {job.name} keeps running on the cluster. Reattach with {reattach}; logs: "
                f"{session.logs_hint(job.step)}; stop it with {session.command('cancel')}") from None
        except ApiError as error:
            raise ApiError(f"lost contact with the cluster while waiting for {job.step} ({error}); JobSet "
                           f"{job.name} keeps running: rerun {reattach} to reattach") from None
        verify_output(session, action.step, steps)
        record.step(action.step, "succeeded", capacity=_capacity(session, job))

def _capacity(session: Session, job: StepJob) -> str | None:
    """The capacity mode the step's pods ran on, for the run record; None when unknown."""
    try:
        return capacity_of(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"))
    except ApiError:
        return None
