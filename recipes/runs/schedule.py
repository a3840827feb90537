"""The learning-rate schedule train_rl trains with: unless set, its length follows the run's step count.

The pinned releases disagree on `learning_rate_schedule_steps` left at -1: MaxText 0.2.3's `get_optimizer`
(trainers/post_train/rl/utils_rl.py) warms up over its default 150_001 steps, 0.2.4's over the run's
(docs/provenance.md#learning-rate-schedule-length).

tpu-rl therefore always passes the length: the recipe's rl.learning_rate_schedule_ratio x the steps the run
trains (after --set num_batches=N etc.), unless an override sets learning_rate_schedule_steps itself. The
same value then gives the same schedule under both releases. The steps it trains are those its data allows
(recipes/runs/datasets.py trained_steps), not num_batches x ... alone: train_rl cuts the split to
num_batches x batch_size x train_fraction rows, so a num_batches past the data would stretch the schedule
over steps that never run and leave the run in its warmup (0.2.4 utils_rl.py get_optimizer:
warmup_steps = warmup_steps_fraction x the length). The length passed then differs from `steps` (0.2.4
sets it to train_steps), which is how get_optimizer tells a length given from one left unset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.runs.datasets import trained_steps

if TYPE_CHECKING:
    from tpu_rl.recipes.catalog.recipe import Recipe

SCHEDULE_KEY = "learning_rate_schedule_steps"


def explicit_schedule(recipe: Recipe) -> int | None:
    """The schedule length an override (the recipe's or --set) gives, or None when none does."""
    given = recipe.rl.override(SCHEDULE_KEY)
    if given is None:
        return None
    try:
        return int(given)
    except ValueError:
        raise UserError(f"recipe '{recipe.name}': {SCHEDULE_KEY}={given} is not a whole number of steps") from None


def derived_schedule(recipe: Recipe) -> int:
    """The schedule length tpu-rl passes when no override sets one: the ratio x the steps the run trains."""
    return max(1, round(recipe.rl.learning_rate_schedule_ratio * trained_steps(recipe)))


def schedule_steps(recipe: Recipe) -> int:
    """The learning_rate_schedule_steps the train command carries."""
    given = explicit_schedule(recipe)
    return derived_schedule(recipe) if given is None else given


def steps_at_zero_rate(recipe: Recipe) -> int:
    """How many of the run's steps an explicit schedule shorter than the run leaves at a rate of 0: optax's
    cosine reaches 0 at the schedule's length and stays there (the step counts are 0 .. the trained steps - 1)."""
    given = explicit_schedule(recipe)
    return max(0, trained_steps(recipe) - given) if given is not None and given > 0 else 0


def schedule_warning(recipe: Recipe) -> str | None:
    """One line when an explicit schedule is shorter than the run, or is -1 (MaxText's default, which 0.2.3
    turns into `steps`), or None."""
    if explicit_schedule(recipe) == -1:
        return (f"warning: {SCHEDULE_KEY}=-1 lets MaxText pick the length: 0.2.3 takes `steps` (150001 by default), "
                "so the run ends inside the warmup (leave it unset and the schedule follows the run's steps)")
    zero = steps_at_zero_rate(recipe)
    if not zero:
        return None
    return (f"warning: {SCHEDULE_KEY}={explicit_schedule(recipe)} is shorter than the run's "
            f"{trained_steps(recipe)} steps: {zero} steps would train at a learning rate of 0 (leave it unset "
            "and the schedule follows the run's steps)")
