"""`tpu-rl eval RECIPE --run NAME [--step N]`: evaluate a saved checkpoint of a run on the held-out set, on
the same slice shape, and add the result to that run's record (phase "checkpoint").

How (jobs/evaluate.py has the MaxText sources): submit the train JobSet of a scratch run
(tpu_rl.jobs.evaluate.eval_run_name) whose load_parameters_path is the checkpoint's params, read the "Pre RL
Training" line its head logs, and delete the JobSet at once, before it trains on. Whatever the command
created is deleted again, after the result is recorded and on every failure: the scratch run's JobSet,
its ConfigMap of --rewards/--data-processor files, and its directory in the bucket (tensorboard, a
checkpoint of a step trained before the JobSet was gone). Each is the scratch run's own: named after it
and carrying its tpu-rl/run label, or under its run directory, which holds no run.json (a real run of
that name would, and is refused). The token Secret is shared by every run and stays.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Callable, TypeGuard

from tpu_rl.jobs.evaluate import eval_sets, eval_spec
from tpu_rl.recipes import UserError
from tpu_rl.recipes.outcome import ApiError, Interrupted, StepFailed
from tpu_rl.recipes.runs.reward_names import repeated_name
from tpu_rl.recipes.runs.user_files import UserFile, configmap_name
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch
from tpu_rl.scripts.pipeline.gke.eval_cost import EVAL_WAIT_MINUTES
from tpu_rl.scripts.pipeline.gke.log_stream import LogCursor
from tpu_rl.scripts.pipeline.gke.steps import MAIN_CONTAINER, PROGRESS_LOG_LINES, main_pod, step_jobs
from tpu_rl.scripts.pipeline.gke.submit import fill_token_secret, put_user_files
from tpu_rl.scripts.pipeline.gke.wait import wait_for_jobset
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.rundata.evaluation import Evaluation, describe, parse_evaluations




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


def as_recorded(session: Session, record: dict, sets: tuple[str, ...] = ()) -> Session:
    """The session with the run's --set items then eval's `sets` (tpu_rl.jobs.evaluate.eval_sets), and its
    --rewards/--data-processor files from the copies beside run.json, each checked against the sha256 the
    record keeps: the evaluation runs the run's recipe. `session.spec` has no --set items yet."""
    run = session.paths.run_name
    spec = session.spec.with_sets(eval_sets(session.recipe, run, tuple(
        (record.get("overrides") or {}).get("set") or ()), tuple(sets)))
    files = record.get("files") or {}
    if files and not spec.user_files:
        storage, kept = session.clients.storage(), []
        for kind, entry in files.items():
            content = gcs.read_text(storage, entry["copy"])
            if content is None or UserFile(kind, entry["name"], content).sha256 != entry.get("sha256"):
                why = "is missing" if content is None else "differs from the file it trained with (sha256)"
                raise UserError(f"run {run}'s --{kind} copy {entry['copy']} {why}: put the file back there "
                                "to evaluate the run")
            kept.append(UserFile(kind, entry["name"], content,
                                 tuple(name for name in (entry.get("functions") or "").split(",") if name)))
        for file in kept:  # run refuses a repeat now; a run recorded before trained with it
            if (twice := repeated_name(file.functions)) is not None:
                session.console.print(f"[yellow]![/] eval: run {run} weighs reward {twice} twice; kept, as trained")
        spec = spec.with_user_files(tuple(kept), recorded=True)
    return dataclasses.replace(session, spec=spec) if spec is not session.spec else session


def _scratch_objects(scratch: Session, job) -> list[tuple[str, Callable[[], object]]]:
    """What of the scratch run exists, as (what, delete) pairs: only objects named after it that carry its
    tpu-rl/run label, and its run directory."""
    cluster, run = scratch.cluster, scratch.paths.run_name
    found: list[tuple[str, Callable[[], object]]] = []

    def labelled(obj: dict | None) -> TypeGuard[dict]:
        return obj is not None and (obj.get("metadata", {}).get("labels") or {}).get("tpu-rl/run") == run

    jobset = cluster.get_jobset(job.name)
    if labelled(jobset):
        uid = jobset["metadata"].get("uid")
        found.append((f"JobSet {job.name}", lambda: cluster.delete_jobset(job.name, uid)))
    configmap = configmap_name(run)
    if labelled(cluster.get_configmap(configmap)):
        found.append((f"ConfigMap {configmap}", lambda: cluster.delete_configmap(configmap)))
    storage, prefix = scratch.clients.storage(), scratch.paths.run_root
    if gcs.object_names(storage, prefix):
        found.append((prefix, lambda: gcs.delete_prefix(storage, prefix)))
    return found


def _clean_up(scratch: Session, job, failing: bool) -> None:
    """Delete the scratch run's objects; when the eval is failing anyway, a failed delete only says what
    is left, so the first error is the one reported."""
    try:
        for what, delete in _scratch_objects(scratch, job):
            delete()
            scratch.console.print(f"eval: deleted {what}")
    except ApiError as error:
        if not failing:
            raise
        scratch.console.print(f"[yellow]eval: could not clean up ({error}); delete what is left of the "
                              f"scratch run {scratch.paths.run_name} by hand[/]")


