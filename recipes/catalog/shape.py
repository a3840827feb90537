"""A TPU slice shape: a recipe's tpu table checked against its generation's facts, with the chips and
hosts derived from it. Code further down reads these properties and never recomputes chips or hosts."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from tpu_rl.recipes.catalog.entry import TpuSpec
from tpu_rl.recipes.catalog.facts import TpuGeneration


class Shape(BaseModel):
    """A TPU slice shape with everything derived from it. Built only by :func:`derive_shape`."""

    model_config = ConfigDict(frozen=True)

    generation: str
    topology: str
    machine_type: str
    slices: int
    chips_per_vm: int
    chips_per_slice: int
    gke_accelerator: str
    pathways_instance_prefix: str

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // self.chips_per_vm

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def total_hosts(self) -> int:
        return self.hosts_per_slice * self.slices

    @property
    def accelerator_type(self) -> str:
        """The Cloud TPU accelerator type, e.g. v6e-32."""
        return f"{self.generation}-{self.chips_per_slice}"

    @property
    def pathways_instance_type(self) -> str:
        return f"{self.pathways_instance_prefix}:{self.topology}"

    @property
    def chips_per_host_bounds(self) -> str:
        """TPU_CHIPS_PER_HOST_BOUNDS for a single-host VM, e.g. 2,4,1 for 2x4."""
        return ",".join(self.topology.split("x") + ["1"])


def derive_shape(tpu: TpuSpec, generations: dict[str, TpuGeneration]) -> Shape:
    """Check a TPU spec against the generation's facts and derive chips and hosts from it."""
    facts = generations.get(tpu.generation)
    if facts is None:
        raise ValueError(f"tpu.generation '{tpu.generation}' is unknown (known: {', '.join(generations)})")
    if tpu.topology not in facts.topologies:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' is not a {tpu.generation} topology "
            f"(valid: {', '.join(facts.topologies)})"
        )
    chips_per_vm = facts.machine_types.get(tpu.machine_type)
    if chips_per_vm is None:
        raise ValueError(
            f"tpu.machine_type '{tpu.machine_type}' is not a {tpu.generation} machine type "
            f"(valid: {', '.join(facts.machine_types)})"
        )
    chips_per_slice = math.prod(int(side) for side in tpu.topology.split("x"))
    if chips_per_slice % chips_per_vm:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' has {chips_per_slice} chips, which is not a whole number of "
            f"{tpu.machine_type} hosts ({chips_per_vm} chips each); pick a topology with a multiple of "
            f"{chips_per_vm} chips or another machine type"
        )
    if chips_per_slice // chips_per_vm > 1 and tpu.machine_type != facts.multi_host_machine_type:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' needs {chips_per_slice // chips_per_vm} hosts of "
            f"{tpu.machine_type}; multi-host {tpu.generation} slices need "
            f"tpu.machine_type = '{facts.multi_host_machine_type}'"
        )
    return Shape(
        generation=tpu.generation,
        topology=tpu.topology,
        machine_type=tpu.machine_type,
        slices=tpu.slices,
        chips_per_vm=chips_per_vm,
        chips_per_slice=chips_per_slice,
        gke_accelerator=facts.gke_accelerator,
        pathways_instance_prefix=facts.pathways_instance_prefix,
    )
