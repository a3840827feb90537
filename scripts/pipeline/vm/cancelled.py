"""What `cancel`, `status` and `run` say of a cancelled run on the VM recipe: `tpu-rl cancel` writes the run's
cancel marker and the startup script stops at it (jobs/vm.py); with VM_AFTER_RUN=stop the VM then stays up
for a look and powers itself off, as after a failure (jobs/vm_outputs.py power_after), so the run goes on by a
reboot while it is up, or by a new VM once it is off ("You can't restart TPU instances", Compute Engine docs,
compute/docs/instances/stop-start-instance, Limitations)."""

from __future__ import annotations

from tpu_rl.jobs.vm import ssh_command
from tpu_rl.recipes.settings.specs import VM_STOPS
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.pipeline.vm.after_run import after_run_setting, bounded_stay, reservation_billing, stays_up_cost
from tpu_rl.scripts.pipeline.vm.checks import STOPPED, redeploy_hint


def cancelled_at(session: Session) -> str | None:
    """When `tpu-rl cancel` wrote the run's cancel marker (its text), or None when there is none."""
    text = gcs.read_text(session.clients.storage(), session.paths.cancel_marker)
    return None if text is None else text.strip() or "an unknown time"


def is_off(instance) -> bool:
    return instance is not None and instance.status in STOPPED


def go_on_hint(session: Session, off: bool = False) -> str:
    """How a cancelled run goes on: without its marker, a reboot resumes it; a VM that is off (it powered
    itself off after the cancel) cannot be started again, and a new one resumes from the bucket."""
    rm = f"`gcloud storage rm {session.paths.cancel_marker}`"
    if off:
        return f"to go on (a TPU VM cannot be started again): {rm}, then {redeploy_hint(session)}"
    reboot = f"to go on, {rm} and reboot the VM (`{ssh_command(session.settings)} -- sudo reboot`)"
    if session.settings.vm_after_run != VM_STOPS:
        return f"{reboot}: its startup script then resumes at the first step not done (train from its last checkpoint)"
    return f"{reboot} or, once it is off (a TPU VM cannot be started again), {redeploy_hint(session)}"


def cancel_stay(session: Session) -> str:
    """What the VM does after the cancel: what it does after a failure, or (keep) it stays up and bills."""
    return bounded_stay(session, "the cancel") or (
        f"the VM stays up ({after_run_setting(session.settings)}) and bills {stays_up_cost(session)} until "
        f"`npx cdktf destroy {session.recipe.name}` (or the next deploy replaces it)")


def cancelled_note(session: Session, at: str, instance) -> str:
    """`status` (and a second `cancel`) of a cancelled run: what its VM does or did, and how the run goes on."""
    run, name = session.paths.run_name, session.recipe.name
    if is_off(instance):
        return (f"run {run} was cancelled at {at}; the VM is off: only its boot disk bills, until `npx cdktf "
                f"destroy {name}`{reservation_billing(session)}; {go_on_hint(session, off=True)}")
    return f"run {run} was cancelled at {at}; {cancel_stay(session)}; {go_on_hint(session)}"
