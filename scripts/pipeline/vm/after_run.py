"""What `run`, its dry run, `status` and `run --detach` say about the VM recipe's TPU VM after its run: it stops
itself once its startup script verified every output (VM_AFTER_RUN=stop, jobs/vm_outputs.py), or stays up
(VM_AFTER_RUN=keep), and after a failure or a cancel stays up for a bounded look; and, once it stopped, that it
bills only its boot disk and how the next run starts. A TPU VM cannot be started again ("You can't restart TPU
instances", Compute Engine docs, compute/docs/instances/stop-start-instance, Limitations), so the next run is a
new VM: `cdktf deploy` replaces it when the recipe changed (its startup script names the run); the same run
again needs the old VM deleted first."""

from __future__ import annotations

from tpu_rl.jobs.vm_outputs import (FAILURE_STAY_MINUTES, KEEP_UP_WITHIN_MINUTES, NOLOGIN_MINUTES, UNKNOWN_INSTANCE,
                                    after_run_setting)
from typing import Protocol

from tpu_rl.recipes import Recipe, Settings, Step
from tpu_rl.recipes.costs.run import hourly_estimate
from tpu_rl.recipes.costs.standing import account, idle_bill, reservation_line, stop_command, vm_standing_cost
from tpu_rl.recipes.settings.specs import BY_FIELD, VM_STAYS, VM_STOPS
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.pipeline.vm.state import Attempt, Failure, parse_time


class Planned(Protocol):
    """What the lines of what the VM does after its run read of a session: a plan made without the cloud
    (a dry run, `render`) has these alone."""

    @property
    def recipe(self) -> Recipe: ...

    @property
    def settings(self) -> Settings: ...


def stop_record(session: Session, instance=None) -> Attempt | None:
    """The startup script's stop record of this run (paths.vm_stop: its attempt, time and instance), when it
    exists and, given the instance, that instance wrote it: a stopped TPU VM never boots again, so a record of
    another instance is an earlier VM's, whose stop says nothing of this one."""
    record = Attempt.parse(gcs.read_text(session.clients.storage(), session.paths.vm_stop))
    if record is None or instance is None:
        return record
    return record if _written_by(record, instance) else None


def _written_by(record: Attempt, instance) -> bool:
    """The record names the instance's id; one without it (a script that could not read it, or an older
    script's) counts when written since the instance was created."""
    own = str(getattr(instance, "id", "") or "")
    if own and record.instance not in ("", UNKNOWN_INSTANCE):
        return record.instance == own
    at, created = parse_time(record.at), parse_time(getattr(instance, "creation_timestamp", ""))
    return at is None or created is None or at >= created.replace(microsecond=0)


def step_again_hint(session: Session) -> str:
    """What makes the startup script run a finished step again: it skips a step by its progress marker."""
    paths = session.paths
    return (f"delete the step's outputs AND its progress marker ({paths.run_marker(paths.run_name, '<step>')}; "
            f"convert's: {paths.progress_marker('convert')}): the startup script skips a step by its marker")


def next_run_hint(session: Session) -> str:
    name, settings = session.recipe.name, session.settings
    return (f"a new run: change rl.overrides in recipes.toml, then `npx cdktf deploy {name}` (it replaces the VM, "
            f"whose startup script names the run) and `tpu-rl run {name}`; this run again: "
            f"{step_again_hint(session)}, then `gcloud compute instances delete {settings.vm_name} "
            f"--zone={settings.zone} --project={settings.project}` and `npx cdktf deploy {name}`")


def reservation_billing(session: Planned) -> str:
    """What neither a reservation-bound VM's stop nor the stack's destroy ends, in the standing account's
    words (recipes/costs/standing.py reservation_line); "" without a reservation."""
    line = reservation_line(vm_standing_cost(session.recipe, vm_up=False))
    return f"; {line}" if line else ""


def destroy(session: Planned) -> str:
    """The command that ends what the VM's stack bills, as every output names it (standing.py stop_command)."""
    return stop_command(session.recipe)


def standing_account(session: Session) -> list[str]:
    """What the VM's stack bills with no run, in the words `runs`, `recipes` and the README use (standing.py
    account): the VM is up after its run only with VM_AFTER_RUN=keep."""
    recipe = session.recipe
    return account(idle_bill(recipe, vm_up=session.settings.vm_after_run == VM_STAYS), recipe)


def stopped_line(session: Session, record: Attempt) -> str:
    """`status` and `run` on a VM that stopped itself."""
    vm = session.settings.vm_name
    return (f"TPU VM {vm} stopped itself at {record.at} after its startup script verified every output of run "
            f"{session.paths.run_name} ({after_run_setting(session.settings)}): it bills only its boot disk now, "
            f"until {destroy(session)}{reservation_billing(session)}; a TPU VM cannot be started again: "
            f"{next_run_hint(session)}")


def stays_up_cost(session: Planned) -> str:
    return hourly_estimate(session.recipe, zones=session.settings.zones_for(session.recipe)).summary()


def after_run_line(session: Planned) -> str:
    """What the VM does once the run is verified, as `run` and its dry run say it before it happens."""
    vm, settings = session.settings.vm_name, session.settings
    if settings.vm_after_run == VM_STAYS:
        return (f"after the run: TPU VM {vm} stays up ({after_run_setting(settings)}) and bills "
                f"{stays_up_cost(session)} until {destroy(session)}")
    reserved = reservation_billing(session)
    idle = "its VM charges end" if reserved else "no idle cost"
    return (f"after the run: TPU VM {vm} stops itself once its startup script verified every output "
            f"({after_run_setting(settings)}; {BY_FIELD['vm_after_run'].env}={VM_STAYS} keeps it up): {idle}, "
            f"only its boot disk bills until {destroy(session)}{reserved}")


