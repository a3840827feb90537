"""How far training is: the step and loss from the trainer's own log line (tunix's, as MaxText's RL trainer
runs it), and the latest mean reward from the run's TensorBoard event files in the bucket."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

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
        return f"step {self.step}/{total}, loss {self.loss:.4g}"


def progress_suffix(progress: TrainProgress | None, total: int, reward: float | None) -> str:
    """What a progress line adds for training: `, step 12/50, loss 0.412, reward 0.37`, each part when
    known ("" when neither is)."""
    parts = ([progress.describe(total)] if progress is not None else []) + \
        ([f"reward {reward:.3g}"] if reward is not None else [])
    return "".join(f", {part}" for part in parts)


def training_now(progress: TrainProgress | None, total: int, storage: Callable[[], object], tensorboard: str,
                 now: Callable[[], datetime]) -> str:
    """How far training is at one look (`tpu-rl status`), as `run` shows it: `step 12/50, loss 0.412,
    reward 0.37`, each part when known ("" when neither is)."""
    reward = RewardReader(storage, tensorboard, now).latest()
    return progress_suffix(progress, total, reward).removeprefix(", ")


def last_train_step(log_text: str) -> TrainProgress | None:
    """The last train step and its loss in the trainer's log; None while it has logged none."""
    matches = list(TRAIN_STEP.finditer(log_text))
    return TrainProgress(int(matches[-1][1]), float(matches[-1][2])) if matches else None


class AttemptProgress:
    """The furthest train step seen in the current attempt. The trainer's line is searched in a window of
    the log (the last lines of the head's log, the console since the step started), and tunix logs
    multi-line rollouts at INFO between two steps, so a window may hold no step line: the last one seen
    stays. Within an attempt the step never goes back; a new attempt (a JobSet restart, a reboot of the
    VM) resumes from a checkpoint, behind the step the old one reached, so it starts afresh."""

    def __init__(self) -> None:
        self.attempt: object = None
        self.progress: TrainProgress | None = None

    def update(self, attempt: object, log_text: str) -> TrainProgress | None:
        if attempt != self.attempt:
            self.attempt, self.progress = attempt, None
        found = last_train_step(log_text)
        if found is not None and (self.progress is None or found.step >= self.progress.step):
            self.progress = found
        return self.progress


class StepPace:
    """Time left in training from the pace of the current attempt: the seconds per step between the first
    step seen and the latest (each timed when first seen), times the steps still to go. Unknown (None)
    until two steps were seen; a new attempt starts afresh, as AttemptProgress does."""

    def __init__(self) -> None:
        self.attempt: object = None
        self.first: tuple[int, datetime] | None = None
        self.latest: tuple[int, datetime] | None = None

    def seconds_left(self, attempt: object, progress: TrainProgress | None, total: int, now: datetime) -> float | None:
        if attempt != self.attempt:
            self.attempt, self.first, self.latest = attempt, None, None
        if progress is None:
            return None
        self.first = self.first or (progress.step, now)
        if self.latest is None or progress.step > self.latest[0]:
            self.latest = (progress.step, now)
        (first_step, first_time), (step, seen) = self.first, self.latest
        if step <= first_step:
            return None
        per_step = (seen - first_time).total_seconds() / (step - first_step)
        return max(per_step * (total - step) - (now - seen).total_seconds(), 0.0)


def training_line(step: str, progress: TrainProgress | None, total: int, reward: float | None, elapsed: str,
                  seconds_left: float | None) -> str | None:
    """`train: step 12/50, loss 0.412, reward 0.37, 0:12:03 elapsed, 0:38:00 left`, short enough for 80
    columns; None while neither a step nor a reward is known."""
    from scripts.pipeline.session import hms

    shown = progress_suffix(progress, total, reward).removeprefix(", ")
    if not shown:
        return None
    left = f"{hms(seconds_left)} left" if seconds_left is not None else ""
    return f"{step}: " + ", ".join(part for part in (shown, elapsed, left) if part)


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
            from scripts.metrics.events import latest_scalars_in_bucket
            from scripts.metrics.tags import REWARD_MEAN

            found = latest_scalars_in_bucket(self.storage(), self.url, (REWARD_MEAN.name,)).get(REWARD_MEAN.name)
        except Exception:  # noqa: BLE001 -- see the class docstring
            return self.value
        if found is not None:
            self.value = found[1]
        return self.value
