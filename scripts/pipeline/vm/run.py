"""The VM recipe: the startup script runs the steps itself; `tpu-rl` follows its records in GCS (progress
markers, attempt and failure records: scripts/pipeline/vm/state.py), shows the serial console as a live
view, and verifies each step's output like on GKE."""

from __future__ import annotations

from google.api_core import exceptions as gexc
from rich.markup import escape

from tpu_rl.jobs.vm import (CANCEL_POLL_SECONDS, HEARTBEAT_SECONDS, HEARTBEAT_STALE_SECONDS, PROGRESS_LINE, STARTING,
                     ssh_command)
from tpu_rl.recipes import STEPS, Step, UserError
from tpu_rl.recipes.outcome import Interrupted, StepFailed
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.accuracy import EvaluationWatch
from tpu_rl.scripts.pipeline.progress import AttemptProgress, progress_suffix
from tpu_rl.scripts.pipeline.record import RunCancelled, RunRecord, ending_run, record_cancellation
from tpu_rl.scripts.pipeline.session import Session, dry_run_costs, export_checkpoint, hms, verify_output
from tpu_rl.scripts.pipeline.vm.after_run import (after_run_line, detached, done_billing, failure_stay, marked,
                                           marked_but_missing, standing_account, stop_record, stopped_before)
from tpu_rl.scripts.pipeline.vm.cancelled import cancel_stay, cancelled_at, cancelled_note, go_on_hint, is_off
from tpu_rl.scripts.pipeline.vm.checks import (STOPPED, Maintenance, check_deployed_run, check_deployed_script,
                                        get_instance, read_instance, redeploy_hint, require_token_version)
from tpu_rl.scripts.pipeline.vm.phase_watch import INSTALL_WAIT_SECONDS, PhaseWatch
from tpu_rl.scripts.pipeline.vm.state import Attempt, ConsoleView, Failure, VmState, booted_at
from tpu_rl.scripts.pipeline.stall import STALL_SECONDS
from tpu_rl.scripts.pipeline.vm.watch import ConsoleBuffer, Watch
from tpu_rl.scripts.rundata.progress import RewardReader


def _started_step(line: str, run: str) -> str | None:
    """The step of `run` a console line reports starting, if it is such a line."""
    match = PROGRESS_LINE.search(line)
    return match["step"] if match and match["event"] == STARTING and match["run"] == run else None


def done_markers(session: Session) -> list[str]:
    """The names (`<step>.done`) of the progress markers the startup script has written for this run."""
    storage, paths = session.clients.storage(), session.paths
    return [paths.progress_marker(step).rpartition("/")[2] for step in STEPS
            if gcs.exists(storage, paths.progress_marker(step))]


def _refuse_cancelled(session: Session, instance) -> None:
    at = cancelled_at(session)
    if at:
        raise UserError(f"run {session.paths.run_name} was cancelled (`tpu-rl cancel` wrote "
                        f"{session.paths.cancel_marker} at {at}), and its startup script runs no step while that "
                        f"marker exists: {go_on_hint(session, instance, off=is_off(instance))}")


def _starts(lines: list[str], step: Step, run: str) -> list[int]:
    return [i for i, line in enumerate(lines) if _started_step(line, run) == step]


def step_section(console_text: str, step: Step, run: str) -> list[str] | None:
    """The console lines from the last start of `step` of `run` until the next step starts; None if the
    console does not show it start (not started, or its start scrolled out of the last 1 MB)."""
    lines = console_text.splitlines()
    starts = _starts(lines, step, run)
    if not starts:
        return None
    section = lines[starts[-1]:]
    ends = [i for i, line in enumerate(section) if i and _started_step(line, run)]
    return section[:ends[0]] if ends else section


def train_attempt(console_text: str, run: str) -> tuple[int, str]:
    """(which start of train this is, the console text since it): after a reboot the script starts train
    again and train_rl resumes from its last checkpoint, so progress is read from the last start only. When
    the start scrolled out of the console's 1 MB, all that is left belongs to the running attempt."""
    section = step_section(console_text, "train", run)
    if section is None:
        return 0, console_text
    return len(_starts(console_text.splitlines(), "train", run)), "\n".join(section)


