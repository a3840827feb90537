"""Capacity modes, the ways of getting TPUs (recipes.toml `capacity`, the CAPACITY setting): every fact the
code decides on a mode by, in one table (MODE_RULES); the rules a recipe's ordered capacity list must meet
on its platform (whose facts, recipes/platforms/, say which modes it takes); and how long `run` waits for
each mode (CAPACITY_WAIT).

A CapacityMode is a str Enum whose values are the strings recipes.toml, the settings and run.json use. A
member equals and hashes as its string, so MODE_RULES answers for either; recipes and settings hold the
plain strings (`Recipe.capacity`, CAPACITY_MODES), so Terraform, the manifests and run.json get exactly
those. Code elsewhere asks a mode's rule or names a member, never writes a mode's string
(tests/test_capacity_modes.py); a new mode is a row here and what docs/development.md lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence

from tpu_rl.recipes.errors import UserError

if TYPE_CHECKING:
    from tpu_rl.recipes.catalog.facts import TpuGeneration


class CapacityMode(StrEnum):
    RESERVATION = "reservation"
    FLEX_START = "flex-start"
    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True)
class ModeRules:
    """What one capacity mode means, wherever the code decides on a mode."""

    wait_seconds: float  # CAPACITY_WAIT's default: how long `run` waits for the capacity before the next mode
    # Draws on the reservation RESERVATION names: the pools or the VM bind to it, it lives in its zone (the
    # first of ZONE), preflight reads it, and the cost estimate prices the term, used or not.
    reservation: bool
    # Its GKE pools scale from zero, so their hosts exist (and bill) only while a train step runs; without it
    # a pool holds every host from deploy to destroy, as a reservation bills its term anyway.
    scales_to_zero: bool
    spot: bool  # spare capacity Google reclaims at any time with 30 s notice: GKE's spot pool, a preemptible VM
    # A slice may go away while a step runs (reclaimed, or at its max run duration), so the train JobSet
    # restarts from its checkpoint (jobs/train.py) instead of failing.
    preemptible: bool
    # GKE's Dynamic Workload Scheduler provisions the whole slice for one workload, through a
    # ProvisioningRequest (Kueue's admission check), for at most tpu.flex_start_max_run_hours.
    queued_provisioning: bool
    quota: str | None  # the regional quota it draws on, a field of [tpu.<generation>.quota]; None: its own
    # Compute Engine's scheduling.provisioningModel of a TPU VM on it; None: a TPU VM does not take it.
    vm_provisioning_model: str | None
    vm_deleted_when_reclaimed: bool  # a TPU VM on it is deleted, not stopped, when its capacity goes away
    # Its pools, Kueue flavor and construct ids keep the names stacks had before capacity lists (tpu-np-0,
    # tpu, tpu-slice-0), so a deployed stack keeps them; the other modes' carry the mode (tpu-np-spot-0).
    legacy_names: bool


# The waits are this project's choice, not an upstream value: long enough for a cold pool of a multi-host
# slice to scale from zero and pull its images, and for flex-start a few hours, since GKE's Dynamic
# Workload Scheduler queues a request until the whole slice can be had. RESERVATION_BOUND is passed
# through unvalidated by hashicorp/google 6.50.0 (formal support arrived in 7.x); the API accepts it.
MODE_RULES: Mapping[CapacityMode, ModeRules] = {
    CapacityMode.RESERVATION: ModeRules(
        wait_seconds=30 * 60, reservation=True, scales_to_zero=False, spot=False, preemptible=False,
        queued_provisioning=False, quota=None, vm_provisioning_model="RESERVATION_BOUND",
        vm_deleted_when_reclaimed=True, legacy_names=True),
    CapacityMode.FLEX_START: ModeRules(
        wait_seconds=4 * 3600, reservation=False, scales_to_zero=True, spot=False, preemptible=True,
        queued_provisioning=True, quota="preemptible", vm_provisioning_model=None,
        vm_deleted_when_reclaimed=True, legacy_names=False),
    CapacityMode.SPOT: ModeRules(
        wait_seconds=30 * 60, reservation=False, scales_to_zero=True, spot=True, preemptible=True,
        queued_provisioning=False, quota="preemptible", vm_provisioning_model="SPOT",
        vm_deleted_when_reclaimed=True, legacy_names=False),
    CapacityMode.ON_DEMAND: ModeRules(
        wait_seconds=30 * 60, reservation=False, scales_to_zero=True, spot=False, preemptible=False,
        queued_provisioning=False, quota="on_demand", vm_provisioning_model="STANDARD",
        vm_deleted_when_reclaimed=False, legacy_names=False),
}
# Every mode's value, in the order messages list them.
CAPACITY_MODES: tuple[str, ...] = tuple(mode.value for mode in CapacityMode)

def uses_reservation(modes: Iterable[CapacityMode]) -> bool:
    """Whether a mode of `modes` draws on the reservation RESERVATION names."""
    return any(MODE_RULES[mode].reservation for mode in modes)


def uses_queued_provisioning(modes: Iterable[CapacityMode]) -> bool:
    """Whether a mode of `modes` gets its slice through a ProvisioningRequest (flex-start)."""
    return any(MODE_RULES[mode].queued_provisioning for mode in modes)


def parse_capacity(value: object) -> tuple[CapacityMode, ...]:
    """'reservation,flex-start' or ["spot", "on-demand"] -> an ordered tuple of known, distinct modes."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise ValueError("must be a capacity mode or a comma-separated list of them")
    modes = [mode for mode in (str(item).strip() for item in items) if mode]
    unknown = [mode for mode in modes if mode not in CAPACITY_MODES]
    if unknown or not modes:
        raise ValueError(f"'{','.join(modes)}' names {', '.join(repr(m) for m in unknown) or 'no mode'}: use one "
                         f"or an ordered comma-separated list of {', '.join(CAPACITY_MODES)}")
    if len(set(modes)) != len(modes):
        raise ValueError(f"'{','.join(modes)}' names a mode twice")
    return tuple(modes)  # type: ignore[arg-type]  # the members' plain strings, as recipes hold them (see above)


