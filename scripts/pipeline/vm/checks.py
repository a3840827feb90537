"""What `tpu-rl run` checks of the VM recipe's TPU VM before and while it follows the startup script: the
instance, its startup script, the token version it will read, and a stop by host maintenance or by the
script itself (after a failure or a cancel: a TPU VM cannot be started again)."""

from __future__ import annotations

import re
from datetime import datetime

from google.api_core import exceptions as gexc

from tpu_rl.jobs import render_startup_script
from tpu_rl.jobs.vm import RUN_ASSIGNMENT, ssh_command
from tpu_rl.jobs.vm_outputs import CANCELLED
from tpu_rl.recipes import Step, UserError
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.recipes.outcome import StepFailed
from tpu_rl.scripts.cloud import gcs, hf_token
from tpu_rl.scripts.pipeline.session import Session, hms
from tpu_rl.scripts.pipeline.vm.state import Attempt, Failure, METADATA_KEY, parse_time

# Instance statuses in which the startup script does not run: a TPU VM stops only for host maintenance,
# Compute Engine starts it again and a user cannot (Compute Engine docs, compute/docs/instances/
# stop-start-instance, Limitations), so `run` waits Session.maintenance_grace from the stop (docs/provenance.md#a-stopped-tpu-vm).
STOPPED = {"STOPPED", "STOPPING", "TERMINATED", "SUSPENDED", "SUSPENDING", "REPAIRING"}
# On its way back (Compute Engine API, Instance status): bounded by the same grace, from the stop.
STARTING_UP = {"PROVISIONING", "STAGING"}


def read_instance(session: Session):
    """The TPU VM's Compute Engine instance (gexc.NotFound when it does not exist): the first contact of
    every VM command, bounded as the bucket's and the cluster's are (tpu_rl.scripts.cloud.reach): the client has
    no timeout of its own, so an endpoint that never answers kept `status` silent for good."""
    settings = session.settings
    return session.clients.within(
        f"the Compute Engine API for TPU VM '{settings.vm_name}'", "compute",
        lambda timeout: session.clients.instances().get(project=settings.project, zone=settings.zone,
                                                        instance=settings.vm_name, timeout=timeout))


def get_instance(session: Session):
    settings = session.settings
    try:
        return read_instance(session)
    except gexc.NotFound:
        raise NotDeployed(f"TPU VM '{settings.vm_name}' not found in zone {settings.zone}: deploy it with "
                        f"`npx cdktf deploy {session.recipe.name}` (or set TPU_NAME)") from None


def deployed_script(instance) -> str | None:
    items = instance.metadata.items if instance.metadata else []
    return next((item.value for item in items if item.key == METADATA_KEY), None)


def check_deployed_script(session: Session, instance) -> None:
    """Refuse unless the VM's startup script is the one the recipe renders now. The stack passes it as
    metadata_startup_script, which the provider replaces the instance for when it changes (hashicorp/google
    6.50.0 resource_compute_instance.go: ForceNewIf on metadata_startup_script, while the `metadata` map is
    updated in place with setMetadata), and startup scripts run only at boot: without this, a changed recipe
    would leave the old script running and `run` would follow the wrong run."""
    deployed = deployed_script(instance)
    if deployed == render_startup_script(session.spec, session.settings):
        return
    vm, name, run = session.settings.vm_name, session.recipe.name, session.paths.run_name
    match = RUN_ASSIGNMENT.search(deployed or "")
    has = (f"the startup script of run {match['run']}" if match else "another startup script") if deployed \
        else "no startup script"
    same_run = " (same run, another script: tpu-rl or the settings changed)" if match and match["run"] == run else ""
    raise UserError(f"TPU VM {vm} has {has}, not the one recipe '{name}' renders now for run {run}{same_run}: "
                    f"`npx cdktf deploy {name}` replaces the VM with it (the plan shows the replacement; it "
                    "kills a running step, so deploy between steps; the bucket keeps the finished steps and the "
                    "new VM resumes after them)")


# What names the run in the rendered script (jobs/vm.py): its run and the cancel marker it polls.
RUN_IDENTITY = re.compile(r"^readonly (?:RUN|CANCEL_MARKER)=.*$", re.MULTILINE)


def check_deployed_run(session: Session, instance) -> str:
    """For `cancel` and `status`: refuse (as check_deployed_script) only when the VM's script is another
    run's (its RUN and CANCEL_MARKER lines differ): the same run's script polls this run's cancel marker and
    writes this run's records. Returns a note when it is the same run's but differs from the rendered one."""
    deployed, rendered = deployed_script(instance), render_startup_script(session.spec, session.settings)
    if deployed == rendered:
        return ""
    if deployed and RUN_IDENTITY.findall(deployed) == RUN_IDENTITY.findall(rendered):
        name = session.recipe.name
        return (f"the VM's startup script (run {session.paths.run_name}) differs from the one recipe '{name}' "
                f"renders now: `npx cdktf deploy {name}` applies it (it replaces the VM; deploy between steps)")
    check_deployed_script(session, instance)
    return ""


