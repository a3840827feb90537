"""What a recipe's stack still bills per hour while no run of it is active or queued, priced from
recipes/costs/prices.toml and the recipe's shape (pure): a GKE stack's pools at the sizes the cluster's
nodes show (standing_cost), a TPU VM stack's VM as its run leaves it (vm_standing_cost); and the one account
of it every command and the README give (account): what bills, what the stack's destroy stops, and what only
a reservation's owner can stop.

What bills while the stack exists (docs/capacity.md, "When the queue is empty"):
- the cluster management fee, the system pool and the Cloud NAT gateway (its price per node);
- the CPU pool only while it has nodes: it autoscales from 0 (infra/cpu_pool.py);
- a reservation's TPU pools: every host from deploy to destroy (infra/tpu_pool.py). The reservation itself
  is charged "until the reservation is deleted. A VM consuming a reservation doesn't incur separate
  charges" (https://cloud.google.com/compute/docs/instances/reservations-overview, billing), so its chips
  bill whether the pool has its nodes or not, and destroying the stack does not end that;
- the flex-start, spot and on-demand TPU pools only while they have nodes: they scale between 0 and the
  slice's hosts, back to 0 once no TPU pod is left (infra/tpu_pool.py, with GKE's source).

And the TPU time a train step bills while nothing trains: the phases in which that happens,
their chip-hours and list price (what `run` records as run.json `tpu_idle`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import CAPACITY_MODES, MODE_RULES, CapacityMode
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.costs.prices import PriceTable, load_prices, usd
from tpu_rl.recipes.platforms import Stack, registered

ESTIMATE_NOTE = "estimates from list prices"  # every figure of recipes/costs says so


RESERVED_NOTE = " (until the reservation is deleted, nodes or not)"
# Every node's boot disk (system-np's pd-balanced, infra/gke_cluster.py) bills while the node exists;
# recipes/costs/prices.toml has no sourced disk price, so the figure leaves them out and says so.
DISKS_NOTE = "node boot disks not included (prices.toml has no disk price)"


@dataclass(frozen=True)
class StandingItem:
    item: str  # e.g. "system-np 1 node", "tpu-np-0 32 reserved chips"
    usd_per_hour: float
    reserved: bool = False  # a reservation's chips: billed until the reservation ends, nodes or not
    chips: int = 0  # a TPU pool's


@dataclass(frozen=True)
class StandingCost:
    """The stack's hourly bill with no run: what bills, and the pools at 0 nodes, which bill nothing."""

    items: tuple[StandingItem, ...]
    at_zero: tuple[str, ...]
    unpriced: tuple[str, ...] = ()  # pools the stack does not make (someone added them): not priced

    @property
    def total(self) -> float:
        return sum(item.usd_per_hour for item in self.items)

    @property
    def reserved(self) -> tuple[StandingItem, ...]:
        """A reservation's pools: destroying the stack frees their hosts, not the reservation's bill."""
        return tuple(item for item in self.items if item.reserved)

    @property
    def stack_only(self) -> float:
        """What ends with the stack: everything but the reservation."""
        return self.total - sum(item.usd_per_hour for item in self.reserved)

    def summary(self, reserved: bool = True) -> str:
        """e.g. `cluster fee $0.10, system-np 1 node $0.13, Cloud NAT $0.01; cpu-np at 0 nodes; node boot
        disks not included (...)`; without
        the reservation's pools when `reserved` is False."""
        text = ", ".join(f"{item.item} {usd(item.usd_per_hour)}" + (RESERVED_NOTE if item.reserved else "")
                         for item in self.items if reserved or not item.reserved)
        if self.at_zero:
            text += f"; {' and '.join(self.at_zero)} at 0 nodes"
        if self.unpriced:
            text += f"; not priced: {', '.join(self.unpriced)}"
        return f"{text}; {DISKS_NOTE}"

    def as_record(self) -> dict:
        return {"usd_per_hour": round(self.total, 2),
                "items": [{"item": item.item, "usd_per_hour": round(item.usd_per_hour, 2), "reserved": item.reserved}
                          for item in self.items],
                "at_zero_nodes": list(self.at_zero), "not_priced": list(self.unpriced)}



def _reserved(mode: str) -> bool:
    """Whether a pool of this mode (a label read from the cluster, so maybe unknown) bills as reserved."""
    return mode in CAPACITY_MODES and MODE_RULES[CapacityMode(mode)].reservation

def _nodes(count: int) -> str:
    return f"{count} node{'' if count == 1 else 's'}"


