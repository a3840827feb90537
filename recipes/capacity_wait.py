"""How long `tpu-rl run` waits for TPU capacity in each mode before it moves on, and for a node of the
CPU pool for a CPU step (convert, export) before it stops (setting CAPACITY_WAIT, key `cpu`).

The wait of one mode is the time a train step's TPU workers go without all having a node on that mode:
queued in Kueue, waiting for GKE to provision a flex-start slice (the ProvisioningRequest's queue), or
admitted but unschedulable because the zone has no stock (a pod scheduled, or that has run, had its
capacity). `cpu` also bounds a train step's Pathways head waiting for a node of the CPU pool. Past it, `run` deletes the step's JobSet (so
nothing bills and no request stays queued) and submits it on the next mode of CAPACITY; after the last one
it stops with one line. docs/capacity.md says why `run` and not Kueue decides this.

The defaults are this project's choice, not an upstream value: long enough for a cold pool of a
multi-host slice to scale from zero and pull its images, and for flex-start a few hours, since GKE's
Dynamic Workload Scheduler queues a request until the whole slice can be had. A CPU step has no next
mode: past `cpu`'s wait without a node for all its pods (its pool's machine type out of stock in the
zone, or no quota), `run` deletes its JobSet and stops with one line.
"""

from __future__ import annotations

import re
from typing import Literal, Mapping

from recipes.capacity_modes import CAPACITY_MODES, CapacityMode

CPU = "cpu"  # the key of a CPU step's wait: a node of the CPU pool (convert, export)
WaitKey = CapacityMode | Literal["cpu"]
WAIT_KEYS: tuple[WaitKey, ...] = (*CAPACITY_MODES, CPU)
DEFAULT_WAIT_SECONDS: Mapping[WaitKey, float] = {
    "reservation": 30 * 60,
    "on-demand": 30 * 60,
    "spot": 30 * 60,
    "flex-start": 4 * 3600,
    CPU: 30 * 60,  # a node of the CPU pool scaling up from zero, and its image pull
}
# How long an attempt may have every pod on a node but not every pod Ready: the Job's restarts and a failing
# image pull never end it, so without this a slice bills for hours; our choice, as long as
# stall.QUIET_STALL_SECONDS (docs/provenance.md#start-bounds-ready_wait).
READY_WAIT_SECONDS = 90 * 60
# How long a container's image pull may keep failing (starting.py FAILING_PULL): the kubelet backs off 10 s
# doubling to 300 s (kubernetes/kubernetes pkg/kubelet/kubelet.go MaxImageBackOff), so this is five failed
# pulls in a row (docs/provenance.md#kubelet-image-pull-back-off).
IMAGE_PULL_FAILING_SECONDS = 5 * 60
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
    waits: dict[WaitKey, float] = dict(DEFAULT_WAIT_SECONDS)
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
        waits[mode] = _seconds(duration)  # type: ignore[index]
    return tuple((key, waits[key]) for key in WAIT_KEYS)


def describe_waits(waits: Mapping[str, float], modes: tuple[str, ...]) -> str:
    """'flex-start=4h,spot=30m': the waits of the given modes, as CAPACITY_WAIT takes them."""
    def short(seconds: float) -> str:
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{int(seconds // size)}{unit}"
        return f"{seconds:g}s"
    return ",".join(f"{mode}={short(waits[mode])}" for mode in modes)
