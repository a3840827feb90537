"""`tpu-rl run` on GKE: fill the token Secret, submit each step's JobSet in order, wait for it, verify its
output in GCS and record the run."""

from __future__ import annotations

from rich.markup import escape

from tpu_rl.jobs import user_files_configmap
from tpu_rl.jobs.k8s import JOBSET_NAME_LABEL, MAIN_CONTAINER
from tpu_rl.recipes import Step
from tpu_rl.recipes.conventions import HF_TOKEN_ENV, HF_TOKEN_K8S_SECRET
from tpu_rl.recipes.outcome import ApiError, Interrupted, StepFailed
from tpu_rl.recipes.runs.evaluation import evaluates
from tpu_rl.scripts.cloud import gcs, hf_token
from tpu_rl.scripts.cloud.cluster import JobSetExists
from tpu_rl.scripts.cloud.jobsets import capacity_of, zone_of
from tpu_rl.scripts.pipeline.accuracy import EvaluationWatch, fill_after_train, fill_from_cloud_logging
from tpu_rl.scripts.pipeline.gke.admission import sweep_train
from tpu_rl.scripts.pipeline.gke.capacity import replaced_meanwhile, wait_with_capacity
from tpu_rl.scripts.pipeline.gke.plan import Action, plan_gke, show_dry_run, spec_change
from tpu_rl.scripts.pipeline.gke.steps import StepJob, main_pod, step_jobs
from tpu_rl.scripts.pipeline.gke.output import LogUnread
from tpu_rl.scripts.pipeline.gke.shared_convert import convert_kept
from tpu_rl.scripts.pipeline.record import RunRecord, ending_run
from tpu_rl.scripts.pipeline.session import Session, export_checkpoint, verify_output


def run_gke(session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
            dry_run: bool = False, show_manifests: bool = False, driven: bool = False) -> None:
    """The pipeline: what the run's driver runs in the cluster (`driven`: the attaching `run` filled the
    token Secret and the user-files ConfigMap, prepare_run), and what a dry run shows."""
    console = session.console
    try:
        export_step, _ = export_checkpoint(session)
    except ApiError as error:
        raise ApiError(f"{error}; nothing was submitted", transient=error.transient) from None
    jobs = step_jobs(session.spec, session.settings, export_step)
    jobs["train"] = sweep_train(session, jobs["train"])  # a sweep's runs queue for the first mode's slice
    rendered = dict(jobs)  # as rendered, Kueue picks by quota order: what `run` submits (plan pins `jobs`)
    if dry_run and session.confirm is not None:
        session.confirm = lambda question: True  # the plan as if the question were answered yes; it says so
    try:
        record = RunRecord.open(session)
        actions = plan_gke(session, jobs, steps, replace)
    except ApiError as error:
        raise ApiError(f"{error}; nothing was submitted", transient=error.transient) from None
    if dry_run:
        exported = next((action for action in actions if action.step == "export" and action.kind != "skip"), None)
        note = (f"(export at step {session.recipe.last_step} is an upper bound: run exports the step training "
                "reached)") if exported and export_step is None else ""
        show_dry_run(session, rendered, actions, replace, note, show_manifests)  # what `run` submits
        return
    if not driven and any(action.kind in ("submit", "replace") for action in actions):
        fill_token_secret(session)
    console.print(f"run {session.paths.run_name}; plan: "
                  + ", ".join(f"{action.step} {action.kind}" for action in actions))
    record.start({action.step: action.kind for action in actions}, {step: job.name for step, job in jobs.items()})
    with ending_run(session, record, steps):
        _run_actions(session, jobs, rendered, actions, steps, record, follow_logs, driven)


def prepare_run(session: Session, steps: tuple[Step, ...], replace: bool) -> bool:
    """What the attaching `run` does before it creates the driver: the checks and the plan `run` made
    (a question answered here, where there is a terminal), the token Secret and the user-files ConfigMap,
    which the driver may not read or write. Returns `replace` as answered: yes to a question means it."""
    answers: list[bool] = []
    ask = session.confirm
    if ask is not None:
        def confirm(question: str) -> bool:
            answers.append(ask(question))
            return answers[-1]
        session.confirm = confirm
    try:
        export_step, _ = export_checkpoint(session)
        RunRecord.open(session)
        actions = plan_gke(session, step_jobs(session.spec, session.settings, export_step), steps, replace)
    except ApiError as error:
        raise ApiError(f"{error}; nothing was submitted", transient=error.transient) from None
    finally:
        session.confirm = ask
    submitted = [action.step for action in actions if action.kind in ("submit", "replace")]
    if submitted:
        fill_token_secret(session)
    if session.spec.user_files and "train" in steps:
        put_user_files(session)
    return replace or any(answers)