def require_token_version(session: Session) -> None:
    """The startup script reads the token's latest version at boot; without an enabled one it can only fail."""
    settings = session.settings
    clients = session.clients
    reboot = (f"the VM's startup script reads it at boot, so reboot the VM after that "
              f"(`{ssh_command(settings)} -- sudo reboot`)")
    if not hf_token.enabled_versions(clients, settings):
        raise UserError(f"secret '{settings.hf_token_secret}' has no enabled version: "
                        f"{hf_token.no_version_fix(settings)}; {reboot}")
    # The script reads `latest`, the newest version: an older enabled one does not help it.
    try:
        latest = hf_token.latest_version(clients, settings)
    except (gexc.PermissionDenied, gexc.Forbidden):
        raise hf_token.versions_denied(settings) from None
    if latest.state.name != "ENABLED":
        raise UserError(f"the latest version of secret '{settings.hf_token_secret}' is "
                        f"{latest.state.name.lower()}, and the VM's startup script reads the latest: "
                        f"{hf_token.no_version_fix(settings)}; {reboot}")


def redeploy_hint(session: Session) -> str:
    settings = session.settings
    return (f"`gcloud compute instances delete {settings.vm_name} --zone={settings.zone} "
            f"--project={settings.project}`, then `npx cdktf deploy {session.recipe.name}`: the new VM's startup "
            "script resumes at the first step not done (train from its last checkpoint)")


def powered_off_after_cancel(session: Session, instance) -> str | None:
    """The line for a VM that powered itself off after a cancel whose marker is gone since (with it, `run`
    refuses and `status` says so first), or None: its attempt ended cancelled and the VM stopped after."""
    if instance is None or instance.status not in STOPPED:
        return None
    attempt = Attempt.parse(gcs.read_text(session.clients.storage(), session.paths.vm_attempt))
    if attempt is None or attempt.ended != CANCELLED:
        return None
    stopped, ended = parse_time(getattr(instance, "last_stop_timestamp", "")), parse_time(attempt.at)
    if stopped is None or ended is None or stopped < ended:
        return None
    return (f"TPU VM {session.settings.vm_name} powered itself off at {stopped:%Y-%m-%dT%H:%M:%SZ}, after its "
            f"attempt {attempt.attempt} of run {session.paths.run_name} was cancelled; a TPU VM cannot be started "
            f"again: {redeploy_hint(session)}")


class Maintenance:
    """A TPU VM that stopped: wait for Compute Engine to start it again, Session.maintenance_grace at most; a VM
    that stopped itself after its run (its stop record, jobs/vm_outputs.py) does not come back."""

    def __init__(self, session: Session) -> None:
        self.session, self.instance = session, None
        self.since: datetime | None = None  # when the stop was seen

    def _stopped_itself(self, pending: list[Step]) -> bool:
        from tpu_rl.scripts.pipeline.vm.after_run import marked, powered_off_after_failure, stop_record, stopped_before

        session = self.session
        record = stop_record(session, self.instance)
        if record is None:
            powered_off = (powered_off_after_failure(session, self.instance, pending)
                           or powered_off_after_cancel(session, self.instance))
            if powered_off:
                raise StepFailed(powered_off)
            return False
        if len(marked(session, pending)) < len(pending):
            raise StepFailed(stopped_before(session, record, pending))
        return True

    def _unrecorded_power_off(self, status: str) -> str:
        """A VM its script powered off before gcloud came up leaves no record (jobs/vm.py on_exit), and
        never comes back: a TPU VM cannot be started again. The delete-and-deploy hint, for that case."""
        session = self.session
        failure = Failure.parse(gcs.read_text(session.clients.storage(), session.paths.vm_failure))
        if status != "TERMINATED" or failure is not None:
            return ""
        return (f"; it left no stop or failure record: if its startup script powered it off because gcloud never "
                f"came up at boot, it will not come back: {redeploy_hint(session)}")

    def check(self, pending: list[Step]) -> None:
        session, vm = self.session, self.session.settings.vm_name
        try:
            instance = get_instance(session)
            self.instance, status = instance, instance.status
        except UserError:
            raise StepFailed(f"TPU VM {vm} no longer exists before {pending[0]} finished (a spot or "
                             "reservation-bound TPU VM is deleted when Compute Engine reclaims it): "
                             f"`npx cdktf deploy {session.recipe.name}` creates it again and its startup script "
                             "resumes at the first step not done") from None
        now: datetime = session.now()
        if status in STOPPED and self._stopped_itself(pending):
            return  # the script verified every output and powered the VM off: `run` verifies them in turn
        if status not in STOPPED | STARTING_UP:
            if self.since is not None:
                session.console.print(f"TPU VM {vm} is {status} again: its startup script resumes at the first "
                                      "step not done")
                self.since = None
            return
        if self.since is None:
            # The grace counts from the stop itself (Instance lastStopTimestamp), not from when `run` saw it.
            stop, start = (parse_time(getattr(self.instance, name, "")) for name in ("last_stop_timestamp",
                                                                                     "last_start_timestamp"))
            self.since = stop if stop and (start is None or stop >= start) else now
            session.console.print(f"TPU VM {vm} is {status} (host maintenance stops TPU VMs, and Compute Engine "
                                  f"restarts them): waiting up to {hms(session.maintenance_grace)} from its stop"
                                  + self._unrecorded_power_off(status))
        stopped = (now - self.since).total_seconds()
        if stopped >= session.maintenance_grace:
            raise StepFailed(f"TPU VM {vm} is still {status} {hms(stopped)} after it stopped, before {pending[0]} "
                             f"finished (the grace: {hms(session.maintenance_grace)}); a TPU VM cannot be started "
                             "again by hand, but maintenance may keep it away up to a few hours (`tpu-rl run` again "
                             f"follows it when it is back); else {redeploy_hint(session)}")
