"""What the VM recipe's startup script (jobs/vm.py) says about a run: its records in the bucket first, the
serial console only as a live view.

- The bucket: the progress markers (`<step>.done`), the attempt record (this boot's attempt and phase,
  paths.vm_attempt) and the failure record (paths.vm_failure: attempt, phase, exit code, log tail). They
  survive the console's 1 MB window (getSerialPortOutput "Returns the last 1 MB of serial port output",
  Compute Engine API reference, instances.getSerialPortOutput).
- The console, where the image forwards the agent's output to it (jobs/vm.py, above HEARTBEAT_SECONDS):
  each boot's attempt line, the steps' start lines (both name their run) and the guest agent's own lines
  after the script ended. Without them the heartbeat record (paths.vm_heartbeat) bounds the wait. The agent copies each output line of the script behind the metadata
  key ("%s: %s" in runCmd, GoogleCloudPlatform/guest-agent google_metadata_script_runner/main.go at
  0a52260f; `Metadata key(%q), command(%q): %s` in runScript, GoogleCloudPlatform/google-guest-agent
  cmd/gce_metadata_script_runner/scriptrunner.go at 16b9b3bf), then logs `Script %q failed with error: %v`
  (an exit status N) or, old agent, `%s exit status 0`, and last `Finished running %s scripts` (the old
  agent ends it with a period). Only the agent's own lines count: a line of the script's output that
  contains those words does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from tpu_rl.jobs.vm import ATTEMPT_LINE, CANCELLED, PROGRESS_LINE, STARTING
from tpu_rl.recipes import STEPS, Step

METADATA_KEY = "startup-script"
AGENT_FAILED = f'Script "{METADATA_KEY}" failed with error: '
AGENT_FINISHED = "Finished running startup scripts"
# How the two agents prefix a line of the script's output (see above): such a line is the script's, never
# the agent's verdict.
SCRIPT_OUTPUT = (f"{METADATA_KEY}: ", f'Metadata key("{METADATA_KEY}")')


def parse_time(text: str | None) -> datetime | None:
    """A record's `at` (jobs/vm.py: `date -u +%FT%TZ`) or an instance's RFC 3339 timestamp; None if neither."""
    try:
        value = datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def booted_at(instance) -> datetime | None:
    """When the VM's current boot began: its last start, else its creation (Compute Engine API, Instance
    `lastStartTimestamp` and `creationTimestamp`, RFC 3339 text), to the second like the records' `at`."""
    times = [parse_time(getattr(instance, name, "")) for name in ("last_start_timestamp", "creation_timestamp")]
    found = [value for value in times if value]
    return max(found).replace(microsecond=0) if found else None


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


@dataclass(frozen=True)
class Attempt:
    """The attempt record: which boot's attempt runs, and in which phase (install, token, a step, done)."""

    attempt: str
    phase: str
    at: str
    ended: str = ""  # how the attempt ended (jobs/vm.py on_exit: cancelled, exit-N); "" while it runs
    log: int | None = None  # the heartbeat's: the size of the script's log then
    command: str = ""  # the install's: the bounded command that runs (jobs/vm_install.py INSTALL_BOUNDS)
    bound: int | None = None  # and its bound, in seconds
    instance: str = ""  # the stop record's: the id of the instance that stopped itself (jobs/vm_outputs.py)

    @classmethod
    def parse(cls, text: str | None) -> Attempt | None:
        values = _fields(text.splitlines()[0]) if text and text.strip() else {}
        if "attempt" not in values:
            return None
        log, bound = values.get("log", ""), values.get("bound", "")
        return cls(values["attempt"], values.get("phase", ""), values.get("at", ""), values.get("ended", ""),
                   int(log) if log.isdigit() else None, values.get("command", ""),
                   int(bound) if bound.isdigit() else None, values.get("instance", ""))


@dataclass(frozen=True)
class Failure:
    """The failure record: the phase of an attempt that failed, its exit code and the tail of its log."""

    attempt: str
    phase: str
    code: str
    at: str
    tail: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Failure | None:
        lines = (text or "").splitlines()
        values = _fields(lines[0]) if lines else {}
        if "attempt" not in values:
            return None
        return cls(values["attempt"], values.get("phase", ""), values.get("exit", "?"), values.get("at", ""),
                   tuple(line for line in lines[1:] if line.strip()))

    @property
    def last_line(self) -> str:
        """The last line the phase logged before the script's own "failed" line (the cause, usually)."""
        lines = [line for line in self.tail if f" {self.phase}: failed (exit " not in line]
        return (lines or list(self.tail) or [""])[-1]


