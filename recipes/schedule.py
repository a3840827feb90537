"""The learning-rate schedule train_rl trains with: unless set, its length follows the run's step count.

What each pinned release does with `learning_rate_schedule_steps` (read from the wheels):
- MaxText 0.2.3: configs/types.py (L2514-2516) sets it to `steps` when it is -1, and `steps` defaults to
  150_001 (base.yml L772, types.py L1388); trainers/post_train/rl/utils_rl.py `get_optimizer` (L535-583)
  takes any positive value as the schedule's length: optax.warmup_cosine_decay_schedule(init 0, peak
  learning_rate, warmup_steps=int(warmup_steps_fraction x length), decay_steps=length, end 0), with
  warmup_steps_fraction 0.1 (base.yml L805). So a 50-step run left at -1 warms up over 15,000 steps and
  ends at 3e-6 x 49 / 15,000 (about 1e-8): seed 002's schedule.
- MaxText 0.2.4: the same rewrite to `steps` (types.py L3267-3269), but `get_optimizer` (utils_rl.py
  L587-645) treats a value equal to `steps` as unset and uses the run's train_steps; any other positive
  value is deliberate and decays the rate to 0 at that step, so with --set num_batches=1000 a schedule of
  100 trains 900 paid steps at a rate of 0.

tpu-rl therefore always passes the length: the recipe's rl.learning_rate_schedule_ratio x the run's train
steps (after --set num_batches=N etc.), unless an override sets learning_rate_schedule_steps itself. The
same value then gives the same schedule under both releases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recipes.errors import UserError

if TYPE_CHECKING:
    from recipes.model import Recipe

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
    """The schedule length tpu-rl passes when no override sets one: the ratio x the run's train steps."""
    return max(1, round(recipe.rl.learning_rate_schedule_ratio * recipe.train_steps))


def schedule_steps(recipe: Recipe) -> int:
    """The learning_rate_schedule_steps the train command carries."""
    given = explicit_schedule(recipe)
    return derived_schedule(recipe) if given is None else given


def steps_at_zero_rate(recipe: Recipe) -> int:
    """How many of the run's steps an explicit schedule shorter than the run leaves at a rate of 0: optax's
    cosine reaches 0 at the schedule's length and stays there (the step counts are 0 .. train_steps-1)."""
    given = explicit_schedule(recipe)
    return max(0, recipe.train_steps - given) if given is not None and given > 0 else 0


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
            f"{recipe.train_steps} steps: {zero} steps would train at a learning rate of 0 (leave it unset "
            "and the schedule follows the run's steps)")
