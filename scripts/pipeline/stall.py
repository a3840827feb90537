"""The stall bound of `tpu-rl run`, one rule for a TPU VM (vm/watch.py) and GKE (gke/output.py): a running step
whose output has not changed for STALL_SECONDS looks stalled; for train the bound grows to STALL_STEP_TIMES
times the longest time a training step took, once two steps were seen. Judged by this machine's monotonic
clock, never by comparing it with the VM's or the kubelet's. Each runner says what its output is (the
output's key) and when the count stops (a VM not RUNNING; a JobSet not running with all its pods Ready).

`run` only reports a stall and leaves the step running: the judgement is a guess from silence (a long
compile, a quiet evaluation or a slow save can look the same), the step may still recover, and `run` can
reattach to it; so the line says how to look (`tpu-rl logs`) and how to stop it (`tpu-rl cancel`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tpu_rl.recipes import Step
from tpu_rl.scripts.pipeline.session import Session, hms

clock = time.monotonic  # the GKE wait reads it here, tests replace it (the VM's watch reads vm/watch.py clock)

STALL_SECONDS = 1800
STALL_STEP_TIMES = 10
# The bound of a step's known-silent phases, given by the caller (GKE): train until its first step (orbax
# restores and compiles without a line, maxtext 0.2.4 train_rl.py _rl_train_impl), convert and export
# throughout (tqdm with "\r" only). An estimate for a 30B/26B model that errs long
# (docs/provenance.md#known-silent-phases-of-a-step).
QUIET_STALL_SECONDS = 5400


@dataclass(frozen=True)
class Stall:
    still: float  # seconds the output has not changed
    bound: float


class OutputWatch:
    """Since when a running step's output last changed, and how long its training steps took."""

    def __init__(self, now: float) -> None:
        self.output: tuple[object, float] = (None, now)
        self.step_times: list[float] = []
        self.last_train: tuple[int, float] | None = None

    def pause(self, now: float) -> None:
        """The step is not counted now (its VM stopped, its pods are not all Ready): start again."""
        self.output, self.last_train = (None, now), None

    def observe(self, key: object, train_step: int | None, train: bool, now: float,
                quiet: float = STALL_SECONDS) -> Stall | None:
        """The output now (`key`, which holds `train_step`); a Stall once it has not changed for the bound:
        `quiet` until a training step is seen (since the last pause), then STALL_SECONDS."""
        if train_step is not None and (self.last_train is None or self.last_train[0] != train_step):
            if self.last_train is not None:
                self.step_times.append((now - self.last_train[1]) / max(1, abs(train_step - self.last_train[0])))
            self.last_train = (train_step, now)
        if key != self.output[0]:
            self.output = (key, now)
            return None
        bound = quiet if self.last_train is None else STALL_SECONDS
        if train and self.step_times:
            bound = max(bound, STALL_STEP_TIMES * max(self.step_times))
        still = now - self.output[1]
        return Stall(still, bound) if still >= bound else None


def look_and_stop(session: Session, step: Step) -> str:
    return f"look with {session.logs_hint(step)}, and stop it with {session.command('cancel')}"


def stall_line(step: str, where: str, seen: str, stall: Stall, then: str) -> str:
    """The one line a stall ends `run` with: the step, where it runs, what was seen, for how long, the
    bound, and what next (look_and_stop)."""
    return f"step {step} {where} looks stalled: {seen} for {hms(stall.still)} (the bound: {hms(stall.bound)}); {then}"