def agent_verdict(line: str) -> str | None:
    """The guest agent's word on the script when `line` is its own line: "exit status N" for a failure,
    "finished" for the end of all startup scripts; None for any other line, the script's output included."""
    for phrase, verdict in ((AGENT_FAILED, None), (AGENT_FINISHED, "finished")):
        at = line.find(phrase)
        if at < 0 or any(prefix in line[:at] for prefix in SCRIPT_OUTPUT):
            continue
        return verdict or line[at + len(phrase):].strip()
    return None


@dataclass
class ConsoleView:
    """The console since the current attempt of one run started (all of it when that line is gone)."""

    attempt: str | None = None  # the last attempt line of the run, if the console still has it
    started: list[str] = field(default_factory=list)  # steps of the run that started in it
    verdict: str | None = None  # the guest agent's, after the attempt started
    text: str = ""

    @classmethod
    def read(cls, console_text: str, run: str) -> ConsoleView:
        attempts = [match for match in ATTEMPT_LINE.finditer(console_text) if match["run"] == run]
        begin = attempts[-1].end() if attempts else 0
        text = console_text[begin:]
        view = cls(attempts[-1]["attempt"] if attempts else None, text=text)
        for match in PROGRESS_LINE.finditer(text):
            if match["run"] == run and match["event"] == STARTING and match["step"] not in view.started:
                view.started.append(match["step"])
        verdicts = [verdict for verdict in map(agent_verdict, text.splitlines()) if verdict]
        # A failure line comes before the agent's "Finished running ..." line: the failure is the verdict.
        view.verdict = next((verdict for verdict in verdicts if verdict != "finished"), verdicts[-1] if verdicts
                            else None)
        return view


@dataclass(frozen=True)
class VmState:
    """Everything `run`, `status` and `logs` decide from: bucket records and the console's view."""

    done: frozenset[str]
    attempt: Attempt | None
    failure: Failure | None  # only the current attempt's
    view: ConsoleView
    cancelled: bool = False
    heartbeat: Attempt | None = None  # only the current attempt's (paths.vm_heartbeat: attempt and at)
    booted: datetime | None = None  # when the VM's current boot began, if known
    running: bool = False  # the VM is RUNNING: a silent script is then a finding, not a stopped VM
    current: str | None = None  # the current attempt, when known

    @classmethod
    def of(cls, done, attempt: Attempt | None, failure: Failure | None, view: ConsoleView,
           cancelled: bool = False, booted: datetime | None = None, heartbeat: Attempt | None = None,
           running: bool = False, replaced: frozenset[str] = frozenset()) -> VmState:
        """`replaced`: the attempts seen when one had ended, which `run` waits to see followed by a new one (a guest reboot
        changes no instance timestamp): its records and its part of the console are not the current ones."""
        # A record written before the VM's current boot began (`booted`, booted_at) is an earlier boot's or
        # an earlier VM's: a replaced VM, or a reboot before the new boot's first line.
        def this_boot(record):
            at = parse_time(record.at) if record else None
            return record if record and (booted is None or at is None or at >= booted) else None

        def not_replaced(record):
            return record if record and record.attempt not in replaced else None

        attempt, failure, heartbeat = (not_replaced(this_boot(record)) for record in (attempt, failure, heartbeat))
        if replaced and (view.attempt is None or view.attempt in replaced):
            view = ConsoleView()
        # The console's last attempt line is the newest boot; without it (scrolled out, or a console the
        # agent's output does not reach) the bucket's records.
        current = view.attempt or next((record.attempt for record in (attempt, heartbeat) if record), None)

        def current_only(record):
            return record if record and record.attempt == current else None

        return cls(frozenset(done), current_only(attempt), current_only(failure), view, cancelled,
                   current_only(heartbeat), booted, running, current)

    @property
    def ended(self) -> str | None:
        """How the current attempt ended, by its own record (jobs/vm.py on_exit); None while it runs."""
        return self.attempt.ended if self.attempt and self.attempt.ended else None

    def last_heard(self) -> tuple[str, datetime] | None:
        """The newest sign of life of this boot's script: ("heartbeat", its time), else ("boot", when the VM
        started) while the script has written none; None when neither is known."""
        at = parse_time(self.heartbeat.at) if self.heartbeat else None
        if at:
            return "heartbeat", at
        return ("boot", self.booted) if self.booted else None

    @property
    def ended_without_record(self) -> str | None:
        """The guest agent's verdict when the script ended in this attempt and left no failure record."""
        return None if self.failure else self.view.verdict

    def states(self) -> dict[Step, str]:
        phase = self.attempt.phase if self.attempt else None
        states = {}
        for step in STEPS:
            if step in self.done:
                states[step] = "done"
            elif self.cancelled:
                states[step] = CANCELLED
            elif self.failure and self.failure.phase == step:
                states[step] = "failed"
            elif step == phase or step in self.view.started:
                states[step] = "failed" if self.ended_without_record else "running"
            else:
                states[step] = "waiting"
        return states
