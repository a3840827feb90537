"""What one platform is, as facts that each vary on their own: where its TPUs and CPU steps live, what it
stands between runs, what its train step can do and what runs its steps. Code above reads the fact its
decision rests on, never which platform it is on (tests/test_platform_seam.py); behaviour that differs is a
method of scripts/pipeline/platforms.py `Platform` or a row of its own layer's registry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping, TypeVar


class StepRunner(StrEnum):
    """What runs a run's steps, and so which renderer of jobs/ writes it (jobs/__init__.py RENDERERS)."""
    JOBSETS = "jobsets"  # a JobSet per step in a cluster (render_manifests)
    STARTUP_SCRIPT = "startup script"  # one TPU VM's startup script runs every step (render_startup_script)


@dataclass(frozen=True)
class PlatformFacts:
    label: str  # how messages and docs name it: "GKE", "TPU VM"
    capacity: tuple[str, ...]  # the capacity modes its TPUs take (CapacityMode values)
    # Its TPUs are node pools, one per zone of ZONE and capacity mode, scaled by the autoscaler: a capacity
    # list falls back through them and (unless reserved) TPU hosts exist only while train runs. Else one
    # TPU VM in the first zone of ZONE with one provisioning model, from deploy to destroy.
    tpu_node_pools: bool
    # A CPU node pool runs convert, export and the Pathways head (cpu_machine_type): convert loads tensors
    # lazily to bound the shared pool's RAM, export runs on CPU without a JAX cluster. Else both run on the
    # TPU host, whose 1.4 TB loads eagerly (seed 002) and exports on its TPUs.
    cpu_pool: bool
    control_plane: bool  # a control plane, reached from AUTHORIZED_CIDR only, stands (and bills) between runs
    pathways: bool  # may train with Pathways
    multislice: bool  # may have tpu.slices > 1
    steps_run_as: StepRunner
    user_files: bool  # --rewards and --data-processor files can be mounted into the train step
    run_queue: bool  # runs queue for the slice (Kueue), so `tpu-rl sweep` may start several
    # command -> the settings it reads for a recipe on this platform (recipes/settings/specs.py needs)
    needs: Mapping[str, tuple[str, ...]]
    refused: tuple[str, ...] = ()  # commands it refuses before any setting is read (docs/settings.md's table)


Entry = TypeVar("Entry")
Key = TypeVar("Key", bound=str)  # a platform's name, or a StrEnum member of a fact


def registered(registry: Mapping[Key, Entry], key: Key, where: str, what: str = "platform") -> Entry:
    """`registry[key]`, or a KeyError that names the registry a new platform (or `what`) must be added to."""
    try:
        return registry[key]
    except KeyError:
        raise KeyError(f"{what} '{key}' is not registered in {where} (registered: "
                       f"{', '.join(registry)}); docs/development.md lists every registry") from None
