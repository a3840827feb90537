"""How long a run's train step is expected to take: the recipe's measured minutes, scaled to the steps
and the evaluation this run's settings ask for (`--set num_batches=...`, `num_test_batches=...`).

The assumptions, which every output that shows the figure names (`TrainTime.assumption`):
- recipes.toml's durations_minutes.train is the train step of the recipe as it stands there, its held-out
  evaluation included; the evaluation's share of it is at most its share of the completions generated
  (recipes/runs/evaluation.py says why that is an upper bound), and the rest is training;
- a training step takes what the recipe's training took divided by its step count, times the step's
  completions (batch_size x rl.num_generations) over the recipe's: a step generates and trains on them,
  so its time follows their number (the line says the factor when --set changes it);
- an evaluation completion takes what a training completion took at the recipe's settings (an upper
  bound: a training step also runs the backward pass);
- the steps are those the training data allows of those the settings ask for: train_rl keeps at most
  num_batches x batch_size x train_fraction rows of its split (recipes/runs/datasets.py), so a num_batches
  past the data is priced at the steps the data makes, and the line says so.
Conversion and export do not depend on these settings and keep their minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes.runs.datasets import DataLimit, data_limit, trained_steps
from tpu_rl.recipes.runs.evaluation import eval_plan
from tpu_rl.recipes.runs.spec import RunSpec


def as_defined(spec: RunSpec) -> RunSpec:
    """The run of the recipe as recipes.toml defines it, before --set: the run its durations were measured on."""
    return RunSpec.of_catalog(spec.recipe.model_copy(update={"rl": spec.catalog_rl}))


@dataclass(frozen=True)
class TrainTime:
    """The train step's expected minutes: training and, within it, the held-out evaluation."""

    training: float
    evaluation: float
    steps: int
    minutes_per_step: float
    measured_minutes: int  # recipes.toml's train minutes
    measured_steps: int  # the steps of the recipe as defined there
    completions_per_step: int = 0  # batch_size x rl.num_generations of this run
    measured_completions_per_step: int = 0  # and of the recipe as defined
    data: DataLimit | None = None  # the steps the training data allows; it caps `steps` when it `caps`

    @property
    def minutes(self) -> float:
        return self.training + self.evaluation

    @property
    def assumption(self) -> str:
        """What the figure assumes, in one sentence."""
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        scaled = ""
        if self.completions_per_step != self.measured_completions_per_step:
            factor = self.completions_per_step / self.measured_completions_per_step
            scaled = (f", times {factor:.3g} for {self.completions_per_step} completions a step against its "
                      f"{self.measured_completions_per_step}")
        # "up to": train_rl drops long prompts before it takes num_batches x batch_size items, and a dataset
        # smaller than that ends training early (recipes/catalog/recipe.py Recipe.train_steps)
        if self.data is not None and self.data.caps:
            steps += (f" (of the {self.data.asked:,} asked for: {self.data.dataset} has {self.data.rows:,} rows, "
                      "and train_rl stops when they run out)")
        return (f"train up to {steps} at {self.minutes_per_step:.2f} min each (the recipe's {self.measured_minutes} "
                f"min for its {self.measured_steps} steps, less its evaluation{scaled})"
                + (f", and evaluation {self.evaluation:.0f} min" if self.evaluation else ""))


def train_time(spec: RunSpec) -> TrainTime:
    recipe, base = spec.recipe, as_defined(spec).recipe
    measured, plan, run_plan = base.durations_minutes.train, eval_plan(base), eval_plan(recipe)
    training_minutes = measured * (1 - plan.share)
    per_completion = training_minutes / plan.train_completions if plan.train_completions else 0.0
    steps, measured_steps = trained_steps(recipe), trained_steps(base)
    measured_per_step = plan.train_completions // measured_steps if measured_steps else 0
    run_per_step = run_plan.train_completions // steps if steps else 0
    per_step = training_minutes / measured_steps
    if measured_per_step and run_per_step:  # a step's time follows the completions it generates
        per_step *= run_per_step / measured_per_step
    return TrainTime(per_step * steps, per_completion * run_plan.completions, steps, per_step, measured,
                     measured_steps, run_per_step, measured_per_step, data_limit(recipe))