def standing_cost(recipe: Recipe, node_labels: Iterable[Mapping[str, str]],
                  prices: PriceTable | None = None) -> StandingCost:
    """The bill of a GKE recipe's stack with no run, from the labels of the cluster's nodes (each node's
    pool, cloud.google.com/gke-nodepool, and a TPU pool's capacity mode, tpu-rl/capacity)."""
    prices = prices or load_prices()
    shape, labels = recipe.shape, list(node_labels)
    count = Counter(node.get(conventions.NODE_POOL_LABEL) for node in labels)
    mode_of = {node.get(conventions.NODE_POOL_LABEL): node.get(conventions.CAPACITY_NODE_LABEL) for node in labels}
    system, cpu = conventions.SYSTEM_POOL_NAME, conventions.cpu_pool_name()
    items = [StandingItem("cluster fee", prices.gke_cluster.usd_per_hour),
             StandingItem(f"{system} {_nodes(count[system])}",
                          count[system] * prices.machine(conventions.SYSTEM_POOL_MACHINE_TYPE).usd_per_hour)]
    at_zero = []
    if count[cpu]:
        items.append(StandingItem(f"{cpu} {_nodes(count[cpu])}",
                                  count[cpu] * prices.machine(recipe.cpu_machine_type or "").usd_per_hour))
    else:
        at_zero.append(cpu)
    reservation = next((mode for mode in recipe.capacity if _reserved(mode)), None)
    reserved_pools: list[str] = []
    if reservation:
        reserved_pools = [conventions.tpu_pool_name(index) for index in range(shape.slices)]
        chip = prices.tpu_chip_hour(shape.generation, reservation).usd_per_hour
        for pool in reserved_pools:  # the reservation's chips, whatever the pool's nodes
            items.append(StandingItem(f"{pool} {shape.chips_per_slice} reserved chips", shape.chips_per_slice * chip,
                                      reserved=True, chips=shape.chips_per_slice))
    autoscaled = {pool: mode for pool, mode in mode_of.items()
                  if pool and mode and not _reserved(mode) and pool not in reserved_pools}
    # A slice still up: the autoscaler removes it minutes after its last TPU pod.
    for pool, mode in sorted(autoscaled.items()):
        chip = prices.tpu_chip_hour(shape.generation, mode).usd_per_hour
        chips = count[pool] * shape.chips_per_vm
        items.append(StandingItem(f"{pool} {chips} {mode} chips", chips * chip, chips=chips))
    if any(mode != reservation for mode in recipe.capacity) and not autoscaled:
        at_zero.append(f"the {'/'.join(m for m in recipe.capacity if m != reservation)} TPU pools")
    known = {system, cpu, *reserved_pools, *autoscaled}
    unpriced = tuple(f"{pool} {_nodes(count[pool])}" for pool in sorted(p for p in count if p and p not in known))
    items.append(StandingItem("Cloud NAT", prices.nat_hourly(sum(count.values()))))
    return StandingCost(tuple(items), tuple(at_zero), unpriced)


def idle_nodes(recipe: Recipe) -> list[dict[str, str]]:
    """The nodes of the recipe's stack with no run, as their labels: the system pool's, and every host of a
    reservation's TPU pools, which keep their nodes from deploy to destroy (infra/tpu_pool.py); the CPU pool
    and the TPU pools of the other modes scale to 0."""
    nodes = [{conventions.NODE_POOL_LABEL: conventions.SYSTEM_POOL_NAME}] * conventions.SYSTEM_POOL_NODES
    reservation = next((mode for mode in recipe.capacity if _reserved(mode)), None)
    if reservation:
        for index in range(recipe.shape.slices):
            nodes += [{conventions.NODE_POOL_LABEL: conventions.tpu_pool_name(index),
                       conventions.CAPACITY_NODE_LABEL: reservation}] * recipe.shape.hosts_per_slice
    return nodes


def vm_standing_cost(recipe: Recipe, vm_up: bool, prices: PriceTable | None = None) -> StandingCost:
    """The bill of a TPU VM recipe's stack with no run: a reservation's chips when the VM is bound to one
    (charged until the reservation is deleted, VM up or not: see the module's docstring), else the VM's chips
    while it is up (VM_AFTER_RUN=keep; it stops itself after its run by default, and a stopped TPU VM bills
    only its boot disk); and the Cloud NAT gateway: its IP, and the VM while it is up."""
    prices = prices or load_prices()
    shape, mode = recipe.shape, recipe.capacity[0]  # a VM takes one mode (scripts/pipeline/vm)
    chip = prices.tpu_chip_hour(shape.generation, mode).usd_per_hour
    items = []
    if _reserved(mode) or vm_up:
        kind = "reserved" if _reserved(mode) else mode
        items.append(StandingItem(f"TPU VM {shape.total_chips} {kind} chips", shape.total_chips * chip,
                                  reserved=_reserved(mode), chips=shape.total_chips))
    items.append(StandingItem("Cloud NAT", prices.nat_hourly(shape.total_hosts if vm_up else 0)))
    return StandingCost(tuple(items), ())


def _cluster_idle_bill(recipe: Recipe, vm_up: bool, prices: PriceTable | None) -> StandingCost:
    return standing_cost(recipe, idle_nodes(recipe), prices)  # no VM to keep up


# What each kind of stack (its platform's fact `stack`) bills with no run, as deployed.
IDLE_BILLS: dict[Stack, Callable[[Recipe, bool, PriceTable | None], StandingCost]] = {
    Stack.CLUSTER: _cluster_idle_bill, Stack.TPU_VM: vm_standing_cost}


