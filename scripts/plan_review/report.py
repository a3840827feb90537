"""The review as Markdown: the changed resources per stack, the changed fields per recipe and step, and
the cost estimates per stack."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from tpu_rl.recipes import conventions
from tpu_rl.recipes.catalog.recipe import build_recipes
from tpu_rl.recipes.costs.prices import load_prices, usd
from tpu_rl.recipes.costs.run import CostBreakdown, RunEstimate, hourly_estimate, pipeline_run_estimate
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.plan_review.diff import StackDiff, StepDiff

# --------------------------------------------------------------------------------------------------
# Stacks

def _inline(fields: list[tuple[str, str, list[str]]]) -> tuple[str, list[str]]:
    parts, extra = [], []
    for path, text, lines in fields:
        parts.append(f"{path} {text}" if path else text)
        extra.extend(lines)
    return ", ".join(parts), extra


def render_stacks(diffs: list[StackDiff]) -> list[str]:
    out = ["### Stacks", ""]
    if not diffs:
        return out + ["No resource changes.", ""]
    for diff in diffs:
        heading = f"#### `{diff.name}`"
        if diff.status != "changed":
            heading += f" (stack {diff.status})"
        out.append(heading)
        for address, fields in diff.changed:
            text, extra = _inline(fields)
            out.append(f"- changed `{address}`: {text}")
            out.extend(f"  - {line}" for line in extra)
        out.extend(f"- added `{address}`" for address in diff.added)
        out.extend(f"- removed `{address}`" for address in diff.removed)
        out.append("")
    return out


def render_other_capacity(diffs: list[StackDiff], setting: str) -> list[str]:
    """What the build with every capacity mode's pools shows beyond the default build (nothing if none)."""
    if not diffs:
        return []
    intro = [f"Built again with CAPACITY={setting}, so that the pools of every capacity mode are compared; "
             "what differs there and not above:", ""]
    return ["### Other capacity modes", "", *intro, *render_stacks(diffs)[2:]]


# --------------------------------------------------------------------------------------------------
# Manifests

def render_manifests(diffs: list[StepDiff]) -> list[str]:
    out = ["### Manifests", ""]
    if not diffs:
        return out + ["No manifest changes.", ""]
    for diff in diffs:
        if diff.status != "changed":
            out.extend([f"#### `{diff.recipe}` {diff.step} (step {diff.status})", ""])
            continue
        out.append(f"#### `{diff.recipe}` {diff.step}")
        for path, text, extra in diff.fields:
            out.append(f"- `{path}`: {text}" if path else f"- {text}")
            out.extend(f"  - {line}" for line in extra)
        out.append("")
    return out


# --------------------------------------------------------------------------------------------------
# Cost

@dataclass(frozen=True)
class StackCost:
    hourly: CostBreakdown
    run: RunEstimate


def costs_for(recipes_toml: Path) -> dict[str, StackCost] | str:
    """Estimates for every recipe stack of one side, or why there are none."""
    try:
        table = tomllib.loads(recipes_toml.read_text())
        recipes = build_recipes(table, source=str(recipes_toml.name))
        return {name: StackCost(hourly_estimate(recipe), pipeline_run_estimate(RunSpec.of_catalog(recipe)))
                for name, recipe in recipes.items()}
    except (OSError, tomllib.TOMLDecodeError, UserError) as error:
        return f"no estimate ({' '.join(str(error).split())})"


def _cost_cell(cost: StackCost | None, stack: str) -> tuple[str, str]:
    if stack == conventions.ARTIFACTS_STACK:
        return "negligible", "—"
    if cost is None:
        return "—", "—"
    return cost.hourly.summary(), cost.run.summary()


def _change(before: StackCost | None, after: StackCost | None) -> str:
    old = before.hourly.total if before else 0.0
    new = after.hourly.total if after else 0.0
    delta = new - old
    if abs(delta) < 0.005:
        return "no change"
    return f"{'+' if delta > 0 else '−'}{usd(abs(delta))}/h"


def render_costs(stacks: list[str], before: dict[str, StackCost] | str, after: dict[str, StackCost] | str) -> list[str]:
    prices = load_prices()
    checked = sorted({p.checked for p in prices.machines.values()} | {prices.gke_cluster.checked}
                     | {p.checked for modes in prices.tpu.values() for p in modes.values()})
    out = [
        "### Cost (estimates)",
        "",
        f"Estimates from list prices in recipes/costs/prices.toml ({prices.region}, checked {', '.join(checked)}); "
        "not a quote. Hourly figures are while a pipeline runs; reserved TPU capacity is billed for the "
        "reservation's term whether it is used or not, and a TPU slice that scales from zero (spot, "
        "on-demand, flex-start) only during the train step.",
        "",
    ]
    for label, side in (("REF", before), ("working tree", after)):
        if isinstance(side, str):
            out.extend([f"_{label}: {side}_", ""])
    before_costs = before if isinstance(before, dict) else {}
    after_costs = after if isinstance(after, dict) else {}
    out.extend([
        "| Stack | Before, per hour | After, per hour | Change | One pipeline run, before | One pipeline run, after |",
        "|---|---|---|---|---|---|",
    ])
    for stack in stacks:
        old, new = before_costs.get(stack), after_costs.get(stack)
        old_hour, old_run = _cost_cell(old, stack)
        new_hour, new_run = _cost_cell(new, stack)
        if stack == conventions.ARTIFACTS_STACK:
            change = "no change"
        elif isinstance(before, str) or isinstance(after, str):
            change = "—"  # one side has no estimate: a difference would be meaningless
        else:
            change = _change(old, new)
        out.append(f"| `{stack}` | {old_hour} | {new_hour} | {change} | {old_run} | {new_run} |")
    out.append("")
    return out


def cost_signature(costs: dict[str, StackCost] | str) -> object:
    if isinstance(costs, str):
        return costs
    return {name: (round(c.hourly.total, 4), c.hourly.has_reserved, round(c.run.total, 4)) for name, c in costs.items()}
