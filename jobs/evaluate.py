"""The JobSet that evaluates one saved checkpoint of a run on the held-out set (`tpu-rl eval`). Pure.

MaxText has no evaluation-only entry point (0.2.3 and 0.2.4): train_rl always trains (configs/types.py
`num_batches: int = Field(4, ge=1)`), and its evaluations are the ones around training. What it does
offer: when the run directory holds an RL checkpoint, the trainer restores it and evaluates the restored
weights as "Pre RL Training" before training on (train_rl.py 0.2.4 lines 767-789: `update_params` of the
restored actor, then `evaluate`; tunix's RLLearner takes `restored_global_step()`, tunix/rl/rl_learner.py
at c4ec573d). So a checkpoint is evaluated by a train JobSet of a scratch run, whose
checkpoint directory holds a copy of that step (eval_run_name) (the CLI copies it; tunix restores the latest step under
`checkpoints/actor/`), with:
- num_batches such that train_steps is that step, so training has nothing left: on restore tunix fast-forwards
  the data iterator past every micro-batch already trained (tunix/rl/rl_learner.py at c4ec573d L399-407),
  which here is the whole dataset, so the iterator's StopIteration (L489-494) likely ends training with no
  step at all, or at most one;
- eval_interval=0, so no intermediate evaluation fires.
The Pre line is logged before any of that. The CLI stops the JobSet once it has the line (it reads the
head's whole log when the line scrolled out of the tail it polls, and again if the JobSet ended first),
and gives up after EVAL_WAIT_MINUTES (scripts/pipeline/gke/evaluate.py). Everything else is the run's own recipe: the same slice shape,
image, overrides and conversion (the reference model).
"""

from __future__ import annotations

import math
from typing import Any

from jobs.paths import ArtifactPaths
from jobs.train import train_jobset
from recipes import Recipe, Settings, UserError
from recipes.evaluation import evaluates
from recipes.runs import MAX_RUN_NAME, check_run_name, digest


def eval_run_name(run: str, step: int) -> str:
    """<as much of the run's name as fits>-e<step>-<5 hex of the run name's sha256>: run names are short
    (recipes/runs.py MAX_RUN_NAME), so the hash keeps two runs' evaluations apart when the name is cut."""
    suffix = f"-e{step}-{digest(run)[:5]}"
    return check_run_name(f"{run[:MAX_RUN_NAME - len(suffix)].rstrip('-')}{suffix}", "the evaluation's run name")


def eval_recipe(recipe: Recipe, run: str, step: int) -> Recipe:
    """The run's recipe as the scratch run that evaluates its checkpoint `step`."""
    if not evaluates(recipe):
        raise UserError(f"run {run} evaluates nothing (num_test_batches=0): pass --set num_test_batches=N to "
                        "evaluate N batches of test questions")
    factor = recipe.train_steps / recipe.rl.num_batches  # the step factors (num_iterations, ...)
    overrides = tuple(item for item in recipe.rl.overrides if item.partition("=")[0] != "eval_interval")
    rl = recipe.rl.model_copy(update={"num_batches": max(1, math.ceil(step / factor)),
                                      "overrides": (*overrides, "eval_interval=0")})
    scratch = recipe.model_copy(update={"rl": rl, "run": eval_run_name(run, step)})
    if scratch.train_steps != step:
        raise UserError(f"run {run}'s step factors give no num_batches that trains exactly {step} steps, which "
                        "the evaluation needs to train nothing after restoring the checkpoint")
    return scratch


def eval_jobset(recipe: Recipe, settings: Settings, run: str, step: int) -> dict[str, Any]:
    return train_jobset(ArtifactPaths(eval_recipe(recipe, run, step), settings))