def fill_token_secret(session: Session) -> None:
    """The Kubernetes Secret the steps read HF_TOKEN from, filled from Secret Manager (never printed)."""
    token = hf_token.read_token(session.clients, session.settings)
    session.cluster.ensure_secret(HF_TOKEN_K8S_SECRET, HF_TOKEN_ENV, token)
    del token
    session.console.print(f"Kubernetes Secret {HF_TOKEN_K8S_SECRET} filled from Secret Manager "
                          f"'{session.settings.hf_token_secret}'")


def _run_actions(session: Session, jobs: dict[Step, StepJob], rendered: dict[Step, StepJob], actions: list[Action],
                 steps: tuple[Step, ...], record: RunRecord, follow_logs: bool, driven: bool = False) -> None:
    """`jobs` pinned as the JobSets on the cluster are (plan.py), which a reattaching `run` follows;
    `rendered` as this run submits them: from the first mode, Kueue's quota order (a reservation first)."""
    console = session.console
    for action in actions:
        job = jobs[action.step] if action.kind == "attach" else rendered[action.step]
        if action.kind == "skip":
            console.print(f"[green]✓[/] {action.step}: {action.why}, skipping")
            if action.step == "train":
                mark_train_finished(session)  # the plan may have verified it by its succeeded JobSet
                _fill_skipped_train(session, record)
            continue
        fields: dict[str, object] = {}
        if action.step == "export":
            # Training has finished by now: export converts the step it reached, read from the bucket.
            step, why = export_checkpoint(session)
            if action.kind != "attach":
                job = rendered["export"] = step_jobs(session.spec, session.settings, step)["export"]
            fields["checkpoint"] = {"step": step, "why": why}
        if action.kind == "replace":
            console.print(f"{action.step}: deleting {escape(action.why)} (--replace)")
            # That JobSet only (its UID, as plan.py read it): not one a concurrent `run --replace` submitted.
            if not session.cluster.delete_jobset(job.name, action.uid or None):
                raise StepFailed(replaced_meanwhile(session, job, f"step {action.step} was not submitted"))
        if action.kind in ("submit", "replace"):
            if action.step == "train" and session.spec.user_files and not driven:
                put_user_files(session)
            if _submitted(session, job):
                console.print(f"{action.step}: submitted JobSet {job.name}")
            else:
                console.print(f"{action.step}: JobSet {job.name} was submitted meanwhile with this run's spec (by "
                              "an identical `run`); reattaching to it (not submitting a duplicate)")
                fields["submitted"] = action.step != "convert"  # the shared convert: another run's (runs.py)
        else:
            console.print(f"{action.step}: {action.why}; reattaching to it (not submitting a duplicate)")
        record.step(action.step, "running", **fields)
        reattach = session.command("run", "--steps", ",".join(steps[steps.index(action.step):]))
        watch = EvaluationWatch(session, record) if action.step == "train" else None
        try:
            wait_with_capacity(session, job, follow_logs, record, reattach,
                               on_head_log=(lambda text: watch.see(text, tail=True)) if watch else None,
                               first=rendered[action.step])
        except StepFailed:
            if watch:
                fill_after_train(session, watch, _head_log(session, job))
            raise
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted: JobSet {job.name} keeps running on the cluster. Reattach with {reattach}; logs: "
                f"{session.logs_hint(job.step)}; stop it with {session.command('cancel')}") from None
        except LogUnread as error:
            then, transient = _unwatched(session, job, error.uid, reattach) if session.driven else \
                (f"JobSet {job.name} keeps running: rerun {reattach} to reattach", False)
            raise ApiError(f"lost contact with the cluster while waiting for {job.step} ({error}); {then}",
                           transient=transient) from None
        except ApiError as error:
            raise ApiError(f"lost contact with the cluster while waiting for {job.step} ({error}); JobSet "
                           f"{job.name} keeps running: rerun {reattach} to reattach", transient=error.transient) from None
        if action.step == "train":
            mark_train_finished(session)  # train_rl exited 0: it finished, whatever step it reached
        if watch:
            fill_after_train(session, watch, _head_log(session, job))
        verify_output(session, action.step, steps)
        record.step(action.step, "succeeded", **_capacity(session, job))


