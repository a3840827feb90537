"""Cost estimates from list prices: what a recipe's stack costs per hour, and what one pipeline run costs.

Pure functions of a recipe and recipes/prices.toml (the one home of every price). The figures are
estimates for one default region; every output that shows them says so.

What is counted, per hour while a pipeline runs:
- TPU: chips x $/chip-hour for the recipe's capacity mode. A reservation is billed for its whole term
  whether a job runs or not; its hours are marked `reserved`.
- GKE recipes: the cluster management fee, the system pool, the CPU pool at its expected size during a
  run (one node: each step puts one pod there, the conversion/export job or the Pathways head), and the
  Cloud NAT gateway for every node behind it.
- VM recipes: the TPU VM (its chips at the chip-hour price; the host is included) and its Cloud NAT.
Storage and the Hugging Face download through NAT (per GiB) are not counted; see prices.toml.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from recipes import conventions
from recipes.errors import UserError
from recipes.model import STEPS, Recipe

# Each step puts exactly one pod on the CPU pool (convert/export job, or the Pathways head during
# train), and the pool autoscales from 0, so one node is up during a run.
CPU_NODES_DURING_RUN = 1

ESTIMATE_NOTE = "estimates from list prices"


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str
    checked: str


@dataclass(frozen=True)
class CostLine:
    """One priced item: `quantity` units at `unit_price` USD per hour each."""

    item: str
    quantity: float
    unit: str
    unit_price: float
    reserved: bool = False

    @property
    def hourly(self) -> float:
        return self.quantity * self.unit_price


@dataclass(frozen=True)
class CostBreakdown:
    """A recipe's estimated spend per hour while its pipeline runs, line by line."""

    recipe: str
    capacity: str
    region: str
    lines: tuple[CostLine, ...]

    @property
    def total(self) -> float:
        return sum(line.hourly for line in self.lines)

    @property
    def reserved(self) -> float:
        """The part of the total that is reserved capacity (billed for the reservation's term anyway)."""
        return sum(line.hourly for line in self.lines if line.reserved)

    @property
    def has_reserved(self) -> bool:
        return any(line.reserved for line in self.lines)

    def summary(self) -> str:
        """e.g. `$62.78/h (TPU reserved)`."""
        text = f"{usd(self.total)}/h"
        return f"{text} (TPU reserved)" if self.has_reserved else text


@dataclass(frozen=True)
class StepCost:
    step: str
    minutes: int
    usd: float


@dataclass(frozen=True)
class RunEstimate:
    """One pipeline run (convert, train, export) at the recipe's durations."""

    recipe: str
    steps: tuple[StepCost, ...]
    has_reserved: bool

    @property
    def total(self) -> float:
        return sum(step.usd for step in self.steps)

    @property
    def minutes(self) -> int:
        return sum(step.minutes for step in self.steps)

    def summary(self) -> str:
        text = f"{usd(self.total)} for {self.minutes} min"
        return f"{text} (TPU reserved)" if self.has_reserved else text


def usd(amount: float) -> str:
    return f"${amount:,.2f}"


@dataclass(frozen=True)
class PriceTable:
    region: str
    tpu: dict[str, dict[str, Price]]  # generation -> capacity mode -> price per chip-hour
    machines: dict[str, Price]  # machine type -> on-demand price per hour
    gke_cluster: Price
    nat_per_vm: Price
    nat_max_vms: int
    nat_cap: float
    nat_per_ip: float

    def tpu_chip_hour(self, generation: str, capacity: str) -> Price:
        by_mode = self.tpu.get(generation)
        if by_mode is None or capacity not in by_mode:
            raise UserError(
                f"recipes/prices.toml has no {capacity} price for TPU {generation}: add [tpu.{generation}] "
                f"{capacity} = <USD per chip-hour> with its source and date"
            )
        return by_mode[capacity]

    def machine(self, machine_type: str) -> Price:
        price = self.machines.get(machine_type)
        if price is None:
            raise UserError(
                f"recipes/prices.toml has no price for machine type '{machine_type}': add "
                f"[machine.{machine_type}] on-demand = <USD per hour> with its source and date"
            )
        return price

    def nat_hourly(self, vms: int) -> float:
        # Per VM up to the cap; one NAT IP (auto-allocated) for a gateway this size.
        gateway = self.nat_cap if vms > self.nat_max_vms else self.nat_per_vm.usd_per_hour * vms
        return gateway + self.nat_per_ip


def _price(entry: dict, key: str) -> Price:
    return Price(
        usd_per_hour=float(entry[key]),
        source=entry["source"],
        checked=entry["checked"],
    )


