"""`run`'s own bound of each phase of the VM's startup script outside the steps (boot, install, token,
checking-<step>, done), by this machine's clock: a backstop behind the script's own bounds.

The script bounds each install command that can wait (jobs/vm_install.py INSTALL_BOUNDS, each try of the apt
update loop too) and the token read, so a hung command ends the phase with its failure record. Around them,
though, it uploads records and checks the bucket (records.sh put and object_exists, tried as recipes/outcome.py
VM_SCRIPT_RETRIES.bucket says, each a `gcloud storage` call that retries on its own, up to 32 times with truncated
exponential backoff, Cloud Storage docs storage/docs/retry-strategy), and no `timeout` covers those. The
heartbeat beats on meanwhile, and the stall rule looks at steps only; so `run` bounds each such phase as a
whole: its bounded commands plus a grace for those calls. (A step is bounded by the stall rule instead.)
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.jobs.vm import BOOT, CHECKING, LOG_FILE, ssh_command
from tpu_rl.jobs.vm_install import INSTALL, INSTALL_TOTAL_SECONDS, KILL_AFTER_SECONDS, TOKEN, TOKEN_BOUND
from tpu_rl.recipes import STEPS
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES
from tpu_rl.scripts.pipeline.vm import watch as vm_watch
from tpu_rl.scripts.pipeline.session import Session, hms
from tpu_rl.scripts.pipeline.vm.state import VmState

# One upload or bucket check that fails every try: the pause after each try, the last too (put and list_objects
# sleep before they give up), 150 s.
GCS_RETRY_WAIT_SECONDS = VM_SCRIPT_RETRIES.bucket.pause.seconds * sum(range(1, VM_SCRIPT_RETRIES.bucket.tries + 1))
# The record uploads of a phase (its own, the next phase's first one that ends it, the failure record's),
# with room for gcloud's own retries of each call.
UPLOAD_GRACE_SECONDS = 600
# The install's record uploads (9 of them, one per command and the phase's own) and the failure record's.
INSTALL_GRACE_SECONDS = 1800
INSTALL_WAIT_SECONDS = INSTALL_TOTAL_SECONDS + INSTALL_GRACE_SECONDS
# The token read (its bound and KILL grace), then the uploads.
TOKEN_WAIT_SECONDS = TOKEN_BOUND.seconds + KILL_AFTER_SECONDS + UPLOAD_GRACE_SECONDS
# The checks before a step: its marker and the cancel marker, each retried, then the uploads.
CHECKING_WAIT_SECONDS = 2 * GCS_RETRY_WAIT_SECONDS + UPLOAD_GRACE_SECONDS
# boot: the attempt record and the superseded failure record; done: the last record.
UPLOADS_WAIT_SECONDS = 2 * GCS_RETRY_WAIT_SECONDS + UPLOAD_GRACE_SECONDS


@dataclass(frozen=True)
class PhaseBound:
    seconds: int
    why: str  # what the bound is made of, for the message


def phase_bound(phase: str) -> PhaseBound | None:
    """`run`'s bound of a phase that is not a step (None for a step)."""
    if phase in STEPS:
        return None
    grace = f"{hms(UPLOAD_GRACE_SECONDS)} for its record uploads"
    if phase == INSTALL:
        return PhaseBound(INSTALL_WAIT_SECONDS, f"its commands' {hms(INSTALL_TOTAL_SECONDS)} and "
                                                f"{hms(INSTALL_GRACE_SECONDS)} for its record uploads")
    if phase == TOKEN:
        return PhaseBound(TOKEN_WAIT_SECONDS, f"its read's {hms(TOKEN_BOUND.seconds + KILL_AFTER_SECONDS)} and {grace}")
    if phase.startswith(f"{CHECKING}-"):
        return PhaseBound(CHECKING_WAIT_SECONDS, f"{hms(2 * GCS_RETRY_WAIT_SECONDS)} for its two bucket checks' "
                                                 f"retries and {grace}")
    # boot, done, or a phase of a newer script
    why = "the" if phase == BOOT else "its"
    return PhaseBound(UPLOADS_WAIT_SECONDS, f"{hms(2 * GCS_RETRY_WAIT_SECONDS)} for {why} uploads' retries and "
                                            f"{grace}")


class PhaseWatch:
    """How long the current attempt has been in its current phase outside the steps while the VM is RUNNING,
    by `run`'s clock (a stop, a new attempt or another phase starts the count again)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.seen: tuple[object, float] = (None, 0.0)

    def overrun(self, state: VmState) -> str | None:
        attempt = state.attempt
        bound = phase_bound(attempt.phase) if attempt is not None and attempt.phase else None
        if attempt is None or bound is None or attempt.ended or not state.running or state.failure:
            self.seen = (None, 0.0)
            return None
        key, now = (state.current, attempt.attempt, attempt.phase), vm_watch.clock()  # read only while in one
        if key != self.seen[0]:
            self.seen = (key, now)
            return None
        ran = now - self.seen[1]
        if ran < bound.seconds:
            return None
        ssh, vm = ssh_command(self.session.settings), self.session.settings.vm_name
        last = f" (it last began {attempt.command})" if attempt.command else ""
        return (f"the startup script's {attempt.phase} on TPU VM {vm} has run for {hms(ran)} by this machine's "
                f"clock{last}, past its bound of {hms(bound.seconds)} ({bound.why}) without a failure record: look "
                f"with `{ssh} -- sudo tail -n 50 {LOG_FILE}`, then reboot the VM to retry (`{ssh} -- sudo reboot`)")