# What a rerun of a step whose JobSet the driver deleted does (_unwatched): train resumes from its last
# checkpoint; convert and export keep nothing of the deleted attempt.
RERUN_AFTER_DELETION = {"train": "its checkpoints are kept: rerun {} to resume",
                        "convert": "the conversion starts over: rerun {} to convert again",
                        "export": "the export starts over: rerun {} to export again"}


def _unwatched(session: Session, job: StepJob, uid: str, reattach: str) -> tuple[str, bool]:
    """The driver lost sight of the step, and nobody watches its JobSet once the driver ends: it deletes
    that JobSet (by its UID: not one of its name another `run` submitted meanwhile) so that it does not bill
    unwatched, except a conversion other runs may wait on (cancel's rule, convert_kept). What it did and what
    a rerun does, and whether the driver's ending is transient: a delete that failed for a reason that may
    pass leaves the JobSet billing, so the Job starts the driver again to reattach to it."""
    kept = f"JobSet {job.name} keeps running"
    try:
        shared = convert_kept(session, job.name) if job.step == "convert" else None
        if shared:
            return f"{kept} ({shared}): rerun {reattach} to reattach", False
        if not session.cluster.delete_jobset(job.name, uid or None):
            return replaced_meanwhile(session, job, "nothing was deleted"), False
    except ApiError as error:
        return (f"{kept}: deleting it failed ({error}); stop it with {session.command('cancel')}, or rerun "
                f"{reattach}", error.transient)
    return (f"JobSet {job.name} was deleted so that it does not bill unwatched; "
            f"{RERUN_AFTER_DELETION[job.step].format(reattach)}", False)


def _submitted(session: Session, job: StepJob) -> bool:
    """Submit the step's JobSet: True, or False when an identical `run` submitted the same spec between
    this run's plan and now (then this run attaches to it, as its plan would have). A JobSet with
    another spec is still a conflict (JobSetExists)."""
    try:
        session.cluster.create_jobset(job.manifest)
        return True
    except JobSetExists as error:
        if error.existing is None or spec_change(job, error.existing) is not None:
            raise
        return False


def mark_train_finished(session: Session) -> None:
    """Write the run's train progress marker (as the VM startup script does after train_rl exited 0), so a
    later `run` takes a checkpoint below the computed step for the trained model, not for an interruption."""
    storage, marker = session.clients.storage(), session.paths.progress_marker("train")
    if not gcs.exists(storage, marker):
        gcs.write_text(storage, marker, session.now().isoformat(timespec="seconds") + "\n")


def put_user_files(session: Session) -> None:
    """The run's --rewards/--data-processor files as the ConfigMap its train head mounts (recipes/runs/user_files.py)."""
    configmap = user_files_configmap(session.paths)
    if configmap is None:  # a run without files mounts none
        return
    session.cluster.ensure_configmap(configmap)
    held = ", ".join(configmap["data"])
    session.console.print(f"train: ConfigMap {configmap['metadata']['name']} holds {held}")


def _fill_skipped_train(session: Session, record: RunRecord) -> None:
    """A train step done without `run` attached to its end (or its record written before evaluations were
    kept) gets its evaluations from Cloud Logging, once."""
    watch = EvaluationWatch(session, record)
    if evaluates(session.recipe) and not watch.has_before_and_after():
        fill_from_cloud_logging(session, watch)


def _head_log(session: Session, job: StepJob) -> str | None:
    """The whole log of the step's main container, or None when its pod is gone or cannot be read."""
    try:
        pod = main_pod(session.cluster.list_pods(job.selector))
        return session.cluster.read_log(pod["metadata"]["name"], MAIN_CONTAINER) if pod else None
    except ApiError:
        return None


def _capacity(session: Session, job: StepJob) -> dict[str, str | None]:
    """The capacity mode (and zone, when the pods' flavor names one) the step's pods ran on, for the run
    record; None when unknown."""
    try:
        pods = session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}")
    except ApiError:
        return {"capacity": None}
    zone = zone_of(pods)
    return {"capacity": capacity_of(pods), **({"zone": zone} if zone else {})}