def read_state(session: Session, console_text: str, instance=None, replaced: frozenset[str] = frozenset()) -> VmState:
    """The run's state: its markers, records and cancel marker in the bucket, and the console's view; with
    the instance, only the records of its current boot; without those of the `replaced` attempt."""
    storage, paths = session.clients.storage(), session.paths
    done = {name.removesuffix(".done") for name in done_markers(session)}
    return VmState.of(done, Attempt.parse(gcs.read_text(storage, paths.vm_attempt)),
                      Failure.parse(gcs.read_text(storage, paths.vm_failure)),
                      ConsoleView.read(console_text, paths.run_name), bool(cancelled_at(session)),
                      booted_at(instance) if instance is not None else None,
                      Attempt.parse(gcs.read_text(storage, paths.vm_heartbeat)), console_readable(instance),
                      replaced)


def console_readable(instance) -> bool:
    """Compute Engine serves the serial console "only while the VM instance is running" (Compute Engine docs,
    compute/docs/troubleshooting/viewing-serial-port-output): a stopped VM's is not read, its state is said."""
    return instance is not None and instance.status == "RUNNING"


class SerialReader:
    """Reads the serial console on from where it left off. A VM that restarted (maintenance) has a new
    console, shorter than the offset: it is read again from its start."""

    def __init__(self, session: Session) -> None:
        self.session, self.offset = session, 0

    def new_text(self) -> str:
        settings = self.session.settings
        for _ in range(2):
            output = self.session.clients.instances().get_serial_port_output(request={
                "project": settings.project, "zone": settings.zone, "instance": settings.vm_name,
                "start": self.offset})
            following = int(output.next_) if output.next_ else self.offset + len(output.contents)
            if following >= self.offset:
                self.offset = following
                return output.contents
            self.offset = 0
        return ""


def run_vm(session: Session, steps: tuple[Step, ...], *, follow_logs: bool, dry_run: bool = False,
           detach: bool = False) -> None:
    """`detach`: check and record as `run` does, then return with the commands that follow the run: the
    startup script is the run's driver, on the VM (jobs/vm.py)."""
    console = session.console
    instance = get_instance(session)
    record = RunRecord.open(session)
    pending = [step for step in steps if session.missing(step)]
    if pending:
        check_deployed_script(session, instance)
        _refuse_cancelled(session, instance)
        require_token_version(session)
    if dry_run:
        console.print(f"dry run of run {session.paths.run_name}: nothing is started or written")
        console.print(f"the startup script of TPU VM {session.settings.vm_name} (deployed with the stack) runs:")
        costs, total = dry_run_costs(session.spec, pending)
        for step in steps:
            console.print(f"  {step}: " + (f"startup script (output missing){costs[step]}" if step in pending
                                          else "skip (output verified)"))
        console.print(total)
        console.print(after_run_line(session))
        return
    for step in steps:
        if step not in pending:
            console.print(f"[green]✓[/] {step}: output verified, skipping")
    record.start({step: "startup script" if step in pending else "skip" for step in steps})
    # the last `next:` lines, read at the end only: what the VM does now, then what its stack bills (the reservation's
    # part is in the first line already)
    billing = lambda: [done_billing(session, _instance_now(session)), standing_account(session)[0]]  # noqa: E731
    if not pending:
        record.finish(None)
        session.report_done(steps, billing)
        return
    if detach:
        stopped = stop_record(session, instance)
        skipped = marked(session, pending)
        if skipped:  # the script skips a step by its marker, not its output
            then = redeploy_hint(session) if instance.status in STOPPED else resume_hint(session)
            raise StepFailed(marked_but_missing(session, skipped, then))
        if instance.status in STOPPED and stopped is not None:
            raise StepFailed(stopped_before(session, stopped, pending))
        detached(session, pending)
        return
    with ending_run(session, record, steps, billing):
        _follow(session, steps, pending, record, follow_logs)


def _instance_now(session: Session):
    try:
        return read_instance(session)
    except gexc.NotFound:
        return None


def failure_message(session: Session, state: VmState, pending: list[Step]) -> str | None:
    """One line for a startup script that failed or ended in this attempt; None while it runs."""
    vm, failure = session.settings.vm_name, state.failure
    if failure:
        what = f"step {failure.phase}" if failure.phase in STEPS else f"the startup script's {failure.phase}"
        logs = (f"logs: {session.logs_hint(failure.phase)}" if failure.phase in STEPS
                else f"the record: `gcloud storage cat {session.paths.vm_failure}`")
        return (f"{what} failed on TPU VM {vm} (exit {failure.code}, attempt {failure.attempt}): "
                f"{failure.last_line[:200]!r}; {logs}; fix it, then {resume_hint(session)}{failure_stay(session)}")
    verdict = state.ended_without_record
    if verdict and pending:
        return (f"the startup script of TPU VM {vm} ended ({verdict}, says the guest agent) before {pending[0]} "
                f"finished and left no failure record; last console line: {_last_line(state.view.text)!r}; "
                f"see {session.logs_hint(pending[0])}")
    if state.ended and pending:
        return (f"the startup script's attempt {state.current} on TPU VM {vm} ended ({state.ended}) before "
                f"{pending[0]} finished; {resume_hint(session)}")
    return None


