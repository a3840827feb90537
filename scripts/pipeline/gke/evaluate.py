"""`tpu-rl eval RECIPE --run NAME [--step N]`: evaluate a saved checkpoint of a run on the held-out set, on
the same slice shape, and add the result to that run's record (phase "checkpoint").

How (jobs/evaluate.py has the MaxText and tunix sources): copy the checkpoint into a scratch run
(jobs.evaluate.eval_run_name), submit that scratch run's train JobSet, read the "Pre RL Training" line its head logs after
restoring the checkpoint, and delete the JobSet at once, before it trains the one step tunix always runs.
"""

from __future__ import annotations

import dataclasses

from jobs.evaluate import eval_recipe
from jobs.paths import ArtifactPaths
from recipes import UserError
from scripts.cloud import gcs
from scripts.outcome import Interrupted, StepFailed
from scripts.pipeline.evaluation import Evaluation, describe, parse_evaluations
from scripts.pipeline.gke.steps import MAIN_CONTAINER, PROGRESS_LOG_LINES, main_pod, step_jobs
from scripts.pipeline.gke.submit import fill_token_secret, put_user_files
from scripts.pipeline.gke.wait import wait_for_jobset
from scripts.pipeline.session import Session


# Every wait has an end: restoring the checkpoint, compiling and one evaluation of the held-out set take
# minutes; past this the JobSet is stopped and the eval fails, so a hung trainer is not paid for.
EVAL_WAIT_MINUTES = 90


class _Evaluated(Exception):
    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__("evaluated")
        self.evaluation = evaluation


def _checkpoint_step(session: Session, step: int | None) -> int:
    steps = gcs.finished_checkpoint_steps(session.clients.storage(), session.paths)
    if not steps:
        raise UserError(f"run {session.paths.run_name} has no finished checkpoint in {session.paths.actor_checkpoints}: "
                        f"train it first ({session.command('run')})")
    if step is None:
        return steps[0]
    if step not in steps:
        raise UserError(f"--step {step}: run {session.paths.run_name} has no finished checkpoint {step}; it has "
                        f"{', '.join(map(str, sorted(steps)))}")
    return step


def as_recorded(session: Session, record: dict) -> Session:
    """The session with the run's --set items and its --rewards/--data-processor files (from the copies
    beside run.json) when the command named the run without them: the evaluation runs the run's recipe."""
    from recipes.runs import with_sets
    from recipes.user_files import UserFile, with_user_files

    recipe = session.recipe
    sets = tuple((record.get("overrides") or {}).get("set") or ())
    if sets and not recipe.sets:
        recipe = with_sets(recipe, sets)
    files = record.get("files") or {}
    if files and not recipe.user_files:
        storage = session.clients.storage()
        recipe = with_user_files(recipe, tuple(
            UserFile(kind, entry["name"], gcs.read_text(storage, entry["copy"]) or "",
                     tuple(name for name in (entry.get("functions") or "").split(",") if name))
            for kind, entry in files.items()))
    return dataclasses.replace(session, recipe=recipe) if recipe is not session.recipe else session


def eval_gke(session: Session, step: int | None) -> Evaluation:
    """Evaluate checkpoint `step` (default: the latest) of the session's run; record and return the result."""
    storage, paths, run = session.clients.storage(), session.paths, session.paths.run_name
    record = gcs.read_json(storage, paths.run_record)
    if record is None:
        raise UserError(f"run {run} has no {paths.run_record}: pass a name `tpu-rl runs {session.recipe.name}` lists")
    session = as_recorded(session, record)
    step = _checkpoint_step(session, step)
    scratch = dataclasses.replace(session, recipe=eval_recipe(session.recipe, run, step))
    target = f"{ArtifactPaths(scratch.recipe, session.settings).actor_checkpoints}{step}/"
    if step not in gcs.finished_checkpoint_steps(storage, scratch.paths):
        copied = gcs.copy_prefix(storage, f"{paths.actor_checkpoints}{step}/", target)
        session.console.print(f"eval: copied checkpoint {step} of run {run} ({copied} objects) to {target}")
    job = step_jobs(scratch.recipe, session.settings)["train"]
    fill_token_secret(scratch)
    if scratch.recipe.user_files:
        put_user_files(scratch)
    if session.cluster.get_jobset(job.name) is not None:
        session.cluster.delete_jobset(job.name)  # an earlier evaluation of this checkpoint
    session.cluster.create_jobset(job.manifest)
    session.console.print(f"eval: submitted JobSet {job.name} to evaluate checkpoint {step} of run {run}")

    started = session.now()

    def head_log() -> str:
        """The head's whole log: the Pre line can scroll out of the PROGRESS_LOG_LINES tail between polls
        (qwen3 runs with debug=True)."""
        head = main_pod(session.cluster.list_pods(job.selector))
        return session.cluster.read_log(head["metadata"]["name"], MAIN_CONTAINER) if head else ""

    def pre_of(text: str) -> Evaluation | None:
        pre = [found for found in parse_evaluations(text) if found.phase == "pre"]
        return dataclasses.replace(pre[0], phase="checkpoint", step=step) if pre else None

    def on_head_log(text: str) -> None:
        found = pre_of(text)
        if found is None and len(text.splitlines()) >= PROGRESS_LOG_LINES:
            found = pre_of(head_log())
        if found is not None:
            raise _Evaluated(found)
        if (session.now() - started).total_seconds() > EVAL_WAIT_MINUTES * 60:
            session.cluster.delete_jobset(job.name)
            raise StepFailed(f"JobSet {job.name} logged no evaluation within {EVAL_WAIT_MINUTES} min, so "
                             f"it was deleted; see `{job.kubectl_logs}` (gone with its pods)")

    try:
        wait_for_jobset(scratch, job, follow_logs=False, on_head_log=on_head_log)
    except _Evaluated as done:
        evaluation = done.evaluation
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: JobSet {job.name} keeps running; stop it with `kubectl delete jobset "
                          f"{job.name}`") from None
    else:  # it ended first: read the whole log before failing
        evaluation = pre_of(head_log())
        if evaluation is None:
            raise StepFailed(f"JobSet {job.name} ended without logging its evaluation; see "
                             f"`{job.kubectl_logs}`")
    session.cluster.delete_jobset(job.name)
    session.console.print(f"eval: deleted JobSet {job.name} (its evaluation is logged; training on is not needed)")
    record = gcs.read_json(storage, paths.run_record) or {}
    record.setdefault("evaluations", []).append({**evaluation.as_record(), "source": f"tpu-rl eval ({job.name})"})
    gcs.write_json(storage, paths.run_record, record)
    session.console.print(f"run {run}: {describe(evaluation)}")
    return evaluation