def done_billing(session: Session, instance) -> str:
    """The last `next:` line of a finished run on the VM: what still bills, instead of the stack's hourly cost."""
    vm = session.settings.vm_name
    record = stop_record(session, instance) if instance is not None else None
    if record is not None and instance.status != "RUNNING":
        return stopped_line(session, record)
    if record is not None:  # its power-off did not happen, and its script ran again by hand: it ran nothing
        return (f"TPU VM {vm} runs again after it stopped itself at {record.at}; its startup script ran nothing "
                f"and keeps it up {FAILURE_STAY_MINUTES} min for a look, then powers it off (`sudo shutdown -c` on "
                f"it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, billing {stays_up_cost(session)} until "
                f"{destroy(session)})")
    if session.settings.vm_after_run == VM_STOPS:
        earlier = stop_record(session) if instance is not None else None
        again = (f" (it is a new VM: run {session.paths.run_name}'s earlier VM stopped itself at {earlier.at}; "
                 "this one verifies the outputs again at boot)") if earlier is not None else ""
        return (f"TPU VM {vm} stops itself once its startup script verified every output{again} "
                f"(it checks them itself): then only its boot disk bills, until {destroy(session)}"
                f"{reservation_billing(session)}; {next_run_hint(session)}")
    return after_run_line(session).removeprefix("after the run: ")


def marked(session: Session, steps: list[Step]) -> list[Step]:
    """The steps of `steps` whose progress marker exists: the startup script skips them (jobs/vm.py)."""
    storage = session.clients.storage()
    return [step for step in steps if gcs.exists(storage, session.paths.progress_marker(step))]


def marked_but_missing(session: Session, steps: list[Step], then: str) -> str:
    """`run --detach` of steps whose output is gone but whose marker is not: the VM would run nothing."""
    return (f"{', '.join(steps)} of run {session.paths.run_name} is not verified in the bucket, but its progress "
            f"marker exists, so the startup script would skip it: {step_again_hint(session)}; then {then}")


def stopped_before(session: Session, record: Attempt, pending: list[Step]) -> str:
    """`run` of a step whose VM already stopped itself (its output went away since): the VM cannot run it."""
    return (f"{pending[0]} of run {session.paths.run_name} is not done, but TPU VM {session.settings.vm_name} "
            f"stopped itself at {record.at} after verifying every output, and a TPU VM cannot be started again: "
            f"{next_run_hint(session)}")



def detached(session: Session, pending: list[Step]) -> None:
    """`run --detach`: the startup script runs the steps on the VM whether or not anyone follows it."""
    name, vm = session.recipe.name, session.settings.vm_name
    console = session.console
    console.print(f"detached: the startup script of TPU VM {vm} runs {', '.join(pending)} of run "
                  f"{session.paths.run_name} on its own; nothing waits here. Follow it with:")
    for command in (f"  `tpu-rl status {name}`  (each step; whether the VM stopped itself)",
                    f"  `tpu-rl logs {name} {pending[0]}`  (a step's log)",
                    f"  `tpu-rl runs {name}`  (this run among the others)",
                    f"  `tpu-rl run {name}`  (attach: follow and verify each output)",
                    f"  `tpu-rl cancel {name}`  (stop it; outputs are kept)"):
        console.print(command, soft_wrap=True)  # commands are copied: never wrapped
    console.print(after_run_line(session))


def bounded_stay(session: Session, after: str, minutes: int | None = None) -> str:
    """What the VM does after a failure or a cancel (jobs/vm_outputs.py power_after), one wording for both:
    `minutes` is the deployed script's own (a cancel's); None takes the local setting's, "" with
    VM_AFTER_RUN=keep, which leaves it up."""
    if minutes is None:
        if session.settings.vm_after_run != VM_STOPS:
            return ""
        minutes = FAILURE_STAY_MINUTES
    return (f"the VM stays up {minutes} min after {after} for a look (`sudo shutdown -c` on it within "
            f"{minutes - NOLOGIN_MINUTES} min keeps it up), then powers itself off and bills only its boot disk, "
            f"until {destroy(session)}{reservation_billing(session)}")


def failure_stay(session: Session) -> str:
    """What a failed run's VM does next, for the failure's message."""
    stay = bounded_stay(session, "the failure")
    return f"; {stay}" if stay else ""


def powered_off_after_failure(session: Session, instance, pending: list[Step]) -> str | None:
    """The line for a VM that powered itself off after its run failed (it keeps a failed VM up for a bounded
    look first), or None: its failure record is there and the VM stopped after it."""
    if session.settings.vm_after_run != VM_STOPS:
        return None
    failure = Failure.parse(gcs.read_text(session.clients.storage(), session.paths.vm_failure))
    stopped, failed = (parse_time(value) for value in (getattr(instance, "last_stop_timestamp", ""),
                                                       failure.at if failure else ""))
    if failure is None or stopped is None or failed is None or stopped < failed:
        return None
    what = f"step {failure.phase}" if failure.phase in pending else f"its {failure.phase}"
    return (f"TPU VM {session.settings.vm_name} powered itself off at {stopped:%Y-%m-%dT%H:%M:%SZ}, "
            f"{FAILURE_STAY_MINUTES} min after {what} failed (exit {failure.code}, attempt {failure.attempt}): "
            f"{failure.last_line[:200]!r}; a TPU VM cannot be started again: fix the cause, then `gcloud compute "
            f"instances delete {session.settings.vm_name} --zone={session.settings.zone} "
            f"--project={session.settings.project}` and `npx cdktf deploy {session.recipe.name}`: the new VM "
            f"resumes at {pending[0]}")
