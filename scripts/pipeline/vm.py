"""The VM recipe: the startup script runs the steps itself; `tpu-rl` follows its progress markers in GCS
and the serial console, and verifies each step's output like on GKE."""

from __future__ import annotations

import re
from typing import Iterable

from google.api_core import exceptions as gexc
from rich.markup import escape

from jobs.vm import CANCEL_POLL_SECONDS, CANCELLED, PROGRESS_LINE, STARTING, ssh_command
from recipes import STEPS, Step, UserError
from scripts.cloud import gcs
from scripts.outcome import Interrupted, StepFailed
from scripts.pipeline.progress import AttemptProgress, RewardReader, last_train_step, progress_suffix, training_now
from scripts.pipeline.record import RunCancelled, RunRecord, record_cancellation
from scripts.pipeline.session import Session, StatusReport, StepStatus, dry_run_costs, verify_output

STOPPED = {"STOPPED", "STOPPING", "TERMINATED", "SUSPENDED", "SUSPENDING"}


# The startup script (jobs/vm.py) writes paths.progress_marker(step), `.../<step>.done`, after a step
# succeeded and logs each step's start in the format jobs.vm.PROGRESS_LINE reads; the guest agent reports
# a failed script on the serial console ('Script "startup-script" failed with error: exit status 1',
# GoogleCloudPlatform/guest-agent google_metadata_script_runner/main.go).
SCRIPT_FAILED = re.compile(r"(?i)startup-script.*(?:exit status [1-9]|failed with error|return code [1-9])")


def _started_step(line: str) -> str | None:
    """The step a console line reports starting, if it is such a line."""
    match = PROGRESS_LINE.search(line)
    return match["step"] if match and match["event"] == STARTING else None


def step_states(markers: Iterable[str], console_text: str, cancelled: bool = False) -> dict[str, str]:
    """Each step's state from the names of the markers that exist (`<step>.done`) and the console so far;
    with the run's cancel marker there, every step not done is cancelled (the script runs none of them)."""
    done = {name.rsplit("/", 1)[-1].removesuffix(".done") for name in markers if name.endswith(".done")}
    # Where each step last started: after a reboot the script starts the step again, and only what
    # follows that start tells whether this attempt failed.
    started = {match["step"]: match.end() for match in PROGRESS_LINE.finditer(console_text)
               if match["event"] == STARTING}
    states = {}
    for step in STEPS:
        if step in done:
            states[step] = "done"
        elif cancelled:
            states[step] = CANCELLED
        elif step in started:
            states[step] = "failed" if SCRIPT_FAILED.search(console_text, started[step]) else "running"
        else:
            states[step] = "waiting"
    return states


def done_markers(session: Session) -> list[str]:
    """The names (`<step>.done`) of the progress markers the startup script has written for this run."""
    storage, paths = session.clients.storage(), session.paths
    return [paths.progress_marker(step).rpartition("/")[2] for step in STEPS
            if gcs.exists(storage, paths.progress_marker(step))]


def cancelled_at(session: Session) -> str | None:
    """When `tpu-rl cancel` wrote the run's cancel marker (its text), or None when there is none."""
    text = gcs.read_text(session.clients.storage(), session.paths.cancel_marker)
    return None if text is None else text.strip() or "an unknown time"


def go_on_hint(session: Session) -> str:
    return (f"to go on, `gcloud storage rm {session.paths.cancel_marker}` and reboot the VM "
            f"(`{ssh_command(session.settings)} -- sudo reboot`): its startup script then resumes at the first "
            "step not done (train from its last checkpoint)")


def _refuse_cancelled(session: Session) -> None:
    at = cancelled_at(session)
    if at:
        raise UserError(f"run {session.paths.run_name} was cancelled (`tpu-rl cancel` wrote "
                        f"{session.paths.cancel_marker} at {at}), and its startup script runs no step while that "
                        f"marker exists: {go_on_hint(session)}")


def _starts(lines: list[str], step: Step) -> list[int]:
    return [i for i, line in enumerate(lines) if _started_step(line) == step]


def step_section(console_text: str, step: Step) -> list[str] | None:
    """The console lines from the last start of `step` until the next step starts; None if it never started."""
    lines = console_text.splitlines()
    starts = _starts(lines, step)
    if not starts:
        return None
    section = lines[starts[-1]:]
    ends = [i for i, line in enumerate(section) if i and _started_step(line)]
    return section[:ends[0]] if ends else section


def train_attempt(console_text: str) -> tuple[int, str]:
    """(which start of train this is, the console text since it): after a reboot the script starts train
    again and train_rl resumes from its last checkpoint, so progress is read from the last start only."""
    section = step_section(console_text, "train") or []
    return len(_starts(console_text.splitlines(), "train")), "\n".join(section)