class TakesCapacity(Protocol):
    """A platform, as the capacity rules ask it (recipes/platforms PlatformFacts)."""

    def refuses_capacity(self, capacity: Sequence[str]) -> str | None: ...


def check_capacity(name: str, platform: TakesCapacity, capacity: tuple[CapacityMode, ...], facts: TpuGeneration,
                   max_run_hours: int | None, source: str) -> None:
    """The rules a capacity list must meet for a recipe on `platform`; UserError naming `source` (the field
    or setting)."""
    where = f"{source} '{','.join(capacity)}' for recipe '{name}'"
    refusal = platform.refuses_capacity(capacity)
    if refusal:
        raise UserError(f"{where}: {refusal}")
    if facts.flex_start and max_run_hours and max_run_hours > facts.flex_start.max_run_hours:
        raise UserError(f"recipe '{name}': tpu.flex_start_max_run_hours is {max_run_hours}; flex-start nodes run "
                        f"at most {facts.flex_start.max_run_hours} hours")
    if uses_queued_provisioning(capacity):
        if facts.flex_start is None:
            raise UserError(f"{where}: TPU {facts.gke_accelerator} is not offered through flex-start")
        if max_run_hours is None:
            raise UserError(f"{where}: flex-start needs tpu.flex_start_max_run_hours (how long a node may run)")


# --- CAPACITY_WAIT: how long `run` waits for each mode's capacity (its wait_seconds unless set) before the
# next place, and (`cpu`) for a node of the CPU pool for a convert or export step or a train step's Pathways
# head before it stops. A mode's wait is the time the TPU workers go without all having a node on it: queued
# in Kueue, a flex-start request not yet provisioned, or admitted with no stock in the zone; what `run` does
# past it is scripts/pipeline/gke/capacity.py's (docs/capacity.md#capacity-that-goes-away).
CPU = "cpu"  # the key of a CPU step's wait: a node of the CPU pool (convert, export)
# How long an attempt may have every pod on a node but not every pod Ready: the Job's restarts and a failing
# image pull never end it, so without this a slice bills for hours; our choice, as long as
# stall.QUIET_STALL_SECONDS (docs/provenance.md#start-bounds-ready_wait).
READY_WAIT_SECONDS = 90 * 60
WaitKey = str  # a wait's key: a mode's plain string (as CAPACITY_MODES holds it) or CPU
WAIT_KEYS: tuple[str, ...] = (*CAPACITY_MODES, CPU)
DEFAULT_WAIT_SECONDS: Mapping[str, float] = {
    **{mode.value: rules.wait_seconds for mode, rules in MODE_RULES.items()},
    CPU: 30 * 60,  # a node of the CPU pool scaling up from zero, and its image pull
}
DEFAULT_WAITS: tuple[tuple[WaitKey, float], ...] = tuple((key, DEFAULT_WAIT_SECONDS[key]) for key in WAIT_KEYS)
_UNITS = {"s": 1, "m": 60, "h": 3600}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh])$")


def _seconds(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"'{text.strip()}' is not a duration: a positive number with s, m or h, e.g. 30m or 4h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_capacity_wait(text: str) -> tuple[tuple[WaitKey, float], ...]:
    """'45m' (every mode, and cpu) or 'flex-start=6h,cpu=1h' (those; the others keep their default) ->
    the wait of every mode and of cpu, in seconds, in WAIT_KEYS order."""
    waits: dict[str, float] = dict(DEFAULT_WAIT_SECONDS)
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("is empty: give a duration such as 30m, or mode=duration pairs such as flex-start=6h,spot=20m")
    named = [item.partition("=")[0].strip() for item in items]
    twice = next((mode for index, mode in enumerate(named) if mode in named[:index]), None)
    if twice:  # which one was meant is not ours to guess
        raise ValueError(f"'{text.strip()}' gives {twice} twice: give each mode one duration")
    if len(items) == 1 and "=" not in items[0]:
        return tuple((key, _seconds(items[0])) for key in WAIT_KEYS)
    for item in items:
        mode, equals, duration = item.partition("=")
        mode = mode.strip()
        if not equals or mode not in WAIT_KEYS:
            raise ValueError(f"'{item}' is not mode=duration with a mode of {', '.join(CAPACITY_MODES)} or "
                             f"{CPU} (e.g. flex-start=6h,spot=20m,{CPU}=1h)")
        waits[mode] = _seconds(duration)
    return tuple((key, waits[key]) for key in WAIT_KEYS)


def describe_waits(waits: Mapping[str, float], modes: tuple[str, ...]) -> str:
    """'flex-start=4h,spot=30m': the waits of the given modes, as CAPACITY_WAIT takes them."""
    def short(seconds: float) -> str:
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{int(seconds // size)}{unit}"
        return f"{seconds:g}s"
    return ",".join(f"{mode}={short(waits[mode])}" for mode in modes)
