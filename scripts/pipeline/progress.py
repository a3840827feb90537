"""How far training is, as `run` and `status` show it: the furthest step of the current attempt, the time
left at its pace, and the line that says so. The step, loss and reward are read by scripts/rundata/progress.py."""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from tpu_rl.scripts.pipeline.session import hms
from tpu_rl.scripts.rundata.progress import RewardReader, TrainProgress, last_train_step


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
    shown = progress_suffix(progress, total, reward).removeprefix(", ")
    if not shown:
        return None
    left = f"{hms(seconds_left)} left" if seconds_left is not None else ""
    return f"{step}: " + ", ".join(part for part in (shown, elapsed, left) if part)
