"""Capacity modes and platforms: which ways of getting TPUs exist, which a platform takes, and the rules
a recipe's ordered capacity list must meet (recipes.toml `capacity` and the CAPACITY setting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from recipes.errors import UserError

if TYPE_CHECKING:
    from recipes.catalog import TpuGeneration

CapacityMode = Literal["reservation", "flex-start", "spot", "on-demand"]
CAPACITY_MODES: tuple[CapacityMode, ...] = ("reservation", "flex-start", "spot", "on-demand")
Platform = Literal["gke", "vm"]


@dataclass(frozen=True)
class PlatformRules:
    """What differs between the platforms as data (the code that differs is scripts/pipeline/gke/ and vm/)."""
    capacity: tuple[CapacityMode, ...]  # the modes it takes
    capacity_fallback: bool  # an ordered list of modes to fall back through, or exactly one
    cpu_pool: bool  # a CPU node pool runs convert, export and the Pathways head (cpu_machine_type)
    pathways: bool  # may train with Pathways
    multislice: bool  # may have tpu.slices > 1
    control_plane: bool  # a GKE control plane, reached from AUTHORIZED_CIDR only
    all_zones: bool  # TPUs in every zone of ZONE (node pools in each), else in the first (one VM)
    tpu_only_in_train: bool  # TPU nodes exist only while train runs (unless reserved), else deploy to destroy
    jobsets: bool  # steps run as JobSets (jobs/ render_manifests), else a startup script (render_startup_script)
    user_files: bool  # --rewards and --data-processor files can be mounted into the train step
    lazy_load_tensors: bool  # convert bounds host RAM on the shared CPU pool; the 1.4 TB VM loads eagerly (seed 002)
    export_on_cpu: bool  # the seeds' GKE export runs on CPU without a JAX cluster, MaxText's architecture winning
    queued_runs: bool  # runs queue for the slice (Kueue), so `tpu-rl sweep` may start several; a VM runs one script


# A TPU VM is one VM with one provisioning model: no flex-start node pool and no queue to fall back in.
PLATFORM_RULES: dict[str, PlatformRules] = {
    "gke": PlatformRules(capacity=CAPACITY_MODES, capacity_fallback=True, cpu_pool=True, pathways=True,
                         multislice=True, control_plane=True, all_zones=True, tpu_only_in_train=True,
                         jobsets=True, user_files=True, lazy_load_tensors=True, export_on_cpu=True,
                         queued_runs=True),
    "vm": PlatformRules(capacity=("reservation", "spot", "on-demand"), capacity_fallback=False, cpu_pool=False,
                        pathways=False, multislice=False, control_plane=False, all_zones=False,
                        tpu_only_in_train=False, jobsets=False, user_files=False, lazy_load_tensors=False,
                        export_on_cpu=False, queued_runs=False),
}
PLATFORM_CAPACITY: dict[str, tuple[CapacityMode, ...]] = {name: rules.capacity for name, rules in PLATFORM_RULES.items()}


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
    if not PLATFORM_RULES[platform].capacity_fallback and len(capacity) > 1:
        raise UserError(f"{where}: a TPU VM has one provisioning model, so name one mode")
    if facts.flex_start and max_run_hours and max_run_hours > facts.flex_start.max_run_hours:
        raise UserError(f"recipe '{name}': tpu.flex_start_max_run_hours is {max_run_hours}; flex-start nodes run "
                        f"at most {facts.flex_start.max_run_hours} hours")
    if "flex-start" in capacity:
        if facts.flex_start is None:
            raise UserError(f"{where}: TPU {facts.gke_accelerator} is not offered through flex-start")
        if max_run_hours is None:
            raise UserError(f"{where}: flex-start needs tpu.flex_start_max_run_hours (how long a node may run)")
