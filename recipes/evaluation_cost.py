"""What the held-out evaluation costs: its share of the train step's minutes and dollars, per recipe
(`tpu-rl recipes` and docs/experiments.md's table)."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes.cost import TPU_STEP, pipeline_run_estimate
from tpu_rl.recipes.evaluation import EvalPlan, eval_plan
from tpu_rl.recipes.model import Recipe
from tpu_rl.recipes.prices import PriceTable, usd
from tpu_rl.recipes.run_spec import RunSpec


@dataclass(frozen=True)
class EvaluationCost:
    """The held-out evaluation's part of the train step: at most its share of the step's completions
    (recipes/evaluation.py says why that is an upper bound), in minutes and dollars of the train step."""

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