def _instance(session: Session):
    settings = session.settings
    try:
        return session.clients.instances().get(project=settings.project, zone=settings.zone,
                                               instance=settings.vm_name)
    except gexc.NotFound:
        raise UserError(f"TPU VM '{settings.vm_name}' not found in zone {settings.zone}: deploy it with "
                        f"`npx cdktf deploy {session.recipe.name}` (or set TPU_NAME)") from None


class SerialReader:
    def __init__(self, session: Session) -> None:
        self.session, self.offset = session, 0

    def new_text(self) -> str:
        settings = self.session.settings
        output = self.session.clients.instances().get_serial_port_output(request={
            "project": settings.project, "zone": settings.zone, "instance": settings.vm_name, "start": self.offset})
        self.offset = int(output.next_) if output.next_ else self.offset + len(output.contents)
        return output.contents


def run_vm(session: Session, steps: tuple[Step, ...], *, follow_logs: bool, dry_run: bool = False) -> None:
    console = session.console
    _instance(session)
    record = RunRecord.open(session)
    pending = [step for step in steps if session.missing(step)]
    if pending:
        _refuse_cancelled(session)
    if dry_run:
        console.print(f"dry run of run {session.paths.run_name}: nothing is started or written")
        console.print(f"the startup script of TPU VM {session.settings.vm_name} (deployed with the stack) runs:")
        costs, total = dry_run_costs(session.recipe, pending)
        for step in steps:
            console.print(f"  {step}: " + (f"startup script (output missing){costs[step]}" if step in pending
                                          else "skip (output verified)"))
        console.print(total)
        return
    for step in steps:
        if step not in pending:
            console.print(f"[green]✓[/] {step}: output verified, skipping")
    record.start({step: "startup script" if step in pending else "skip" for step in steps})
    if not pending:
        record.finish(None)
        session.report_done(steps)
        return
    try:
        _follow(session, steps, pending, record, follow_logs)
    except BaseException as error:
        record.finish(error)
        raise
    record.finish(None)
    session.report_done(steps)


def _follow(session: Session, steps: tuple[Step, ...], pending: list[str], record: RunRecord,
            follow_logs: bool) -> None:
    """Follow the startup script until every pending step is done and verified."""
    console, paths = session.console, session.paths
    serial = SerialReader(session)
    console_text = ""
    last_console_line = ""
    reported: dict[str, str] = {}
    # tunix's step lines reach the console through the startup script's output (jobs/vm.py sends stderr
    # there too), so the same parser as on GKE reads them; the reward comes from the same bucket path.
    progress = AttemptProgress()
    reward = RewardReader(session.clients.storage, paths.tensorboard, session.now)
    try:
        while pending:
            text = serial.new_text()
            console_text += text
            at = cancelled_at(session)
            if at:
                raise RunCancelled(f"step {pending[0]} was cancelled: `tpu-rl cancel` wrote "
                                   f"{paths.cancel_marker} at {at}; its outputs are kept; {go_on_hint(session)}")
            states = step_states(done_markers(session), console_text)
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                last_console_line = lines[-1]
                if follow_logs:
                    for line in lines:
                        console.print(f"[dim]vm|[/] {escape(line)}", highlight=False)
            for step in list(pending):
                state = states.get(step, "waiting")
                shown = state
                if step == "train" and state == "running":
                    shown += progress_suffix(progress.update(*train_attempt(console_text)),
                                             session.recipe.train_steps, reward.latest())
                if reported.get(step) != shown:
                    console.print(f"{step}: {shown}")
                    if state == "running" and not reported.get(step, "").startswith("running"):
                        record.step(step, "running")
                    reported[step] = shown
                if state == "failed":
                    raise StepFailed(
                        f"step {step} failed on TPU VM {session.settings.vm_name} (the startup script stopped "
                        f"before writing {paths.progress_marker(step)}); last console line: "
                        f"{last_console_line[:200]!r}. Logs: {session.logs_hint(step)}")
                if state != "done":
                    break
                pending.remove(step)
                verify_output(session, step, steps)
                record.step(step, "succeeded")
            if not pending:
                break
            status = _instance(session).status
            if status in STOPPED:
                raise StepFailed(f"TPU VM {session.settings.vm_name} is {status} before {pending[0]} finished "
                                 "(preempted or maintenance?): start it again and rerun `tpu-rl run`; logs: "
                                 f"{session.logs_hint(pending[0])}")
            session.sleep(session.poll_interval)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: the TPU VM keeps running its startup script. Reattach with "
                          f"`tpu-rl run {session.recipe.name}`") from None