def parse_prices(table: dict) -> PriceTable:
    """Build the price table from parsed TOML; every price must say where it comes from and when."""
    try:
        capacity_modes = ("on-demand", "spot", "reservation")
        tpu = {
            generation: {mode: _price(entry, mode) for mode in capacity_modes if mode in entry}
            for generation, entry in table["tpu"].items()
        }
        machines = {name: _price(entry, "on-demand") for name, entry in table["machine"].items()}
        nat = table["nat"]
        return PriceTable(
            region=table["region"],
            tpu=tpu,
            machines=machines,
            gke_cluster=_price(table["gke"], "cluster"),
            nat_per_vm=_price(nat, "per_vm"),
            nat_max_vms=int(nat["max_vms"]),
            nat_cap=float(nat["cap"]),
            nat_per_ip=float(nat["per_ip"]),
        )
    except KeyError as missing:
        raise UserError(f"recipes/prices.toml lacks {missing}: every price needs a value, source and checked date") from None


@cache
def load_prices() -> PriceTable:
    text = resources.files("recipes").joinpath("prices.toml").read_text()
    return parse_prices(tomllib.loads(text))


def _nat_line(prices: PriceTable, vms: int) -> CostLine:
    return CostLine(f"Cloud NAT ({vms} {'VM' if vms == 1 else 'nodes'})", 1, "gateway", prices.nat_hourly(vms))


def hourly_estimate(recipe: Recipe, prices: PriceTable | None = None) -> CostBreakdown:
    """What the recipe's stack costs per hour while its pipeline runs."""
    prices = prices or load_prices()
    shape = recipe.shape
    mode = recipe.capacity[0]  # the capacity expected to serve; the rest of the list is fallback
    chip = prices.tpu_chip_hour(shape.generation, mode)
    reserved = mode == "reservation"
    tpu_label = f"TPU {shape.generation} chips ({mode})"
    if not recipe.is_gke:
        lines = [
            CostLine(f"{tpu_label}, VM {shape.machine_type}", shape.total_chips, "chip", chip.usd_per_hour,
                     reserved=reserved),
            _nat_line(prices, shape.total_hosts),
        ]
        return CostBreakdown(recipe.name, mode, prices.region, tuple(lines))

    cpu = prices.machine(recipe.cpu_machine_type or "")
    system = prices.machine(conventions.SYSTEM_POOL_MACHINE_TYPE)
    nodes_behind_nat = shape.total_hosts + CPU_NODES_DURING_RUN + conventions.SYSTEM_POOL_NODES
    lines = [
        CostLine(tpu_label, shape.total_chips, "chip", chip.usd_per_hour, reserved=reserved),
        CostLine(f"CPU pool {recipe.cpu_machine_type}", CPU_NODES_DURING_RUN, "node", cpu.usd_per_hour),
        CostLine(f"system pool {conventions.SYSTEM_POOL_MACHINE_TYPE}", conventions.SYSTEM_POOL_NODES, "node",
                 system.usd_per_hour),
        CostLine("GKE cluster management fee", 1, "cluster", prices.gke_cluster.usd_per_hour),
        _nat_line(prices, nodes_behind_nat),
    ]
    return CostBreakdown(recipe.name, mode, prices.region, tuple(lines))


def pipeline_run_estimate(recipe: Recipe, prices: PriceTable | None = None) -> RunEstimate:
    """One run of convert, train and export at the recipe's durations.

    The TPU slice is part of the stack, so it is billed through every step, the CPU-only ones included
    (and a reservation for its whole term); the run costs the hourly estimate for each step's minutes.
    """
    hourly = hourly_estimate(recipe, prices)
    minutes = recipe.durations_minutes
    steps = tuple(
        StepCost(step, getattr(minutes, step), hourly.total * getattr(minutes, step) / 60) for step in STEPS
    )
    return RunEstimate(recipe.name, steps, hourly.has_reserved)


def run_table(recipes: list[Recipe], prices: PriceTable | None = None) -> str:
    """The README's table of one pipeline run per recipe: time, TPU chip-hours and cost per step.

    TPU pools have a static node count, so the slice is billed through every step, CPU-only ones too;
    chip-hours are the recipe's chips times the step's expected minutes. A test keeps the README in sync.
    """
    rows = ["| recipe | step | expected minutes | TPU chip-hours billed | estimated cost |",
            "| --- | --- | --- | --- | --- |"]
    for recipe in recipes:
        estimate = pipeline_run_estimate(recipe, prices)
        for step in estimate.steps:
            chip_hours = recipe.shape.total_chips * step.minutes / 60
            rows.append(f"| {recipe.name} | {step.step} | {step.minutes} | {chip_hours:.1f} | {usd(step.usd)} |")
        total_chip_hours = recipe.shape.total_chips * estimate.minutes / 60
        reserved = " (TPU reserved)" if estimate.has_reserved else ""
        rows.append(f"| {recipe.name} | **whole run** | {estimate.minutes} | {total_chip_hours:.1f} | "
                    f"{usd(estimate.total)}{reserved} |")
    return "\n".join(rows)
