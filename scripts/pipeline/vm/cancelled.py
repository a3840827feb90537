"""What `cancel`, `status` and `run` say of a cancelled run on the VM recipe: `tpu-rl cancel` writes the run's
cancel marker and the startup script stops at it (jobs/vm.py). What the VM does then is what ITS script says
(its POWER_OFF_AFTER_CANCEL_MINUTES line, jobs/vm_outputs.py; an older one's AFTER_RUN), not the local
settings: with VM_AFTER_RUN=stop it stays up for a look and powers itself off, as after a failure, so the run
goes on by a reboot while it is up, or by a new VM once it is off ("You can't restart TPU instances", Compute
Engine docs, compute/docs/instances/stop-start-instance, Limitations)."""

from __future__ import annotations

import re

from tpu_rl.jobs.vm import ssh_command
from tpu_rl.jobs.vm_outputs import NEVER, OFF_AFTER_CANCEL
from tpu_rl.recipes.settings.specs import BY_FIELD, VM_STAYS
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.pipeline.vm.after_run import bounded_stay, destroy, reservation_billing, stays_up_cost
from tpu_rl.scripts.pipeline.vm.checks import STOPPED, deployed_script, redeploy_hint

# A script's word on its cancel (since it has one), and its AFTER_RUN: a keep script never powers off.
_SAYS = re.compile(rf"^readonly {OFF_AFTER_CANCEL}=(\S+)$", re.MULTILINE)
_AFTER_RUN = re.compile(r"^readonly AFTER_RUN=(\S+) ", re.MULTILINE)
UNKNOWN = -1  # off_minutes of a script that does not say (an older tpu-rl's, or none)


def off_minutes(instance) -> int | None:
    """Minutes from the script's stop to its power-off after a cancel, None when it stays up, UNKNOWN."""
    script = deployed_script(instance) if instance is not None else None
    says = _SAYS.search(script or "")
    if says:
        return None if says[1] == NEVER else int(says[1]) if says[1].isdigit() else UNKNOWN
    after_run = _AFTER_RUN.search(script or "")
    return None if after_run and after_run[1] == VM_STAYS else UNKNOWN


def cancelled_at(session: Session) -> str | None:
    """When `tpu-rl cancel` wrote the run's cancel marker (its text), or None when there is none."""
    text = gcs.read_text(session.clients.storage(), session.paths.cancel_marker)
    return None if text is None else text.strip() or "an unknown time"


def is_off(instance) -> bool:
    return instance is not None and instance.status in STOPPED


def go_on_hint(session: Session, instance, off: bool = False) -> str:
    """How a cancelled run goes on: without its marker, a reboot resumes it; a VM that is off (it powered
    itself off after the cancel) cannot be started again, and a new one resumes from the bucket."""
    rm = f"`gcloud storage rm {session.paths.cancel_marker}`"
    new_vm = f"(a TPU VM cannot be started again): {rm}, then {redeploy_hint(session)}"
    if off:
        return f"to go on {new_vm}"
    reboot = f"{rm} and reboot the VM (`{ssh_command(session.settings)} -- sudo reboot`)"
    if off_minutes(instance) is None:
        return (f"to go on, {reboot}: its startup script then resumes at the first step not done (train from its "
                "last checkpoint)")
    return f"to go on while it is up, {reboot}; once it is off {new_vm}"


def cancel_stay(session: Session, instance) -> str:
    """What the VM does after the cancel, as its own script says: a bounded stay (a failure's wording), or
    it stays up and bills, or (a script that does not say) that its script decides."""
    minutes, name = off_minutes(instance), session.recipe.name
    if minutes is None:
        return (f"the VM stays up ({BY_FIELD['vm_after_run'].env}={VM_STAYS} in its startup script) and bills "
                f"{stays_up_cost(session)} until {destroy(session)} (or the next deploy replaces it)")
    if minutes == UNKNOWN:
        return ("the VM's startup script (from another tpu-rl) decides whether it powers itself off after the "
                f"cancel: `tpu-rl status {name}` shows whether it is up, {destroy(session)} stops it")
    return bounded_stay(session, "its script stops (not before its bounded install ends)", minutes)


def cancelled_note(session: Session, at: str, instance) -> str:
    """`status` (and a second `cancel`) of a cancelled run: what its VM does or did, and how the run goes on."""
    run = session.paths.run_name
    if is_off(instance):
        return (f"run {run} was cancelled at {at}; the VM is off: only its boot disk bills, until "
                f"{destroy(session)}{reservation_billing(session)}; {go_on_hint(session, instance, off=True)}")
    return f"run {run} was cancelled at {at}; {cancel_stay(session, instance)}; {go_on_hint(session, instance)}"

