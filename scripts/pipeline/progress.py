"""How far training is, from the trainer's own log line (tunix's, as MaxText's RL trainer runs it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The line MaxText's RL trainer writes for each train step, at absl INFO: tunix's PeftTrainer._log_metrics,
#   logging.info("Train step %d training loss: %f  - training perplexity: %f", step, loss, perplexity)
# (google/tunix tunix/sft/peft_trainer.py: the call is on line 735 at c4ec573d = MaxText 0.2.4 and on line
# 488 at 683256db = 0.2.3, the numbers absl's prefix shows, e.g. "peft_trainer.py:735] "). tunix's tqdm
# bar is off when stderr is not a terminal (tunix/sft/progress_bar.py), so in a pod this line is the
# only progress there is. The loss is logged one step late; the step number in the line is what we
# show. `%f` prints nan and inf as such, and a GRPO loss can be negative.
TRAIN_STEP = re.compile(r"\bTrain step (\d+) training loss: (-?(?:\d+\.\d+|nan|inf))  - training perplexity: ")


@dataclass(frozen=True)
class TrainProgress:
    step: int
    loss: float

    def describe(self, total: int) -> str:
        return f"training step {self.step}/{total}, loss {self.loss:.4g}"


def last_train_step(log_text: str) -> TrainProgress | None:
    """The last train step and its loss in the trainer's log; None while it has logged none."""
    matches = list(TRAIN_STEP.finditer(log_text))
    return TrainProgress(int(matches[-1][1]), float(matches[-1][2])) if matches else None
