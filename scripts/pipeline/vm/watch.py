"""The bounds of `tpu-rl run` on a VM recipe, judged by this machine's own monotonic clock (never by comparing
it with the VM's `date`): a new attempt after one that ended, a heartbeat that stopped changing, a step whose
output stopped; and the console kept to what the parsers need."""

from __future__ import annotations

import time

from tpu_rl.jobs.vm import ATTEMPT_LINE, HEARTBEAT_SECONDS, HEARTBEAT_STALE_SECONDS, PROGRESS_LINE, STARTING, ssh_command
from tpu_rl.recipes import Step
from tpu_rl.scripts.pipeline.session import Session, hms
from tpu_rl.scripts.pipeline.stall import OutputWatch, look_and_stop, stall_line
from tpu_rl.scripts.pipeline.vm.state import VmState

clock = time.monotonic  # tests replace it (scripts/pipeline/vm/watch.py is the one reader)

# After an attempt that ended, `run` waits this long for a new one: a guest reboot keeps the instance RUNNING
# and its lastStartTimestamp, so only the new attempt's records tell it began. A reboot's known worst case
# is ~330 s (systemd's stop and shutdown timeouts, systemd-networkd-wait-online's 120 s); 15 min leaves the
# rest for firmware, kernel and guest agent (docs/provenance.md#a-guest-reboots-worst-case).
RESUME_WAIT_SECONDS = 900
# The console kept between polls: the run's last attempt line and step starts, and this much of its tail
# (the console itself serves 1 MB, instances.getSerialPortOutput).
CONSOLE_TAIL_BYTES = 2 << 20


class ConsoleBuffer:
    """The console as the parsers need it: the last attempt line of the run and the step starts after it
    (anchors), then a bounded tail, instead of all of it, re-split every poll."""

    def __init__(self, run: str) -> None:
        self.run, self.tail = run, ""
        self.anchors: list[str] = []

    def add(self, text: str) -> str:
        self.tail += text
        if len(self.tail) <= CONSOLE_TAIL_BYTES:
            return self.text
        # At the last line end before the bound; with none there (one line longer than it), at the bound.
        cut = self.tail.rfind("\n", 0, len(self.tail) - CONSOLE_TAIL_BYTES) + 1 or len(self.tail) - CONSOLE_TAIL_BYTES
        self._anchor(self.tail[:cut])
        self.tail = self.tail[cut:]
        return self.text

    def _anchor(self, dropped: str) -> None:
        for line in dropped.splitlines():
            attempt = ATTEMPT_LINE.search(line)
            if attempt and attempt["run"] == self.run:
                self.anchors = [line]
            start = PROGRESS_LINE.search(line)
            if start and start["run"] == self.run and start["event"] == STARTING:
                self.anchors.append(line)

    @property
    def text(self) -> str:
        return "".join(f"{line}\n" for line in self.anchors) + self.tail


class Watch:
    """What ends the wait besides a record: no new attempt after an ended one, a silent heartbeat, a stall."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.replaced: frozenset[str] = frozenset()  # the attempts seen when one had ended: none is new
        self.waiting = False
        self.ended_message = ""
        self.since = clock()
        self.beat: tuple[object, float] = (None, clock())
        # A step whose log (its size in the heartbeat) stops growing and that (train) reaches no new training
        # step on the console, while the VM is RUNNING, is stalled at the bound of scripts/pipeline/stall.py.
        self.output = OutputWatch(clock())

    def resuming(self, state: VmState, message: str, seen: frozenset[str]) -> None:
        """The attempt `run` found had already ended: wait for a new one, saying so and how to start it."""
        ended = frozenset({state.current} if state.current is not None else ())
        self.replaced, self.ended_message, self.since = seen | ended, message, clock()
        self.ended, self.waiting = state.current, True
        settings = self.session.settings
        self.session.console.print(
            f"the startup script's last attempt {state.current} on TPU VM {settings.vm_name} has ended; waiting "
            f"up to {hms(RESUME_WAIT_SECONDS)} for a new one (a reboot starts it: `{ssh_command(settings)} -- sudo "
            "reboot`)")

    def waiting_for_new_attempt(self, state: VmState) -> str | None:
        """None once a new attempt began (or none was awaited); else the message when the wait is over, or ""."""
        if not self.waiting or state.current is not None:
            if self.waiting:
                self.session.console.print(f"startup script: attempt {state.current} began")
                self.waiting = False
            return None
        if clock() - self.since < RESUME_WAIT_SECONDS:
            return ""
        return (f"no new attempt began in {hms(RESUME_WAIT_SECONDS)} after attempt {self.ended} ended: "
                f"{self.ended_message}")

    def silence(self, state: VmState, pending: list[Step]) -> str | None:
        """No change of the heartbeat (or none at all) for HEARTBEAT_STALE_SECONDS by this machine's clock."""
        key = (state.current, state.heartbeat) if state.running and not state.failure else None
        if key != self.beat[0] or key is None:
            self.beat = (key, clock())
            return None
        silent = clock() - self.beat[1]
        if silent < HEARTBEAT_STALE_SECONDS:
            return None
        settings, beat = self.session.settings, self.session.paths.vm_heartbeat
        ssh = ssh_command(settings)
        seen = (f"its heartbeat {beat} (last: {state.heartbeat.at} by the VM's clock) has not changed"
                if state.heartbeat else f"no heartbeat {beat} of this boot has appeared")
        return (f"the startup script of TPU VM {settings.vm_name} has left no failure record and {seen} for "
                f"{hms(silent)} while the VM is RUNNING, before {pending[0]} finished (written every "
                f"{HEARTBEAT_SECONDS} s): check the VM before rebooting it: `{ssh} -- sudo journalctl -t "
                "google_metadata_script_runner -n 50` shows whether the script still runs (it was killed, out "
                f"of memory?, or cannot reach the bucket); if not, `{ssh} -- sudo reboot` resumes it")

    def stall(self, state: VmState, step: Step, train_step: int | None) -> str | None:
        """A running step with no new output for its bound (scripts/pipeline/stall.py): neither the log's size
        in the heartbeat grew nor (train) a new training step showed on the console (it goes dark when the
        guest agent stops reading a line over 64 KiB, while the script and its log go on). Only a RUNNING
        VM's step can stall: a stop (maintenance) and a new attempt start the count again."""
        now = clock()
        if not state.running:
            self.output.pause(now)
            return None
        log = state.heartbeat.log if state.heartbeat else None
        found = self.output.observe((state.current, step, train_step, log), train_step, step == "train", now)
        if found is None or (train_step is None and log is None):
            return None
        seen = " and ".join(([f"its last training step is {train_step}"] if train_step is not None else []) +
                            ([f"its log has stayed at {log} bytes"] if log is not None else []))
        return stall_line(step, f"on TPU VM {self.session.settings.vm_name}", seen, found,
                          look_and_stop(self.session, step))
