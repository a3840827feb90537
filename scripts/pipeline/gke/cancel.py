"""`tpu-rl cancel` on GKE: delete the run's running JobSets, never another run's, and keep every output."""

from __future__ import annotations

from rich.markup import escape

from tpu_rl.jobs.k8s import RUN_LABEL, STEP_LABEL, jobset_name
from tpu_rl.recipes import Step, UserError
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.cloud.jobsets import jobset_state
from tpu_rl.scripts.pipeline.gke.shared_convert import convert_kept
from tpu_rl.scripts.pipeline.record import record_cancellation
from tpu_rl.scripts.pipeline.session import Session

ACTIVE = ("running", "suspended")  # what cancel stops: running, or waiting for Kueue

def cancel_targets(session: Session, step: Step | None) -> tuple[dict[str, str], list[str]]:
    """The JobSets cancel deletes, `{step: name}`, and a note for each it leaves.

    Train and export belong to the run: its JobSets are found by the run label (never by a name prefix,
    so another run's are never touched) and deleted when running or waiting for Kueue; a finished one is
    left to its TTL with its logs. The conversion is shared by every run of the same conversion identity,
    so its JobSet is deleted only when this run's record shows the run waiting on it and no other run's
    record does."""
    cluster, run = session.cluster, session.paths.run_name
    targets: dict[str, str] = {}
    notes: list[str] = []
    if step in (None, "convert"):
        name = jobset_name(session.spec, "convert")
        if jobset_state(cluster.get_jobset(name)).phase in ACTIVE:
            kept = convert_kept(session, name)
            if kept:
                notes.append(f"kept JobSet {name}: {kept}")
            else:
                targets["convert"] = name
    if step != "convert":
        selector = f"{RUN_LABEL}={run}" + (f",{STEP_LABEL}={step}" if step else "")
        for obj in cluster.list_jobsets(selector):
            labels = obj["metadata"].get("labels") or {}
            if jobset_state(obj).phase in ACTIVE:
                targets[labels.get(STEP_LABEL, obj["metadata"]["name"])] = obj["metadata"]["name"]
    return targets, notes

def cancel_gke(session: Session, step: Step | None, yes: bool) -> None:
    """Delete the run's driver, then its running JobSets (after a yes), record the cancellation, keep
    every output. While a driver runs only the whole run is cancelled (`cancel STEP` is refused). The driver goes first, and cancel waits until its pod is gone, so no JobSet is
    submitted by a dying driver; the JobSets are looked up again after it."""
    from tpu_rl.scripts.pipeline.gke.driver import driver_state, stop_driver

    console, run = session.console, session.paths.run_name
    driver = driver_state(session)
    if step and driver.phase == "running":
        # the driver drives every step: stopping it for one would leave the others' JobSets unwatched
        raise UserError(f"run {run} has its driver running: stopping it for {step} alone leaves the run's other "
                        f"steps running unwatched: use {session.command('cancel')}")
    targets, notes = cancel_targets(session, step)
    for note in notes:
        console.print(escape(note))
    what = f"{step} of run {run}" if step else f"run {run}"
    driving = driver.phase == "running"
    if not targets and not driving:
        console.print(f"nothing to cancel: no JobSet of {what} is running or waiting for Kueue "
                      f"(see {session.command('status')})")
        return
    names = ", ".join(targets.values())
    stopped = ([f"the run's driver Job {driver.name}"] if driving else []) + ([f"JobSet(s) {names}"] if names else [])
    kept = f"outputs in gs://{session.settings.gcs_bucket} are kept"
    if not session.cancel_confirmed(yes, f"delete {' and '.join(stopped)} of {what}", kept):
        return
    go_on = go_on_command(session)
    record_cancellation(session, targets,
                        {"jobsets": list(targets.values()), **({"driver": driver.name} if driving else {})})
    if driving:
        done = stop_driver(session)
        if done:
            console.print(done)
        # the driver's last write (its interrupted ending) may have come after the first mark
        record_cancellation(session, targets, {"jobsets": list(targets.values()), "driver": driver.name}, again=True)
        more, _ = cancel_targets(session, step)  # what the driver submitted between the look and its end
        extra = {key: name for key, name in more.items() if name not in targets.values()}
        if extra:
            record_cancellation(session, extra, {"jobsets": list(extra.values())})
        targets = {**targets, **extra}
    for name in targets.values():
        session.cluster.delete_jobset(name)
        console.print(f"deleted JobSet {name}")
    console.print(f"cancelled {what}: {kept}; {go_on} goes on from them (training from its last checkpoint)")


def go_on_command(session: Session) -> str:
    """The `tpu-rl run` that resumes the run: the command line its record says started it (with every
    --set, --rewards and --data-processor it had; cancel itself takes no files), else this run's."""
    import shlex

    try:
        command = (gcs.read_json(session.clients.storage(), session.paths.run_record) or {}).get("command") or []
    except ApiError:  # the hint falls back to what cancel was given
        command = []
    brought = any(option in command for option in ("--rewards", "--data-processor"))
    if brought and len(command) > 2 and command[1] == "run":
        return f"`tpu-rl {shlex.join(command[1:])}`"
    return session.command("run")
