"""Held-out accuracy: the evaluation lines MaxText's RL trainer logs before, during and after training, read
from the head's log (or Cloud Logging, or the VM's console), kept in the run record and summed up.

The lines, identical in MaxText 0.2.3 and 0.2.4 (read in the wheels, maxtext/trainers/post_train/rl/):
- train_rl.py _rl_train_impl, before training and after it (the call lines absl's prefix shows, per
  release: tests/contracts/tunix_log.py EVAL_CALL_LINE):
    max_logging.warning(f"Pre RL Training: {corr=}, {total=}, {accuracy=}%, {partial_accuracy=}%,"
                        f" {format_accuracy=}%, {mean_reward=:.4f}")            (and "Post RL Training: ")
- hooks.py RLTrainingHooks.on_train_step_end (both), every `eval_interval` outer steps:
    f"Intermediate Eval (step={outer_step}): {corr=}, {total=}, {accuracy=}%, ..." (the same fields)
- All three run only when num_test_batches > 0 (train_rl.py; utils_rl.install_training_hooks also needs
  eval_interval > 0). The figures come from evaluate_rl.evaluate: corr is an int (a float in eval_mode
  pass_at_1), total the number of questions scored, the accuracies `corr / total * 100` (0 when total is 0)
  printed by repr, mean_reward with 4 decimals.
- max_logging.warning is absl's logging.warning(stacklevel=2) (maxtext/utils/max_logging.py, both), and
  train_rl runs under absl.app.run, so each line carries absl's prefix,
  `W1201 09:04:39.123456 140234 train_rl.py:785] ` (tests/contracts/tunix_log.py has the format).
- After a resume the trainer evaluates the restored checkpoint again as "Pre RL Training" (train_rl.py
  0.2.4 _rl_train_impl, the comment on update_params): only a Pre of an attempt that restored nothing is
  "before training". The attempt that resumed says so first: tunix's checkpoint manager logs
  `logging.info('Restored params from step: %d in %.3f seconds', step, ...)` (absl) when it restores the
  actor: google/tunix tunix/sft/checkpoint_manager.py maybe_restore, at the commits the wheels pin
  (dependencies/extra_deps/post_train_github_deps.txt; the generated requirements say only >=0.1.3 /
  >=0.1.7) 683256db (0.2.3) and c4ec573d (0.2.4), called from PeftTrainer.__init__
  (tunix/sft/peft_trainer.py); it returns (0, {}) and logs nothing when there is no checkpoint.
  A Pre after that line is at the restored step.
- So a Pre is "before training" (step 0) only when its attempt is known to have restored nothing: the
  first Pre of a text that holds the attempt's start (no train step before it) and, for a log tail that may
  have lost the restore line, a bucket with no finished checkpoint. Otherwise it is recorded at step None,
  "at resume, step unknown" (Evaluation.when, kept in run.json beside the step), never as step 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Literal, Mapping

Phase = Literal["pre", "intermediate", "post", "checkpoint"]  # checkpoint: `tpu-rl eval` of a saved step

_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# absl's prefix: severity, MMDD, time with microseconds, thread id, file:line] (absl/logging get_absl_log_prefix);
# severity W: every evaluation line is max_logging.warning (maxtext 0.2.4 train_rl.py _rl_train_impl, hooks.py
# RLTrainingHooks.on_train_step_end)
_ABSL_PREFIX = r"(?:W\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [^ \]]+:\d+\] )?"
EVALUATION_LINE = re.compile(
    _ABSL_PREFIX.replace("(?:", "(?P<prefix>", 1)
    + r"(?P<phase>Pre RL Training|Post RL Training|Intermediate Eval \(step=(?P<step>\d+)\)): "
    rf"corr=(?P<corr>{_NUMBER}), total=(?P<total>\d+), accuracy=(?P<accuracy>{_NUMBER})%, "
    rf"partial_accuracy=(?P<partial>{_NUMBER})%, format_accuracy=(?P<format>{_NUMBER})%, "
    rf"mean_reward=(?P<reward>{_NUMBER}|nan|-?inf)")
# tunix's step line (scripts/rundata/progress.py has its source): the step a Post evaluation follows.
TRAIN_STEP = re.compile(r"\bTrain step (\d+) training loss: ")
RESTORED_TEXT = "Restored params from step: "  # tunix's restore line (see above)
_RESTORED = re.compile(re.escape(RESTORED_TEXT) + r"(\d+) in ")
_PHASES: dict[str, Phase] = {"Pre RL Training": "pre", "Post RL Training": "post"}
# rl.yml (0.2.3 and 0.2.4): eval_dataset_name 'openai/gsm8k', eval_split 'test'.
DEFAULT_EVAL_DATASET = "openai/gsm8k"
DEFAULT_EVAL_SPLIT = "test"


@dataclass(frozen=True)
class Evaluation:
    phase: Phase
    step: int | None  # the train step it evaluated: 0 before training, the hook's step, the last step after
    corr: float
    total: int
    accuracy: float  # percent
    partial_accuracy: float
    format_accuracy: float
    mean_reward: float | None  # None when logged as nan
    line: str  # the logged text from absl's prefix on: what tells two evaluations apart

    @property
    def when(self) -> str:
        """What is known of the step it evaluated, in words (run.json's "when", `run`, `tpu-rl runs`)."""
        if self.phase == "pre":
            return ("before training" if self.step == 0 else "at resume, step unknown" if self.step is None
                    else f"at resume from step {self.step}")
        if self.phase == "post":
            return "after training"
        return f"at checkpoint {self.step}" if self.phase == "checkpoint" else f"at step {self.step}"

    def as_record(self) -> dict:
        return {**asdict(self), "when": self.when}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Evaluation:
        """An entry of run.json's "evaluations" (JSON), as as_record wrote it: every field, each since the first
        record; a missing one fails here rather than stand in as None for a number."""
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


def _number(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def parse_evaluations(text: str, last_step: int | None = None) -> list[Evaluation]:
    """Every evaluation line in `text`, in order. A Pre that follows tunix's restore line (since the
    evaluation before it) is at the restored step; else it is at step 0 when it is the first in the text (a
    later one evaluates a resumed checkpoint: step unknown). A Post is at the last train step logged before
    it, or `last_step` when the text holds none."""
    found, step_seen, pres, previous = [], None, 0, 0
    steps = [(match.start(), int(match[1])) for match in TRAIN_STEP.finditer(text)]
    restores = [(match.start(), int(match[1])) for match in _RESTORED.finditer(text)]
    for match in EVALUATION_LINE.finditer(text):
        before = [step for at, step in steps if at < match.start()]
        step_seen = before[-1] if before else None
        phase = _PHASES.get(match["phase"], "intermediate")
        if phase == "pre":
            restored = [step for at, step in restores if previous <= at < match.start() and step > 0]
            step = restored[-1] if restored else 0 if pres == 0 and step_seen is None else None
            pres += 1
        elif phase == "post":
            step = step_seen if step_seen is not None else last_step
        else:
            step = int(match["step"])
        found.append(Evaluation(phase, step, float(match["corr"]), int(match["total"]), float(match["accuracy"]),
                                float(match["partial"]), float(match["format"]), _number(match["reward"]),
                                match[0]))
        previous = match.end()
    return found


def merged(old: Iterable[dict], new: Iterable[Evaluation]) -> list[dict]:
    """The record's evaluations with `new` added: one entry per logged line (the prefix's microseconds
    and thread tell repeats apart), in the order first seen. A Pre at step 0 when the record has one
    already is a resumed attempt's evaluation of its checkpoint, at a step the line does not say."""
    entries = list(old)
    seen = {entry.get("line") for entry in entries}
    for evaluation in new:
        if evaluation.line in seen:
            continue
        if evaluation.phase == "pre" and evaluation.step == 0 and any(
                entry.get("phase") == "pre" and entry.get("step") == 0 for entry in entries):
            evaluation = replace(evaluation, step=None)  # a resumed attempt's: not the run's step 0
        seen.add(evaluation.line)
        entries.append(evaluation.as_record())
    return entries


@dataclass(frozen=True)
class AccuracyChange:
    before: Evaluation | None
    after: Evaluation | None  # the last Post, else the last intermediate evaluation

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after.accuracy - self.before.accuracy

    def short(self) -> str:
        """`41.2→58.7` for a table cell; "-" without either."""
        if self.before is None and self.after is None:
            return "-"
        return "→".join("-" if e is None else f"{e.accuracy:.1f}" for e in (self.before, self.after))


def accuracy_change(entries: Iterable[dict]) -> AccuracyChange:
    evaluations = [Evaluation.from_record(entry) for entry in entries]
    pres = [e for e in evaluations if e.phase == "pre" and e.step == 0]  # a resumed attempt's Pre is not before
    posts = [e for e in evaluations if e.phase == "post"] or [e for e in evaluations if e.phase == "intermediate"]
    return AccuracyChange(pres[0] if pres else None, posts[-1] if posts else None)


def after_training(entries: Iterable[dict]) -> Evaluation | None:
    """The last evaluation after training (Post), never an intermediate one: what runs are ranked by."""
    posts = [e for e in map(Evaluation.from_record, entries) if e.phase == "post"]
    return posts[-1] if posts else None


def resumed_first(entries: Iterable[dict]) -> Evaluation | None:
    """The first Pre when none is known to be before training: a resumed attempt's of an unknown step
    (`tpu-rl runs` marks it with RESUMED_NOTE's "step unknown" rather than show it as the accuracy before
    training; a Pre at a known resume step is not it)."""
    evaluations = [Evaluation.from_record(entry) for entry in entries]
    if any(e.phase == "pre" and e.step == 0 for e in evaluations):
        return None
    return next((e for e in evaluations if e.phase == "pre" and e.step is None), None)


def eval_set_name(overrides: Iterable[str]) -> str:
    """`gsm8k test`: the held-out set as the run's overrides name it (rl.yml's defaults otherwise)."""
    values = {key: value for key, _, value in (item.partition("=") for item in overrides)}
    dataset = values.get("eval_dataset_name", DEFAULT_EVAL_DATASET).strip("'\"").rstrip("/").rpartition("/")[2]
    return f"{dataset} {values.get('eval_split', DEFAULT_EVAL_SPLIT).strip(chr(39) + chr(34))}"


def summary_line(entries: Iterable[dict], overrides: Iterable[str]) -> str | None:
    """"accuracy 41.2% → 58.7% (+17.5) on 256 gsm8k test questions"; None when nothing was evaluated."""
    change = accuracy_change(entries)
    before, after = change.before, change.after
    if before is not None and after is not None:
        return (f"accuracy {before.accuracy:.1f}% → {after.accuracy:.1f}% ({change.delta:+.1f}) "
                f"on {after.total} {eval_set_name(overrides)} questions")
    only = before or after
    if only is None:
        return None
    when = "before training" if only is before else "after training"
    return f"accuracy {only.accuracy:.1f}% {when} on {only.total} {eval_set_name(overrides)} questions"


def describe(evaluation: Evaluation) -> str:
    """One line as `run` prints an evaluation when it arrives (within 80 columns with its `train: `)."""
    # `at resume` for "at resume, step unknown": the line must fit 80 columns; run.json has the words
    when = "at resume" if evaluation.phase == "pre" and evaluation.step is None else evaluation.when
    reward = "" if evaluation.mean_reward is None else f", reward {evaluation.mean_reward:.3g}"
    return (f"accuracy {evaluation.accuracy:.1f}% ({evaluation.corr:g}/{evaluation.total}) {when}, "
            f"format {evaluation.format_accuracy:.1f}%{reward}")


def accuracy_points(entries: Iterable[dict], last_step: int | None = None) -> tuple[list[int], list[float]]:
    """(steps, accuracies) for the picture: one point per step, the latest evaluation of a step winning
    (a resumed run evaluates some steps twice); evaluations of an unknown step are left out."""
    by_step: dict[int, float] = {}
    for entry in entries:
        evaluation = Evaluation.from_record(entry)
        step = evaluation.step if evaluation.step is not None or evaluation.phase != "post" else last_step
        if step is not None:
            by_step[step] = evaluation.accuracy
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]
