"""Cost estimates from list prices: what a recipe's stack costs per hour, and what one pipeline run costs.

Pure functions of a recipe and recipes/costs/prices.toml (the one home of every price). The figures are
estimates for one default region; every output that shows them says so.

What is counted, per hour while a pipeline runs:
- TPU: chips x $/chip-hour for the recipe's capacity mode (the first of its list: the mode expected to
  serve; the rest is fallback). A reservation is billed for its whole term whether a job runs or not;
  its hours are marked `reserved`. On GKE every other mode's pools scale from zero, so their hosts bill
  only while the train step runs: conversion and export bill no TPU time (those chip-hours are shown as
  avoided). The VM exists from deploy to destroy in every mode.
- GKE recipes: the cluster management fee, the system pool, the CPU pool at its expected size during a
  run (one node: each step puts one pod there, the conversion/export job or the Pathways head), and the
  Cloud NAT gateway for every node behind it (the TPU hosts only while they exist).
- VM recipes: the TPU VM (its chips at the chip-hour price; the host is included) and its Cloud NAT.
Storage and the Hugging Face download through NAT (per GiB) are not counted; see prices.toml.
The prices: recipes/costs/prices.py; TPU time billed while nothing trains: recipes/costs/standing.py;
the held-out evaluation's part of the train step, in minutes and dollars: EvaluationCost below (its
size: recipes/runs/evaluation.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import MODE_RULES
from tpu_rl.recipes.catalog.entry import STEPS
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.platforms import Stack, registered
from tpu_rl.recipes.runs.evaluation import EvalPlan, eval_plan
from tpu_rl.recipes.costs.consent import COSTLY_RATIO, Spend, times_own
from tpu_rl.recipes.costs.prices import PriceTable, load_prices, usd
from tpu_rl.recipes.costs.standing import ESTIMATE_NOTE as ESTIMATE_NOTE  # one wording for every figure, re-exported
from tpu_rl.recipes.costs.train_time import TrainTime, as_defined, train_time
from tpu_rl.recipes.runs.spec import RunSpec


# Each step puts exactly one pod on the CPU pool (convert/export job, or the Pathways head during
# train), and the pool autoscales from 0, so one node is up during a run.
CPU_NODES_DURING_RUN = 1


# The step that runs on TPU hosts; convert and export run on the CPU pool.
TPU_STEP = "train"


@dataclass(frozen=True)
class CostLine:
    """One priced item: `quantity` units at `unit_price` USD per hour each; `train_only` when it bills only
    while the train step runs (a TPU slice that scales from zero, and its share of the NAT gateway)."""

    item: str
    quantity: float
    unit: str
    unit_price: float
    reserved: bool = False
    train_only: bool = False

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
    # The zones the slice may come from (ZONE): a stack with several has pools in each, but one train step
    # runs one slice in one of them at a time, so the figures are per slice whatever the zone; quota is
    # regional (recipes.toml [tpu.<generation>.quota]), so the same chips count in each zone.
    zones: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        """Per hour while every line bills: during the train step."""
        return sum(line.hourly for line in self.lines)

    @property
    def outside_train(self) -> float:
        """Per hour during convert and export: without the lines that bill only in train."""
        return sum(line.hourly for line in self.lines if not line.train_only)

    @property
    def tpu_train_only(self) -> bool:
        """Whether the TPU hosts exist only while the train step runs."""
        return any(line.train_only for line in self.lines)

    def during(self, step: str) -> float:
        return self.total if step == TPU_STEP else self.outside_train

    @property
    def reserved(self) -> float:
        """The part of the total that is reserved capacity (billed for the reservation's term anyway)."""
        return sum(line.hourly for line in self.lines if line.reserved)

    @property
    def has_reserved(self) -> bool:
        return any(line.reserved for line in self.lines)

    def summary(self) -> str:
        """e.g. `$62.78/h (TPU reserved)`, or `$89.68/h in train, $3.28/h in convert/export` when the TPU
        hosts exist only while training."""
        text = f"{usd(self.total)}/h"
        if len(self.zones) > 1:
            text += f" (one slice, in {' or '.join(self.zones)})"
        if self.tpu_train_only:
            return f"{text} in train, {usd(self.outside_train)}/h in convert/export"
        return f"{text} (TPU reserved)" if self.has_reserved else text


@dataclass(frozen=True)
class StepCost:
    """One step: its minutes, what it costs, and the TPU chip-hours it bills or, when the slice scales
    from zero and the step does not need it, avoids."""

    step: str
    minutes: int
    usd: float
    tpu_chip_hours: float = 0.0
    tpu_chip_hours_avoided: float = 0.0

    def summary(self) -> str:
        """e.g. `about 180 min, $269.04`."""
        return f"about {self.minutes} min, {usd(self.usd)}"


@dataclass(frozen=True)
class RunEstimate:
    """One pipeline run (convert, train, export): the recipe's durations, train's scaled to the run."""

    recipe: str
    steps: tuple[StepCost, ...]
    has_reserved: bool
    train: TrainTime  # the train step's minutes and what they assume (recipes/costs/train_time.py)

    @property
    def total(self) -> float:
        return sum(step.usd for step in self.steps)

    @property
    def minutes(self) -> int:
        return sum(step.minutes for step in self.steps)

    @property
    def tpu_chip_hours(self) -> float:
        return sum(step.tpu_chip_hours for step in self.steps)

    @property
    def tpu_chip_hours_avoided(self) -> float:
        return sum(step.tpu_chip_hours_avoided for step in self.steps)

    def step(self, name: str) -> StepCost:
        return next(step for step in self.steps if step.step == name)

    def steps_summary(self, names: Sequence[str]) -> str:
        """The time and cost of some of the steps, e.g. `about 210 min, $301.50 for train, export`."""
        chosen = [self.step(name) for name in names]
        return (f"about {sum(step.minutes for step in chosen)} min, {usd(sum(step.usd for step in chosen))} "
                f"for {', '.join(names)}")

    def summary(self) -> str:
        text = f"{usd(self.total)} for {self.minutes} min"
        if self.tpu_chip_hours_avoided:
            return (f"{text} (TPU only in train: {self.tpu_chip_hours:.1f} chip-hours billed, "
                    f"{self.tpu_chip_hours_avoided:.1f} avoided)")
        return f"{text} (TPU reserved)" if self.has_reserved else text


def _nat_line(prices: PriceTable, vms: int) -> CostLine:
    return CostLine(f"Cloud NAT ({vms} {'VM' if vms == 1 else 'nodes'})", 1, "gateway", prices.nat_hourly(vms))


def hourly_estimate(recipe: Recipe, prices: PriceTable | None = None, zones: tuple[str, ...] = ()) -> CostBreakdown:
    """What the recipe's stack costs per hour while its pipeline runs (lines marked train_only bill only
    during the train step). `zones`: where the slice may come from (Settings.zones_for), which the summary
    names when there are several; the figures do not change with them (CostBreakdown.zones)."""
    prices = prices or load_prices()
    facts = recipe.platform_facts
    lines = registered(HOURLY_LINES, facts.stack, "HOURLY_LINES of recipes/costs/run.py", "stack")(recipe, prices)
    return CostBreakdown(recipe.name, recipe.capacity[0], prices.region, tuple(lines), facts.zones_used(zones))


def _tpu_line(recipe: Recipe, prices: PriceTable, where: str = "", train_only: bool = False) -> CostLine:
    """The recipe's chips in the capacity expected to serve (the first; the rest of the list is fallback)."""
    shape, mode = recipe.shape, recipe.capacity[0]
    return CostLine(f"TPU {shape.generation} chips ({mode}){where}", shape.total_chips, "chip",
                    prices.tpu_chip_hour(shape.generation, mode).usd_per_hour, reserved=MODE_RULES[mode].reservation,
                    train_only=train_only)


def _tpu_vm_lines(recipe: Recipe, prices: PriceTable) -> list[CostLine]:
    """No cluster: the TPU VM and its NAT."""
    return [_tpu_line(recipe, prices, f", VM {recipe.shape.machine_type}"), _nat_line(prices, recipe.shape.total_hosts)]


def _cluster_lines(recipe: Recipe, prices: PriceTable) -> list[CostLine]:
    """The TPU pools, the CPU and system pools, the cluster's fee and the NAT for every node behind it."""
    shape = recipe.shape
    cpu = prices.machine(recipe.cpu_machine_type or "")
    system = prices.machine(conventions.SYSTEM_POOL_MACHINE_TYPE)
    other_nodes = CPU_NODES_DURING_RUN + conventions.SYSTEM_POOL_NODES
    # On GKE the pools of its first capacity mode scale to zero unless reserved; a TPU VM stays.
    train_only = recipe.platform_facts.tpu_only_in_train(recipe.capacity[0])
    if train_only:  # the gateway's price for the TPU hosts, on top of the other nodes', only while they exist
        extra = prices.nat_hourly(other_nodes + shape.total_hosts) - prices.nat_hourly(other_nodes)
        nat = [_nat_line(prices, other_nodes),
               CostLine(f"Cloud NAT for {shape.total_hosts} TPU hosts", 1, "gateway", extra, train_only=True)]
    else:
        nat = [_nat_line(prices, shape.total_hosts + other_nodes)]
    return [
        _tpu_line(recipe, prices, train_only=train_only),
        CostLine(f"CPU pool {recipe.cpu_machine_type}", CPU_NODES_DURING_RUN, "node", cpu.usd_per_hour),
        CostLine(f"system pool {conventions.SYSTEM_POOL_MACHINE_TYPE}", conventions.SYSTEM_POOL_NODES, "node",
                 system.usd_per_hour),
        CostLine("GKE cluster management fee", 1, "cluster", prices.gke_cluster.usd_per_hour),
        *nat,
    ]


# What each kind of stack (its platform's fact `stack`) bills per hour while a pipeline runs.
HOURLY_LINES: dict[Stack, Callable[[Recipe, PriceTable], list[CostLine]]] = {
    Stack.CLUSTER: _cluster_lines, Stack.TPU_VM: _tpu_vm_lines}


def pipeline_run_estimate(spec: RunSpec, prices: PriceTable | None = None) -> RunEstimate:
    """One run of convert, train and export at the recipe's durations, train's scaled to the steps and the
    evaluation of the run its --set items make (recipes/costs/train_time.py); RunSpec.of_catalog for the recipe's own.

    A reservation's pools and the TPU VM are part of the stack, so they bill through every step, the
    CPU-only ones included (and a reservation for its whole term). A slice that scales from zero bills
    only in train; the chip-hours convert and export would have cost are reported as avoided.
    """
    recipe = spec.recipe
    hourly = hourly_estimate(recipe, prices)
    chips, timing = recipe.shape.total_chips, train_time(spec)
    steps = []
    for step in STEPS:
        minutes = timing.minutes if step == TPU_STEP else getattr(recipe.durations_minutes, step)
        chip_hours = chips * minutes / 60
        billed = step == TPU_STEP or not hourly.tpu_train_only
        steps.append(StepCost(step, max(1, round(minutes)), hourly.during(step) * minutes / 60,
                              tpu_chip_hours=chip_hours if billed else 0.0,
                              tpu_chip_hours_avoided=0.0 if billed else chip_hours))
    return RunEstimate(recipe.name, tuple(steps), hourly.has_reserved, timing)


def driver_share() -> float:
    """The part of the system node (conventions.SYSTEM_POOL_*) that one run's driver requests: the larger
    of its vCPU and memory shares."""
    return max(conventions.DRIVER_CPU_MILLI / 1000 / conventions.SYSTEM_POOL_VCPUS,
               conventions.DRIVER_MEMORY_GIB / conventions.SYSTEM_POOL_MEMORY_GIB)


def driver_cost_line() -> str:
    """The run's driver (jobs/driver.py) in one line: it runs on the always-on system node, billed with or
    without it, so it adds nothing until a sweep's drivers outgrow the node and the pool adds one."""
    return (f"driver: {driver_share():.0%} of the {conventions.SYSTEM_POOL_MACHINE_TYPE} system node, which bills "
            "anyway: no extra cost")


def own_run_total(spec: RunSpec, prices: PriceTable | None = None) -> float:
    """The recipe's own run, as recipes.toml defines it: what COSTLY_RATIO multiplies."""
    return pipeline_run_estimate(as_defined(spec), prices).total


def run_spend(spec: RunSpec, yes: bool, max_cost: float | None) -> Spend:
    """What `run` would spend on this run, against the recipe's own (recipes/costs/consent.py)."""
    return Spend("this run", pipeline_run_estimate(spec).total, own_run_total(spec), yes=yes, max_cost=max_cost)


def costly_run_warning(spec: RunSpec, prices: PriceTable | None = None) -> str | None:
    """One line when the run's --set items make it cost COSTLY_RATIO times the recipe's own run or more."""
    run = pipeline_run_estimate(spec, prices).total
    own = own_run_total(spec, prices)
    if run < COSTLY_RATIO * own:
        return None
    return (f"warning: this run is estimated at {usd(run)}, {times_own(run, own)} the recipe's own run "
            f"({usd(own)}): check the --set items that change its steps or its evaluation")


def run_table(recipes: list[Recipe], prices: PriceTable | None = None) -> str:
    """The table of one pipeline run per recipe: time, TPU chip-hours billed and avoided, and cost per
    step, for each recipe's capacity mode (in README.md; in docs/capacity.md for CAPACITY=flex-start,spot).
    Tests keep both in sync."""
    rows = ["| recipe | capacity | step | expected minutes | TPU chip-hours billed | TPU chip-hours avoided | "
            "estimated cost |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for recipe in recipes:
        estimate = pipeline_run_estimate(RunSpec.of_catalog(recipe), prices)
        mode = recipe.capacity[0]
        for step in estimate.steps:
            rows.append(f"| {recipe.name} | {mode} | {step.step} | {step.minutes} | {step.tpu_chip_hours:.1f} | "
                        f"{step.tpu_chip_hours_avoided:.1f} | {usd(step.usd)} |")
        reserved = " (TPU reserved)" if estimate.has_reserved else ""
        rows.append(f"| {recipe.name} | {mode} | **whole run** | {estimate.minutes} | {estimate.tpu_chip_hours:.1f} | "
                    f"{estimate.tpu_chip_hours_avoided:.1f} | {usd(estimate.total)}{reserved} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class EvaluationCost:
    """The held-out evaluation's part of the train step: at most its share of the step's completions
    (recipes/runs/evaluation.py says why that is an upper bound), in minutes and dollars of the train step."""

    recipe: str
    plan: EvalPlan
    minutes: float
    usd: float

    def summary(self) -> str:
        if not self.plan.evaluations:
            return self.plan.describe()
        return (f"{self.plan.evaluations} evaluations of {self.plan.questions} test questions: at most "
                f"{self.minutes:.0f} min and {usd(self.usd)} of the train step ({self.plan.share:.0%})")


def evaluation_estimate(recipe: Recipe, prices: PriceTable | None = None) -> EvaluationCost:
    estimate = pipeline_run_estimate(RunSpec.of_catalog(recipe), prices)
    train, timing = estimate.step(TPU_STEP), estimate.train
    share = timing.evaluation / timing.minutes  # of the train step's minutes, and so of its dollars
    return EvaluationCost(recipe.name, eval_plan(recipe), timing.evaluation, train.usd * share)


def evaluation_table(recipes: list[Recipe], prices: PriceTable | None = None) -> str:
    """docs/experiments.md's table of what each recipe's evaluation costs (a test keeps it in sync)."""
    rows = ["| recipe | test questions | evaluations | share of train, at most | minutes | estimated cost |",
            "| --- | --- | --- | --- | --- | --- |"]
    for recipe in recipes:
        cost = evaluation_estimate(recipe, prices)
        rows.append(f"| {recipe.name} | {cost.plan.questions} | {cost.plan.evaluations} | {cost.plan.share:.0%} | "
                    f"{cost.minutes:.1f} | {usd(cost.usd)} |")
    return "\n".join(rows)
