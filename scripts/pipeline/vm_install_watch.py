"""`run`'s own bound of the VM's install phase, by this machine's clock: a backstop behind the script's.

The script bounds each install command that can wait (jobs/vm_install.py INSTALL_BOUNDS, each try of the apt
update loop too), so a hung command ends the phase with its failure record. Between the commands, though, it
uploads its attempt record (jobs/vm.py put: 5 tries, each a `gcloud storage cp` that retries on its own, up to
32 times with truncated exponential backoff, Cloud Storage docs storage/docs/retry-strategy), and no `timeout`
covers those. The heartbeat beats on meanwhile, and the stall rule looks at steps only; so `run` bounds the
phase as a whole: the sum of the commands' bounds plus a grace for those uploads.
"""

from __future__ import annotations

from jobs.vm import LOG_FILE, ssh_command
from jobs.vm_install import INSTALL, INSTALL_TOTAL_SECONDS
from scripts.pipeline import vm_watch
from scripts.pipeline.session import Session, hms
from scripts.pipeline.vm_state import VmState

# The record uploads of the install (9 of them, one per command and the phase's own) and the failure record's.
INSTALL_GRACE_SECONDS = 1800
INSTALL_WAIT_SECONDS = INSTALL_TOTAL_SECONDS + INSTALL_GRACE_SECONDS


class InstallWatch:
    """How long the current attempt has been in its install phase while the VM is RUNNING, by `run`'s clock
    (a stop, a new attempt or another phase starts the count again)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.seen: tuple[object, float] = (None, 0.0)

    def overrun(self, state: VmState) -> str | None:
        attempt = state.attempt
        installing = (attempt is not None and attempt.phase == INSTALL and not attempt.ended and state.running
                      and not state.failure)
        if not installing:
            self.seen = (None, 0.0)
            return None
        key, now = (state.current, attempt.attempt), vm_watch.clock()  # the clock is read only while installing
        if key != self.seen[0]:
            self.seen = (key, now)
            return None
        ran = now - self.seen[1]
        if ran < INSTALL_WAIT_SECONDS:
            return None
        ssh, vm = ssh_command(self.session.settings), self.session.settings.vm_name
        last = f" (it last began {attempt.command})" if attempt.command else ""
        return (f"the startup script's install on TPU VM {vm} has run for {hms(ran)} by this machine's clock{last}, "
                f"past its bound of {hms(INSTALL_WAIT_SECONDS)} (its commands' {hms(INSTALL_TOTAL_SECONDS)} and "
                f"{hms(INSTALL_GRACE_SECONDS)} for its record uploads) without a failure record: look with `{ssh} "
                f"-- sudo tail -n 50 {LOG_FILE}`, then reboot the VM to retry (`{ssh} -- sudo reboot`)")
