"""`tpu-rl status` and `tpu-rl logs` of the VM recipe: the bucket's records first; the serial console only as a
live view of the current attempt, and only while the VM runs (scripts/pipeline/vm/run.py reads both)."""

from __future__ import annotations

import textwrap

from google.api_core import exceptions as gexc

from tpu_rl.jobs.vm import CANCELLED, STARTING
from tpu_rl.recipes import STEPS, Step, UserError
from tpu_rl.recipes.costs.standing import idle_bill
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.progress import training_now
from tpu_rl.scripts.pipeline.answers import ActiveRun, Idle
from tpu_rl.scripts.pipeline.session import Session, StatusReport, StepStatus
from tpu_rl.scripts.pipeline.vm.run import (SerialReader, console_readable, failure_message, read_state, script_phase,
                                 step_section, train_attempt)
from tpu_rl.scripts.pipeline.vm.cancelled import cancelled_at, cancelled_note
from tpu_rl.scripts.pipeline.vm.after_run import done_billing, stop_record, stopped_line
from tpu_rl.scripts.pipeline.vm.checks import check_deployed_run, get_instance, powered_off_after_cancel, read_instance
from tpu_rl.scripts.pipeline.run_state import ending_line, read_record, step_total, train_progress
from tpu_rl.scripts.rundata.progress import TrainProgress, last_train_step


def unfollowed_end(session: Session, run: str) -> tuple[str, str | None] | None:
    """The startup script writes export's marker (its text: when) once every step succeeded, and its
    failure record when a phase failed (jobs/vm.py), whether or not a `run` followed it."""
    from tpu_rl.scripts.pipeline.vm.state import Failure

    storage, paths = session.clients.storage(), session.paths
    done = gcs.read_text(storage, paths.run_marker(run, "export"))
    if done is not None:
        return "succeeded", done.strip() or None
    failure = Failure.parse(gcs.read_text(storage, paths.run_failure(run)))
    return ("failed", failure.at or None) if failure else None


def status_vm(session: Session) -> StatusReport:
    """Each step's progress and output, from the bucket's records (the console adds only the guest agent's
    verdict), and the script's phase when it is between steps (as `run` shows it). Without the VM (deleted
    after a run, or not deployed yet), or with one that is not running, the bucket still holds them, so they
    are shown with a note instead of an error."""
    settings = session.settings
    try:
        instance = read_instance(session)
    except gexc.NotFound:
        recorded = recorded_steps(session, session.paths.run_name)  # as `runs` reads them
        rows = [StepStatus(step, recorded[step] if recorded[step] in ("done", CANCELLED, "failed") else "not done",
                           "", "", session.output_state(step)) for step in STEPS]
        return StatusReport(f"TPU VM {settings.vm_name} (not found)", rows,
                            f"TPU VM '{settings.vm_name}' does not exist in zone {settings.zone}: the table shows "
                            f"what the bucket holds; `npx cdktf deploy {session.recipe.name}` creates it (or set "
                            "TPU_NAME)", ending=ending_line(session, read_record(session), unfollowed_end))
    cancelled = cancelled_at(session)
    note = cancelled_note(session, cancelled, instance) if cancelled else ""
    # The VM's script writes its own run's records: with another script, this run's would be misread.
    differs = check_deployed_run(session, instance)
    readable = console_readable(instance)
    text = SerialReader(session).new_text() if readable else ""
    state = read_state(session, text, instance)
    states = state.states()
    if not note and any(value != "done" for value in states.values()):
        note = (powered_off_after_cancel(session, instance)
                or failure_message(session, state, [step for step in STEPS if states[step] != "done"]) or "")
    ending_said = bool(note)  # the VM's own records told a cancel or a failure: the record's ending is not repeated
    stopped = stop_record(session, instance) if not readable else None
    if stopped is not None:
        note = stopped_line(session, stopped)
    elif readable and all(value == "done" for value in states.values()):
        note = done_billing(session, instance)  # what the running VM does now: stop, stay up a while, or bill
    elif not readable:
        note = "; ".join(part for part in (
            f"TPU VM {settings.vm_name} is {instance.status}: Compute Engine serves its serial console only while "
            "it runs, so the table shows the bucket's records", note) if part)
    live = (last_train_step(train_attempt(text, session.paths.run_name)[1])
            if states.get("train") == "running" and readable else None)
    found = train_progress(session, session.paths.run_name, live)  # as `runs` reads it (run_state.py)
    record = read_record(session)
    training = training_now(found, step_total(session, record), session.clients.storage, session.paths.tensorboard,
                            session.now)
    note = "; ".join(part for part in (note, differs) if part)
    phase = script_phase(state.attempt)
    script = f"; startup script: {phase}" if phase else ""
    return StatusReport(f"TPU VM {settings.vm_name} ({instance.status}{script})",
                        [StepStatus(step, states.get(step, "waiting"), "", "", session.output_state(step),
                                    progress=training if step == "train" else "") for step in STEPS], note,
                        ending="" if ending_said else ending_line(session, record, unfollowed_end))


