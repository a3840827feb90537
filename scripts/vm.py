"""The VM recipe: the startup script runs the steps itself; `tpu-rl` follows its progress markers in GCS
and the serial console, and verifies each step's output like on GKE."""

from __future__ import annotations

from typing import Iterable

from google.api_core import exceptions as gexc

from recipes import STEPS, UserError
from scripts import gcs
from scripts.outcome import Interrupted, StepFailed
from scripts.pipeline import Session, StepStatus, describe_missing, verify_output

STOPPED = {"STOPPED", "STOPPING", "TERMINATED", "SUSPENDED", "SUSPENDING"}


def marker_states(markers: dict[str, str]) -> dict[str, str]:
    """Marker object names -> step states: '<step>' or '<step>.done' = done, '<step>.failed' = failed,
    '<step>.started' = running."""
    states: dict[str, str] = {}
    for name in markers:
        step, _, kind = name.rsplit("/", 1)[-1].partition(".")
        kind = kind or "done"
        if kind in ("done", "failed", "started"):
            if states.get(step) not in ("done", "failed"):
                states[step] = {"done": "done", "failed": "failed", "started": "running"}[kind]
    return states


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
        output = self.session.clients.instances().get_serial_port_output(
            project=settings.project, zone=settings.zone, instance=settings.vm_name, start=self.offset)
        self.offset = int(output.next_) if output.next_ else self.offset + len(output.contents)
        return output.contents


def run_vm(session: Session, steps: tuple[str, ...], *, follow_logs: bool) -> None:
    console, paths = session.console, session.paths
    _instance(session)
    pending = [step for step in steps if session.missing(step)]
    for step in steps:
        if step not in pending:
            console.print(f"[green]✓[/] {step}: output verified, skipping")
    if not pending:
        console.print("[green]done[/]: every step's output is verified")
        return
    serial = SerialReader(session)
    last_console_line = ""
    reported: dict[str, str] = {}
    try:
        while pending:
            states = marker_states(gcs.read_text_objects(session.clients.storage(), paths.progress))
            text = serial.new_text()
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                last_console_line = lines[-1]
                if follow_logs:
                    for line in lines:
                        console.print(f"[dim]vm|[/] {line}", highlight=False, markup=False)
            for step in list(pending):
                state = states.get(step, "waiting")
                if reported.get(step) != state:
                    console.print(f"{step}: {state}")
                    reported[step] = state
                if state == "failed":
                    raise StepFailed(f"step {step} failed on TPU VM {session.settings.vm_name} (marker "
                                     f"{paths.progress}{step}.failed); last console line: {last_console_line[:200]!r}. "
                                     f"Logs: {session.logs_hint(step)}")
                if state != "done":
                    break
                pending.remove(step)
                verify_output(session, step, steps)
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
    console.print(f"[green]done[/]: {', '.join(steps)} verified in gs://{session.settings.gcs_bucket}")


def status_vm(session: Session) -> list[StepStatus]:
    instance = _instance(session)
    states = marker_states(gcs.read_text_objects(session.clients.storage(), session.paths.progress))
    rows = []
    for step in STEPS:
        missing = session.missing(step)
        rows.append(StepStatus(step, f"VM {session.settings.vm_name} ({instance.status})",
                               states.get(step, "waiting"), "-",
                               "verified" if not missing else f"missing: {describe_missing(missing)}"))
    return rows


def logs_vm(session: Session, tail: int | None) -> Iterable[str]:
    _instance(session)
    lines = SerialReader(session).new_text().splitlines()
    return lines[-tail:] if tail else lines