def eval_gke(session: Session, step: int | None, sets: tuple[str, ...] = ()) -> Evaluation:
    """Evaluate checkpoint `step` (default: the latest) of the session's run with eval's --set items
    `sets` after the run's own; record and return the result."""
    storage, paths, run = session.clients.storage(), session.paths, session.paths.run_name
    record = gcs.read_json(storage, paths.run_record)
    if record is None:
        raise UserError(f"run {run} has no {paths.run_record}: pass a name `tpu-rl runs {session.recipe.name}` lists")
    session = as_recorded(session, record, sets)
    step = _checkpoint_step(session, step)
    scratch = dataclasses.replace(session, spec=eval_spec(session.spec, session.settings, step))
    if gcs.exists(storage, scratch.paths.run_record):
        raise UserError(f"{scratch.paths.run_record} exists: {scratch.paths.run_name}, the name eval gives its "
                        "scratch run, is a real run's, whose files eval would delete; rename that run")
    job = step_jobs(scratch.spec, session.settings)["train"]
    if session.spend is not None:  # before anything is made: asked here, once (recipes/costs/consent.py)
        session.spend.require(session.spend_ask)
    fill_token_secret(scratch)
    evaluation, failing = None, True
    try:
        _clean_up(scratch, job, failing=False)  # an earlier evaluation's leftovers: tunix would resume them
        if scratch.spec.user_files:
            put_user_files(scratch)
        session.cluster.create_jobset(job.manifest)
        session.console.print(f"eval: submitted JobSet {job.name} to evaluate checkpoint {step} of run {run} "
                              f"(load_parameters_path={scratch.spec.load_parameters})")
        session.console.print("eval: waiting for admission and the slice (CAPACITY_WAIT), then up to "
                              f"{EVAL_WAIT_MINUTES} min")
        evaluation = _wait_for_evaluation(scratch, job, step)
        record = gcs.read_json(storage, paths.run_record) or {}
        record.setdefault("evaluations", []).append({**evaluation.as_record(),
                                                     "source": f"tpu-rl eval ({job.name})"})
        gcs.write_json(storage, paths.run_record, record)
        failing = False
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: the evaluation of checkpoint {step} of run {run} was stopped") from None
    finally:
        _clean_up(scratch, job, failing)
    session.console.print(f"run {run}: {describe(evaluation)}")
    return evaluation


def _wait_for_evaluation(session: Session, job, step: int) -> Evaluation:
    """The Pre line the scratch JobSet's head logs, as the checkpoint's evaluation; StepFailed when the
    JobSet ends without it or EVAL_WAIT_MINUTES pass after the attempt had all its pods ready (the queue
    and the slice's scale-up before that are bounded by CAPACITY_WAIT, as for the train step)."""
    watch = CapacityWatch(session, job)
    started: dict[int, datetime] = {}  # by attempt (JobSet restarts): when it had all its pods ready

    cursors: dict[str, LogCursor] = {}  # by head pod (a restarted attempt's head is a new pod)

    def head_log(whole: bool = False) -> str:
        """The head's lines not read yet (from the kubelet's time of the last one read: log_stream.LogCursor),
        or `whole`: the Pre line can scroll out of the PROGRESS_LOG_LINES tail between polls (qwen3 runs with
        debug=True), and reading the whole log at each poll grows with it. A failed read is empty: the next
        poll reads again from the same line."""
        try:
            head = main_pod(session.cluster.list_pods(job.selector))
            if head is None:
                return ""
            name = head["metadata"]["name"]
            if whole:
                return session.cluster.read_log(name, MAIN_CONTAINER)
            return "".join(f"{line}\n" for line in cursors.setdefault(name, LogCursor()).read(
                session.cluster, name, MAIN_CONTAINER))
        except ApiError as error:
            session.console.print(f"[yellow]![/] eval: could not read the head's log ({error}); trying again")
            return ""

    def pre_of(text: str) -> Evaluation | None:
        pre = [found for found in parse_evaluations(text) if found.phase == "pre"]
        return dataclasses.replace(pre[0], phase="checkpoint", step=step) if pre else None

    def on_head_log(text: str) -> None:
        found = pre_of(text)
        if found is None and len(text.splitlines()) >= PROGRESS_LOG_LINES:
            found = pre_of(head_log())
        if found is not None:
            raise _Evaluated(found)
        if watch.ready_attempt is None or watch.ready_attempt != watch.restarts:
            return  # the head runs before its slice is up: CapacityWatch bounds that wait
        if watch.ready_attempt not in started:
            started[watch.ready_attempt] = session.now()
            session.console.print(f"eval: the slice is up; waiting up to {EVAL_WAIT_MINUTES} min for the "
                                  "head's Pre RL Training line")
        if (session.now() - started[watch.ready_attempt]).total_seconds() > EVAL_WAIT_MINUTES * 60:
            raise StepFailed(f"JobSet {job.name} logged no evaluation within {EVAL_WAIT_MINUTES} min, so "
                             f"it is deleted; see `{job.kubectl_logs}` (gone with its pods)")

    try:
        # no stall bound: EVAL_WAIT_MINUTES, counted from the same moment, already ends it
        wait_for_jobset(session, job, follow_logs=False, watch=watch, on_head_log=on_head_log, stalls=False)
    except _Evaluated as done:
        return done.evaluation
    evaluation = pre_of(head_log(whole=True))  # it ended first: read the whole log before failing
    if evaluation is None:
        raise StepFailed(f"JobSet {job.name} ended without logging its evaluation; see `{job.kubectl_logs}`")
    return evaluation