def idle_bill(recipe: Recipe, vm_up: bool = False, prices: PriceTable | None = None) -> StandingCost:
    """A recipe's stack with no run, as deployed: a GKE stack with its system pool and a reservation's hosts
    (idle_nodes), a TPU VM stopped after its run, or up when `vm_up` (VM_AFTER_RUN=keep)."""
    stack = recipe.platform_facts.stack
    return registered(IDLE_BILLS, stack, "IDLE_BILLS of recipes/costs/standing.py", "stack")(recipe, vm_up, prices)


def stop_command(recipe: Recipe) -> str:
    """The one command every output names to stop what the recipe's stack bills (its platform's fact): `tpu-rl
    down` on GKE, and `npx cdktf destroy` for a TPU VM's stack, which `down` does not take."""
    return f"`{recipe.platform_facts.stop_command.format(recipe=recipe.name)}`"


def reservation_line(bill: StandingCost) -> str | None:
    """What destroying the stack does not end: the reservation's chips, in one wording; None without one."""
    if not bill.reserved:
        return None
    chips = sum(item.chips for item in bill.reserved)
    return (f"the reservation's {chips} chips bill {usd(bill.total - bill.stack_only)}/h with or without the "
            "stack, until the reservation ends: it may be shared or tied to a commitment, so only its owner can "
            "end it (tpu-rl never deletes it)")


def account(bill: StandingCost, recipe: Recipe) -> list[str]:
    """What still bills, said the same way by `run`, `runs`, `down`, `recipes` and the README: what bills
    now, what destroying the stack (stop_command) stops, and what only the reservation's owner can stop."""
    lines = [f"with no run, stack {recipe.name} bills {usd(bill.total)}/h ({ESTIMATE_NOTE}); {stop_command(recipe)} "
             f"stops {usd(bill.stack_only)}/h of it: {bill.summary(reserved=False)}"]
    reserved = reservation_line(bill)
    return lines + ([reserved] if reserved else [])


def standing_table(recipes: list[Recipe], prices: PriceTable | None = None) -> str:
    """The README's table of what each recipe's stack bills with no run (idle_bill: a TPU VM stopped after
    its run), split as `account` says it (tests/test_jobs_readme.py keeps the README's copy in sync)."""
    rows = ["| recipe | bills with no run | destroying the stack stops | the reservation, until it ends |",
            "| --- | --- | --- | --- |"]
    for recipe in recipes:
        bill = idle_bill(recipe, prices=prices)
        rows.append(f"| {recipe.name} | {usd(bill.total)}/h | {stop_command(recipe)}: {usd(bill.stack_only)}/h | "
                    f"{usd(bill.total - bill.stack_only)}/h |")
    return "\n".join(rows)


# The phases of a train step (scripts/pipeline/phases.py) in which its TPU hosts exist, and so bill, while
# nothing trains: the workers have their nodes while the Pathways head waits for one, while the images
# are pulled and the model loads, and the trainer waits for a checkpoint save. Queued and provisioning
# (the workers without nodes) bill no TPU on a pool that scales from zero; a reservation bills anyway.
TPU_IDLE_PHASES = ("waiting for head", "pulling images", "loading", "saving")


@dataclass(frozen=True)
class IdleTpu:
    """TPU time a train step billed while nothing trained, measured by `run` (run.json `tpu_idle`)."""

    seconds: float
    chip_hours: float
    usd: float
    mode: str

    def as_record(self) -> dict:
        return {"seconds": round(self.seconds), "chip_hours": round(self.chip_hours, 2),
                "usd_estimate": round(self.usd, 2), "capacity": self.mode}

    def line(self, step: str, by_phase: dict[str, float]) -> str:
        """What the slice billed while it did not train, in plain words: the money, the time and what it
        waited on (issue 37: `billed 0.0 chip-hours ... while nothing trained: none`)."""
        parts = ", ".join(f"{phase} {int(by_phase[phase]) // 60}m{int(by_phase[phase]) % 60:02d}s"
                          for phase in TPU_IDLE_PHASES if by_phase.get(phase))
        if not parts:
            return f"{step}: the TPU slice trained all the time it billed, with no wait on the head, images or saving"
        return (f"{step}: the TPU slice billed about {usd(self.usd)} at {self.mode} prices while it was not training "
                f"({self.chip_hours:.1f} chip-hours): {parts}")


def idle_tpu(recipe: Recipe, by_phase: dict[str, float], mode: str | None = None,
             prices: PriceTable | None = None) -> IdleTpu:
    """The chip-hours, and their list price, of the TPU_IDLE_PHASES of a step on `mode` (the mode it ran
    on; by default the recipe's first)."""
    prices = prices or load_prices()
    mode = mode or recipe.capacity[0]
    seconds = sum(by_phase.get(phase, 0.0) for phase in TPU_IDLE_PHASES)
    chip_hours = recipe.shape.total_chips * seconds / 3600
    return IdleTpu(seconds, chip_hours, chip_hours * prices.tpu_chip_hour(recipe.shape.generation, mode).usd_per_hour,
                   mode)
