"""How far training is, read from the run: the step and loss from the trainer's own log line (tunix's, as
MaxText's RL trainer runs it), and the latest mean reward from the run's TensorBoard event files in the
bucket. scripts/pipeline/progress.py shows them while a step runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from tpu_rl.scripts.rundata.events import latest_scalars_in_bucket
from tpu_rl.scripts.rundata.tags import REWARD_MEAN

# The line MaxText's RL trainer writes for each train step, at absl INFO: tunix's PeftTrainer._log_metrics
# (google/tunix tunix/sft/peft_trainer.py at c4ec573d and 683256db), the only progress in a pod. The loss is
# logged one step late; `%f` prints nan and inf, and a GRPO loss can be negative (docs/provenance.md#the-train-step-line).
TRAIN_STEP = re.compile(r"\bTrain step (\d+) training loss: (-?(?:\d+\.\d+|nan|inf))  - training perplexity: ")


@dataclass(frozen=True)
class TrainProgress:
    step: int
    loss: float

    def describe(self, total: int) -> str:
        return f"step {self.step}/{total}, loss {self.loss:.4g}"


def last_train_step(log_text: str) -> TrainProgress | None:
    """The last train step and its loss in the trainer's log; None while it has logged none."""
    matches = list(TRAIN_STEP.finditer(log_text))
    return TrainProgress(int(matches[-1][1]), float(matches[-1][2])) if matches else None


# tensorboardX flushes the event files every 120 s (and at the end; scripts/metrics/table.py has the
# source), so reading them more often than this shows nothing new and only costs downloads.
REWARD_READ_SECONDS = 60.0


class RewardReader:
    """The latest `rewards/train/mean` of a run, read from its event files under a gs:// prefix at most
    once every REWARD_READ_SECONDS. A failure to read them (no files yet, a file half uploaded, the bucket
    unreachable) keeps the last value: the reward decorates the progress line and never stops a run."""

    def __init__(self, storage: Callable[[], object], url: str, now: Callable[[], datetime],
                 interval: float = REWARD_READ_SECONDS) -> None:
        self.storage, self.url, self.now, self.interval = storage, url, now, interval
        self.value: float | None = None
        self._read_at: datetime | None = None

    def latest(self) -> float | None:
        now = self.now()
        if self._read_at is not None and (now - self._read_at).total_seconds() < self.interval:
            return self.value
        self._read_at = now
        try:
            found = latest_scalars_in_bucket(self.storage(), self.url, (REWARD_MEAN.name,)).get(REWARD_MEAN.name)
        except Exception:  # noqa: BLE001 -- see the class docstring
            return self.value
        if found is not None:
            self.value = found[1]
        return self.value
