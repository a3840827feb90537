"""What one platform is, as facts that each vary on their own: where its TPUs and CPU steps live, what it
stands between runs, what its train step can do and what runs its steps. Code above reads the fact its
decision rests on, never which platform it is on (tests/test_platform_seam.py); behaviour that differs is a
method of scripts/pipeline/platforms.py `Platform` or a row of its own layer's registry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Mapping, Sequence, TypeVar

from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode

Mode = TypeVar("Mode", bound=str)  # a capacity mode, as a member or its plain string


class StepRunner(StrEnum):
    """What runs a run's steps, and so which renderer of jobs/ writes it (jobs/__init__.py RENDERERS)."""
    JOBSETS = "jobsets"  # a JobSet per step in a cluster (render_manifests)
    STARTUP_SCRIPT = "startup script"  # one TPU VM's startup script runs every step (render_startup_script)


class Stack(StrEnum):
    """What a platform's stack is, and so how recipes/costs prices it, running or not (recipes/costs
    HOURLY_LINES and IDLE_BILLS)."""
    CLUSTER = "cluster"  # a control plane, a system pool, a CPU pool from 0 and TPU node pools, behind Cloud NAT
    TPU_VM = "TPU VM"  # one TPU VM from deploy to destroy (stopped after its run), behind Cloud NAT


class TpuHosts(StrEnum):
    """When a platform's TPU hosts exist."""
    WHILE_TRAINING = "while training"  # node pools the autoscaler fills for train, unless the mode keeps them
    DEPLOY_TO_DESTROY = "deploy to destroy"  # made with the stack, whatever the step


class TrainMode(StrEnum):
    """How a train step drives its TPUs (recipes.toml `pathways`)."""
    JAX = "jax"  # JAX on the TPU hosts themselves
    PATHWAYS = "pathways"  # a Pathways head on a CPU node drives the slices


class CpuStepsHost(StrEnum):
    """Where convert and export run, and so how jobs/maxtext.py writes their commands (CPU_STEP_ARGS)."""
    CPU_POOL = "cpu pool"  # a node pool of CPU machines, which loads tensors lazily and exports without TPUs
    TPU_HOST = "tpu host"  # the TPU host itself, whose 1.4 TB loads eagerly (seed 002) and exports on its TPUs


@dataclass(frozen=True)
class PlatformFacts:
    """One platform's facts. None is a yes-or-no that code above reads (tests/test_platform_seam.py): each is
    a value of its own, and a question that takes more than one is a method here, in the caller's words."""
    label: str  # how messages and docs name it: "GKE", "TPU VM"
    capacity: tuple[str, ...]  # the capacity modes its TPUs take (CapacityMode values)
    # How many modes of a capacity list it falls back through, in order: a TPU node pool per mode, or one
    # provisioning model (1).
    max_capacity_modes: int
    tpu_zones: int | None  # how many zones of ZONE, the first first, its TPUs may be in (None: a pool in each)
    tpu_hosts: TpuHosts
    cpu_steps_on: CpuStepsHost  # where convert and export run
    # What runs on a recipe's cpu_machine_type, which recipes.toml must then name and preflight checks is
    # offered and has quota; () where the platform has no CPU machine of its own.
    cpu_machine_runs: tuple[str, ...]
    stack: Stack
    stop_command: str  # what stops its stack's bill, for a recipe: "tpu-rl down {recipe}"
    train_modes: tuple[TrainMode, ...]
    max_slices: int | None  # the most slices (tpu.slices) a recipe may have (None: no bound of its own)
    steps_run_as: StepRunner
    user_file_kinds: tuple[str, ...]  # the files its train step can mount (recipes/runs/user_files.py Kind)
    # command -> the settings it reads for a recipe on this platform (recipes/settings/specs.py needs)
    needs: Mapping[str, tuple[str, ...]]
    refused: tuple[str, ...] = ()  # commands it refuses before any setting is read (docs/settings.md's table)

    def __post_init__(self) -> None:
        # Two facts say where convert and export run: a CPU pool is a recipe's cpu_machine_type, the TPU host not.
        on_pool = self.cpu_steps_on is CpuStepsHost.CPU_POOL
        if on_pool != ({"convert", "export"} <= set(self.cpu_machine_runs)):
            raise ValueError(f"{self.label}: convert and export run on the {self.cpu_steps_on}, so cpu_machine_runs "
                             f"must {'' if on_pool else 'not '}name them")

    def zones_used(self, zones: Sequence[str]) -> tuple[str, ...]:
        """The zones of ZONE its TPUs may be in."""
        return tuple(zones[:self.tpu_zones])

    def capacity_from(self, listed: Iterable[Mode]) -> tuple[Mode, ...]:
        """What it runs of an ordered capacity list (CAPACITY): the modes it takes, as many as it falls back
        through."""
        return tuple(mode for mode in listed if mode in self.capacity)[:self.max_capacity_modes]

    def refuses_capacity(self, capacity: Sequence[str]) -> str | None:
        """Why its TPUs cannot run an ordered capacity list, or None (recipes/capacity/modes.py adds where)."""
        refused = [mode for mode in capacity if mode not in self.capacity]
        if refused:
            return (f"a {self.label} takes one of {', '.join(self.capacity)}, not {', '.join(refused)} "
                    "(flex-start and fallback lists need a GKE recipe)")
        most = self.max_capacity_modes  # one provisioning model: no pool per mode to fall back through
        if len(capacity) > most:
            return f"a {self.label} " + ("has one provisioning model, so name one mode" if most == 1
                                         else f"falls back through {most} modes at most")
        return None

    def tpu_only_in_train(self, mode: str) -> bool:
        """Whether its TPU hosts of capacity `mode` exist only while a train step runs (not a reservation's)."""
        return self.tpu_hosts is TpuHosts.WHILE_TRAINING and MODE_RULES[CapacityMode(mode)].scales_to_zero

    def deploy_needs(self, setting: str) -> bool:
        """Whether deploying its stack reads `setting` (a Settings field): what synth needs of it."""
        return setting in self.needs["synth"]


Entry = TypeVar("Entry")
Key = TypeVar("Key", bound=str)  # a platform's name, or a StrEnum member of a fact


def registered(registry: Mapping[Key, Entry], key: Key, where: str, what: str = "platform") -> Entry:
    """`registry[key]`, or a KeyError that names the registry a new platform (or `what`) must be added to."""
    try:
        return registry[key]
    except KeyError:
        raise KeyError(f"{what} '{key}' is not registered in {where} (registered: "
                       f"{', '.join(registry)}); docs/development.md lists every registry") from None