def recorded_steps(session: Session, run: str) -> dict[str, str]:
    """Platform.recorded_steps: each step of run `run` as its startup script's records in the bucket say it, read
    as `status` reads them (VmState.states) less the console's live view: the script runs the steps whether or
    not a `run` follows it, and run.json says only what a `run` saw (`waiting`, after `run --detach`)."""
    import dataclasses

    from tpu_rl.recipes.runs.spec import RunSpec

    states = read_state(dataclasses.replace(session, spec=RunSpec.in_bucket(session.recipe, run)), "").states()
    return {step: state for step, state in states.items()}  # keyed as Platform.recorded_steps keys them


def vm_idle(session: Session) -> Idle:
    """`tpu-rl runs`: the account GKE's gives (answers.py Idle), from the instance: while it runs a run that has
    not ended in the bucket's records (every step done, or one failed or cancelled), that run is active and no
    account is given; else the stack bills with the VM up (VM_AFTER_RUN=keep, or a look after a failure) or
    stopped. A VM not found raises NotDeployed, which `runs` shows as why the account is not shown."""
    instance, run, vm = get_instance(session), session.paths.run_name, session.settings.vm_name
    up = instance.status == "RUNNING"
    states = set(recorded_steps(session, run).values()) if up else set()
    if up and not (states == {"done"} or states & {"failed", CANCELLED}):
        return Idle((ActiveRun(run, f"TPU VM {vm} running"),), None, f"on TPU VM {vm}")
    return Idle((), idle_bill(session.recipe, vm_up=up), f"on TPU VM {vm}")


def live_train_step(session: Session, run: str) -> TrainProgress | None:
    """Platform.live_train_step: the step in the serial console's current train attempt of run `run`, while
    the VM runs it; None when the VM is gone or stopped (Compute Engine serves no console then)."""
    try:
        instance = read_instance(session)
    except gexc.NotFound:
        return None
    if not console_readable(instance):
        return None
    text = SerialReader(session).new_text()
    if read_state(session, text, instance).states().get("train") != "running":
        return None
    return last_train_step(train_attempt(text, run)[1])


def logs_vm(session: Session, step: Step, tail: int | None) -> list[str]:
    """A step's log: the whole of it from the bucket once the step ended (done or failed); while it runs in
    the current attempt, the serial console from its start (or all the console keeps, when its start scrolled
    out of it), and not the bucket's log of an earlier attempt (the log is uploaded only when a step ends)."""
    storage, paths, vm = session.clients.storage(), session.paths, session.settings.vm_name
    text = gcs.read_text(storage, paths.step_log(step))
    instance = get_instance(session) if text is None else _instance_or_none(session)
    readable = console_readable(instance)
    console_text = SerialReader(session).new_text() if readable else ""
    state = read_state(session, console_text, instance) if instance is not None else None
    running = state is not None and state.states()[step] == "running"
    if text is not None and not running:
        lines = text.splitlines()
        return lines[-tail:] if tail else lines
    assert state is not None  # with no log in the bucket the instance was read; a running step has a state
    attempt = state.view.attempt or (state.attempt.attempt if state.attempt else "?")
    earlier = (f"its log in the bucket ({paths.step_log(step)}) is an earlier attempt's; " if text is not None
               else "")
    if not readable:
        raise UserError(f"step {step} of run {paths.run_name} runs in attempt {attempt}, which has no log in the "
                        f"bucket yet ({earlier or 'it is uploaded when the step ends; '}TPU VM {vm} is "
                        f"{instance.status}, and Compute Engine serves its serial console only while it runs): "
                        f"see `tpu-rl status {session.recipe.name}`")
    section = step_section(console_text, step, paths.run_name)
    if section is None:
        if not running:
            raise UserError(f"step {step} of run {paths.run_name} has no log in the bucket and the console of "
                            f"TPU VM {vm} shows no '{step}: {STARTING}' line: the step has not started yet (see "
                            f"`tpu-rl status {session.recipe.name}`)")
        section = console_text.splitlines()
    shown = section[-tail:] if tail else section
    if text is None:
        return shown
    note = (f"step {step} runs again in attempt {attempt}, which has no log in the bucket yet (the one there is "
            f"an earlier attempt's); the live console of TPU VM {vm} follows")
    return [f"{NOTE}{part}" for part in textwrap.wrap(note, 80 - len(NOTE))] + shown


NOTE = "tpu-rl: "  # the head of logs' own lines, which fit 80 columns


def _instance_or_none(session: Session):
    try:
        return get_instance(session)
    except UserError:
        return None  # the VM is gone: the bucket's log is all there is