def script_phase(attempt: Attempt | None) -> str:
    """The startup script's phase outside the steps, as `run` and `status` show it; while the install runs a
    bounded command (jobs/vm_script/bounded.sh bounded), which one and its bound: past it the phase fails."""
    if attempt is None or not attempt.phase or attempt.phase in STEPS:
        return ""
    if not attempt.command or attempt.ended:
        return attempt.phase
    # Short: `run` prints it behind "startup script: " within 80 columns for the longest command name.
    bound = f", at most {hms(attempt.bound)}" if attempt.bound is not None else ""
    return f"{attempt.phase}: {attempt.command}{bound}"


def resume_hint(session: Session) -> str:
    """How to start a new attempt, and that `run` follows it."""
    return (f"reboot the VM (`{ssh_command(session.settings)} -- sudo reboot`) to resume, then `tpu-rl run "
            f"{session.recipe.name}` follows the new attempt")


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _follow(session: Session, steps: tuple[Step, ...], pending: list[Step], record: RunRecord,
            follow_logs: bool) -> None:
    """Follow the startup script until every pending step is done and verified."""
    console, paths = session.console, session.paths
    serial = SerialReader(session)
    maintenance = Maintenance(session)
    buffer, watch, phases = ConsoleBuffer(paths.run_name), Watch(session), PhaseWatch(session)
    reported: dict[str, str] = {}
    # tunix's step lines reach the console through the startup script's output (jobs/vm.py sends stderr
    # there too), so the same parser as on GKE reads them; the reward comes from the same bucket path.
    progress = AttemptProgress()
    reward = RewardReader(session.clients.storage, paths.tensorboard, session.now)
    evaluations = EvaluationWatch(session, record)  # the evaluation lines reach the console the same way
    console.print(f"following the startup script of TPU VM {session.settings.vm_name}: its records in the bucket "
                  f"decide, the console is a live view; it rewrites {paths.vm_heartbeat} every "
                  f"{HEARTBEAT_SECONDS} s, and {hms(HEARTBEAT_STALE_SECONDS)} without a change (by this machine's "
                  f"clock) ends the wait; so does a step with no new output for {hms(STALL_SECONDS)} or more, and "
                  f"a phase between the steps past its bound (the install's {hms(INSTALL_WAIT_SECONDS)})")
    first = True
    try:
        while pending:
            maintenance.check(pending)
            text = _console_text(serial, maintenance)
            console_text = buffer.add(text)
            at = cancelled_at(session)
            if at:
                raise RunCancelled(f"step {pending[0]} was cancelled: `tpu-rl cancel` wrote "
                                   f"{paths.cancel_marker} at {at}; its outputs are kept; "
                                   f"{cancel_stay(session, maintenance.instance)}; "
                                   f"{go_on_hint(session, maintenance.instance)}")
            state = read_state(session, console_text, maintenance.instance, watch.replaced)
            if first:
                first = False
                ended = failure_message(session, state, pending) or (
                    f"the attempt ended ({state.ended})" if state.ended else None)
                if ended and state.current:
                    watch.resuming(state, ended, _attempts_of(session, console_text))
                    state = read_state(session, console_text, maintenance.instance, watch.replaced)
            awaited = watch.waiting_for_new_attempt(state)
            if awaited:
                raise StepFailed(awaited)
            states = state.states()
            if "train" in pending and "corr=" in text:
                evaluations.see("\n".join(step_section(console_text, "train", paths.run_name) or []),
                                source="console")
            if follow_logs:
                for line in text.splitlines():
                    if line.strip():
                        console.print(f"[dim]vm|[/] {escape(line)}", highlight=False, soft_wrap=True)
            phase = script_phase(state.attempt)
            if phase and reported.get("") != phase:
                console.print(f"startup script: {phase}")
                reported[""] = phase
            train_step = None
            for step in list(pending):
                state_of = states.get(step, "waiting")
                shown = state_of
                if step == "train" and state_of == "running":
                    now = progress.update(*train_attempt(console_text, paths.run_name))
                    train_step = now.step if now else None
                    shown += progress_suffix(now, trained_steps(session.recipe), reward.latest())
                if reported.get(step) != shown:
                    console.print(f"{step}: {shown}")
                    if state_of == "running" and not reported.get(step, "").startswith("running"):
                        record.step(step, "running")
                    reported[step] = shown
                if state_of != "done":
                    break
                pending.remove(step)
                verify_output(session, step, steps)
                # The startup script exported the newest finished step, by the rule `run` reads it with.
                fields = {"checkpoint": dict(zip(("step", "why"), export_checkpoint(session)))} if step == "export" else {}
                record.step(step, "succeeded", **fields)
            if not pending:
                break
            if awaited is None:
                message = (failure_message(session, state, pending) or watch.silence(state, pending)
                           or phases.overrun(state)
                           or (watch.stall(state, pending[0], train_step) if states.get(pending[0]) == "running"
                               else None))
                if message:
                    raise StepFailed(message)
            session.sleep(session.poll_interval)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: the TPU VM keeps running its startup script. Reattach with "
                          f"`tpu-rl run {session.recipe.name}`") from None