def cancel_vm(session: Session, step: Step | None, yes: bool) -> None:
    """Stop the run's startup script (after a yes): write the run's cancel marker, which the script checks
    before each step and polls while one runs, stopping MaxText when it appears (jobs/vm.py). The VM is not
    stopped: a TPU VM cannot be started again once stopped (Compute Engine, "Stop or restart a compute
    instance", docs/instances/stop-start-instance, Limitations), while a reboot without the marker resumes
    the steps from their progress markers and train from its last checkpoint."""
    console, paths, settings = session.console, session.paths, session.settings
    run, vm = paths.run_name, settings.vm_name
    try:
        instance = session.clients.instances().get(project=settings.project, zone=settings.zone, instance=vm)
    except gexc.NotFound:
        console.print(f"nothing to cancel: TPU VM {vm} does not exist in zone {settings.zone}, so no step of run "
                      f"{run} runs (see {session.command('status')})")
        return
    if instance.status in STOPPED:
        console.print(f"nothing to cancel: TPU VM {vm} is {instance.status}, so no step of run {run} runs")
        return
    at = cancelled_at(session)
    if at:
        console.print(f"nothing to cancel: run {run} was cancelled at {at}; {go_on_hint(session)}")
        return
    done = {name.removesuffix(".done") for name in done_markers(session)}
    pending = [name for name in STEPS if name not in done]
    if not pending or (step and step in done):
        console.print(f"nothing to cancel: {step or 'every step'} of run {run} is done")
        return
    if step and step != pending[0]:
        raise UserError(f"the startup script of TPU VM {vm} runs the steps of run {run} in order and is not past "
                        f"{pending[0]}: cancel stops it there, so give STEP {pending[0]} or none")
    what = f"{step} of run {run}" if step else f"run {run}"
    kept = f"outputs in gs://{settings.gcs_bucket} are kept"
    if not session.cancel_confirmed(yes, f"stop the startup script of TPU VM {vm} at step {pending[0]} of {what}",
                                    kept):
        return
    record_cancellation(session, pending, marker=paths.cancel_marker)
    gcs.write_text(session.clients.storage(), paths.cancel_marker, session.now().isoformat(timespec="seconds") + "\n")
    console.print(f"wrote {paths.cancel_marker}")
    console.print(f"cancelled {what}: the startup script of TPU VM {vm} stops step {pending[0]} within "
                  f"{CANCEL_POLL_SECONDS} s (SIGTERM to MaxText) and starts no further step; {kept}; "
                  f"{go_on_hint(session)}")


def status_vm(session: Session) -> StatusReport:
    """Each step's progress and output. Without the VM (deleted after a run, or not deployed yet) the
    bucket still holds the progress markers and outputs, so they are shown with a note instead of an error."""
    settings = session.settings
    markers = done_markers(session)
    cancelled = cancelled_at(session)
    note = f"run {session.paths.run_name} was cancelled at {cancelled}; {go_on_hint(session)}" if cancelled else ""
    try:
        instance = session.clients.instances().get(project=settings.project, zone=settings.zone,
                                                   instance=settings.vm_name)
    except gexc.NotFound:
        states = step_states(markers, "", bool(cancelled))
        rows = [StepStatus(step, states[step] if states[step] in ("done", CANCELLED) else "not done", "", "",
                           session.output_state(step)) for step in STEPS]
        return StatusReport(f"TPU VM {settings.vm_name} (not found)", rows,
                            f"TPU VM '{settings.vm_name}' does not exist in zone {settings.zone}: the table shows "
                            f"what the bucket holds; `npx cdktf deploy {session.recipe.name}` creates it (or set "
                            "TPU_NAME)")
    text = SerialReader(session).new_text()
    states = step_states(markers, text, bool(cancelled))
    training = training_now(last_train_step(train_attempt(text)[1]), session.recipe.train_steps,
                            session.clients.storage, session.paths.tensorboard, session.now) \
        if states.get("train") == "running" else ""
    return StatusReport(f"TPU VM {settings.vm_name} ({instance.status})",
                        [StepStatus(step, states.get(step, "waiting"), "", "", session.output_state(step),
                                    progress=training if step == "train" else "") for step in STEPS], note)


def logs_vm(session: Session, step: Step, tail: int | None) -> list[str]:
    """The serial console from the last start of `step` until the next step starts."""
    _instance(session)
    section = step_section(SerialReader(session).new_text(), step)
    if section is None:
        raise UserError(f"the console of TPU VM {session.settings.vm_name} shows no '{step}: {STARTING}' line: "
                        f"the step has not started yet (see `tpu-rl status {session.recipe.name}`)")
    return section[-tail:] if tail else section
