"""When `run`, `sweep` and `eval` ask before they spend, and what stands for a yes where nobody can be asked
(pure).

The threshold is COSTLY_RATIO times the recipe's own run: its convert, train and export as recipes.toml
defines them, the figure the README's run table shows (recipes/costs/run.py). A multiple of that, not a
fixed sum, because the recipes' own runs differ (a few dollars on the VM recipe, about $180 on
qwen3-v6e32): a user who picked a recipe has seen its price, so what needs a yes is what multiplies it,
a --set that makes the run longer or a sweep of several runs. The ratio is the one at which `run`
already warned, so the warning and the question agree. --max-cost is the user's own threshold: an
estimate that fits it needs no question, and one over it is refused whatever else was given.

It is asked once, when the work is submitted: a new run (no record in the bucket yet) or a whole sweep.
Reattaching, resuming a run whose record holds the same settings, the driver starting again and a sweep's
queued run starting ask nothing (scripts/pipeline/record.py RunRecord.open is where a run is known new).
What was decided is kept in the run's run.json under "consent" (Spend.record), written once with the run's
first record and never replaced, so that a reattached, resumed or retried run shows the yes it was given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.errors import UserError

# A run or sweep estimated at this many times the recipe's own run or more is asked about (see above).
COSTLY_RATIO = 3


def times_own(estimate: float, own: float) -> str:
    """`12.3 times`: an estimate against the recipe's own run in the one rounding every line uses: one decimal,
    rounded down, so a ratio below COSTLY_RATIO never reads as COSTLY_RATIO."""
    return f"{math.floor(round(estimate / own * 10, 6)) / 10:,.1f} times"  # round: 3.0 is not 2.9999...


# How a run under the threshold went on: nothing needed a yes (Spend.record's "how").
NOT_ASKED = "not asked: under the threshold"


def checked_max_cost(value: Optional[float]) -> Optional[float]:
    """--max-cost as given: a finite number of dollars, 0 or more (typer lets nan and inf through)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UserError(f"--max-cost {value}: give a number of US dollars, 0 or more, e.g. --max-cost 500")
    return value


@dataclass(frozen=True)
class Spend:
    """What one submission is estimated at, against the recipe's own run, and what the user gave for it."""

    what: str  # "run exp1", "sweep lr-sweep (6 runs)"
    estimate: float
    own: float  # the recipe's own run
    yes: bool = False
    max_cost: Optional[float] = None

    @property
    def threshold(self) -> float:
        return COSTLY_RATIO * self.own

    @property
    def large(self) -> bool:
        return self.estimate >= self.threshold

    def check_cap(self) -> None:
        """Refuse an estimate over --max-cost, before anything is made."""
        if self.max_cost is not None and self.estimate > self.max_cost:
            raise UserError(f"{self.what} is estimated at {usd(self.estimate)}, over --max-cost "
                            f"{usd(self.max_cost)}: change its --set items or raise --max-cost; nothing was started")

    @property
    def consented(self) -> bool:
        """Whether the command line itself says yes: --yes, or a --max-cost the estimate fits."""
        return self.yes or (self.max_cost is not None and self.estimate <= self.max_cost)

    def question(self) -> str:
        return (f"Start {self.what}, estimated at {usd(self.estimate)} ({times_own(self.estimate, self.own)} "
                f"the recipe's own run, {usd(self.own)})?")

    def record(self, how: str) -> dict:
        """What run.json keeps of this decision: the estimate, the threshold and how it was let through."""
        return {"what": self.what, "estimate_usd": round(self.estimate, 2), "own_run_usd": round(self.own, 2),
                "threshold_usd": round(self.threshold, 2), "how": how,
                **({"max_cost_usd": self.max_cost} if self.max_cost is not None else {})}

    def require(self, ask: Optional[Callable[[str], bool]]) -> dict:
        """Go on with Spend.record of how, or raise UserError: under the threshold or consented, go on; else
        ask where there is a terminal (`ask`), and refuse where there is none or the answer is no."""
        self.check_cap()
        if not self.large:
            return self.record(NOT_ASKED)
        if self.yes:
            return self.record("--yes")
        if self.consented:
            return self.record("--max-cost")
        if ask is None:
            raise UserError(f"{self.what} is estimated at {usd(self.estimate)}, {times_own(self.estimate, self.own)} "
                            f"the recipe's own run ({usd(self.own)}), and there is no terminal to ask in: "
                            f"rerun with --yes, or with --max-cost {math.ceil(self.estimate)}; nothing was started")
        if not ask(self.question()):
            raise UserError(f"answered no: {self.what} was not started, and nothing else was")
        return self.record("prompt")