def _attempts_of(session: Session, console_text: str) -> frozenset[str]:
    """Every attempt the bucket's records and the console name now: none of them is a new attempt."""
    storage, paths = session.clients.storage(), session.paths
    records: list[Attempt | Failure | None] = [Attempt.parse(gcs.read_text(storage, url))
                                               for url in (paths.vm_attempt, paths.vm_heartbeat)]
    records.append(Failure.parse(gcs.read_text(storage, paths.vm_failure)))
    view = ConsoleView.read(console_text, paths.run_name)
    return frozenset([record.attempt for record in records if record] + ([view.attempt] if view.attempt else []))


def _console_text(serial: SerialReader, maintenance: Maintenance) -> str:
    """The console's new text while the VM is RUNNING. The VM may stop between the instance read and this one
    (Compute Engine then refuses the console, a 400): that is a change of state, which the next poll's
    instance read sees, not an error."""
    if not console_readable(maintenance.instance):
        return ""
    try:
        return serial.new_text()
    except gexc.BadRequest:
        return ""


def cancel_vm(session: Session, step: Step | None, yes: bool) -> None:
    """Stop the run's startup script (after a yes): write the run's cancel marker, which the script checks
    before each step and polls while one runs, stopping MaxText when it appears (jobs/vm.py). The VM is not
    stopped now: a TPU VM cannot be started again once stopped (Compute Engine, "Stop or restart a compute
    instance", docs/instances/stop-start-instance, Limitations), while a reboot without the marker resumes
    the steps from their progress markers and train from its last checkpoint. What the VM does after, its
    own script decides, and scripts/pipeline/vm/cancelled.py says it from that script."""
    console, paths, settings = session.console, session.paths, session.settings
    run, vm = paths.run_name, settings.vm_name
    try:
        instance = read_instance(session)
    except gexc.NotFound:
        console.print(f"nothing to cancel: TPU VM {vm} does not exist in zone {settings.zone}, so no step of run "
                      f"{run} runs (see {session.command('status')})")
        return
    if instance.status in STOPPED:
        console.print(f"nothing to cancel: TPU VM {vm} is {instance.status}, so no step of run {run} runs")
        return
    # The VM's script polls its own run's marker: one of another run's would never be read. The same run's
    # script, even when it differs from the rendered one, polls exactly this marker.
    differs = check_deployed_run(session, instance)
    if differs:
        console.print(differs)
    at = cancelled_at(session)
    if at:
        console.print(f"nothing to cancel: {cancelled_note(session, at, instance)}")
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
    record_cancellation(session, pending, {"marker": paths.cancel_marker})
    gcs.write_text(session.clients.storage(), paths.cancel_marker, session.now().isoformat(timespec="seconds") + "\n")
    console.print(f"wrote {paths.cancel_marker}")
    console.print(f"cancelled {what}: the startup script of TPU VM {vm} stops step {pending[0]} within "
                  f"{CANCEL_POLL_SECONDS} s (SIGTERM to MaxText) and starts no further step; {kept}")
    console.print(cancel_stay(session, instance))
    console.print(go_on_hint(session, instance))

