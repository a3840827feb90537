"""What an evaluation can bill at most, weighed before anything is asked of a cloud: this module imports no
cloud library, so `eval` refuses a spend it may not make within a blink (tests/test_cli_refusals_load_no_cloud.py)."""

from __future__ import annotations

from tpu_rl.jobs.train import PREEMPTIBLE_MAX_RESTARTS, restarts_after_preemption
from tpu_rl.recipes import Recipe
from tpu_rl.recipes.costs.consent import Spend
from tpu_rl.recipes.costs.run import hourly_estimate, own_run_total
from tpu_rl.recipes.runs.spec import RunSpec

# Every wait has an end: loading the checkpoint, compiling and one evaluation of the held-out set take
# minutes; past this the JobSet is stopped and the eval fails, so a hung trainer is not paid for. The
# clock starts when the attempt has all its pods ready (the head's container runs on the granted slice):
# the wait before that, Kueue's queue and the slice's scale-up, is the train step's and is bounded the
# same way, by CAPACITY_WAIT (admission.py CapacityWatch), so a slice granted late is still used.
EVAL_WAIT_MINUTES = 90


def eval_spend(recipe: Recipe, run: str, yes: bool, max_cost: float | None) -> Spend:
    """The most an evaluation can bill, weighed by the rule `run` and `sweep` follow (recipes/costs/consent.py):
    the train step's hourly rate (recipes/costs/run.py) for EVAL_WAIT_MINUTES from when its pods are ready, in
    each attempt the train JobSet may make (jobs/train.py train_failure_policy: 1 + PREEMPTIBLE_MAX_RESTARTS on
    preemptible capacity). The bound, not the expected minutes: the JobSet is deleted at it, so no evaluation
    bills past it. The minutes between the slice's grant and its pods being ready are not in it."""
    attempts = 1 + (PREEMPTIBLE_MAX_RESTARTS if restarts_after_preemption(recipe) else 0)
    most = hourly_estimate(recipe).total * EVAL_WAIT_MINUTES / 60 * attempts
    return Spend(f"the evaluation of run {run}", most, own_run_total(RunSpec.of_catalog(recipe)), yes=yes,
                 max_cost=max_cost)
