"""The reward functions a run names (`--rewards FILE.py:fn1,fn2`, or `--set reward_functions=...`): each
once. Below the recipe entry, which checks its own overrides with it, and the user files."""

from __future__ import annotations

from tpu_rl.recipes.errors import UserError

# tunix (c4ec573d, the commit MaxText 0.2.4 pins) tunix/rl/reward_manager.py SequenceRewardManager.
# _compute_rewards calls every function of the list, one score column each, and adds the columns
# (np.nansum); MaxText 0.2.4 train_rl.build_reward_fns and evaluate_rl._compute_row_reward keep every
# name, repeats included. A name given twice is called twice and weighs twice.
TWICE_RULE = "tunix calls every listed function and adds their scores, so it would weigh twice"


def repeated_name(functions: tuple[str, ...] | list[str]) -> str | None:
    """The first reward function the list names a second time, if any."""
    return next((name for index, name in enumerate(functions) if name in functions[:index]), None)


def check_reward_names(functions: tuple[str, ...] | list[str], given: str) -> None:
    """Refuse a reward function named twice (almost surely a typo), naming the value `given` and the name."""
    twice = repeated_name(functions)
    if twice is not None:
        raise UserError(f"{given}: names {twice} twice; {TWICE_RULE}: name each function once")
