"""Capacity modes and platforms: which ways of getting TPUs exist, which a platform takes, and the rules
a recipe's ordered capacity list must meet (recipes.toml `capacity` and the CAPACITY setting)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from recipes.errors import UserError

if TYPE_CHECKING:
    from recipes.catalog import TpuGeneration

CapacityMode = Literal["reservation", "flex-start", "spot", "on-demand"]
CAPACITY_MODES: tuple[CapacityMode, ...] = ("reservation", "flex-start", "spot", "on-demand")
Platform = Literal["gke", "vm"]
# A TPU VM is one VM with one provisioning model: no flex-start node pool and no queue to fall back in.
PLATFORM_CAPACITY: dict[str, tuple[CapacityMode, ...]] = {
    "gke": CAPACITY_MODES,
    "vm": ("reservation", "spot", "on-demand"),
}


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
    return tuple(modes)  # type: ignore[return-value]


def check_capacity(name: str, platform: str, capacity: tuple[CapacityMode, ...], facts: TpuGeneration,
                   max_run_hours: int | None, source: str) -> None:
    """The rules a capacity list must meet for a recipe; UserError naming `source` (the field or setting)."""
    where = f"{source} '{','.join(capacity)}' for recipe '{name}'"
    allowed = PLATFORM_CAPACITY[platform]
    refused = [mode for mode in capacity if mode not in allowed]
    if refused:
        raise UserError(f"{where}: a TPU VM takes one of {', '.join(allowed)}, not {', '.join(refused)} "
                        "(flex-start and fallback lists need a GKE recipe)")
    if platform == "vm" and len(capacity) > 1:
        raise UserError(f"{where}: a TPU VM has one provisioning model, so name one mode")
    if facts.flex_start and max_run_hours and max_run_hours > facts.flex_start.max_run_hours:
        raise UserError(f"recipe '{name}': tpu.flex_start_max_run_hours is {max_run_hours}; flex-start nodes run "
                        f"at most {facts.flex_start.max_run_hours} hours")
    if "flex-start" in capacity:
        if facts.flex_start is None:
            raise UserError(f"{where}: TPU {facts.gke_accelerator} is not offered through flex-start")
        if max_run_hours is None:
            raise UserError(f"{where}: flex-start needs tpu.flex_start_max_run_hours (how long a node may run)")
