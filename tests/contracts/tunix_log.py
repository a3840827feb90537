"""Log lines as MaxText's RL trainer writes them, built from the upstream format strings, for fixtures.

Sources (read at the tunix commits the MaxText wheels pin; see notes/runtime-facts.md):
- google/tunix tunix/sft/peft_trainer.py, PeftTrainer._log_metrics, with `logging` = absl.logging:
  c4ec573d (MaxText 0.2.4): the call on line 735; 683256db (MaxText 0.2.3): on line 488.
  logging.info("Train step %d training loss: %f  - training perplexity: %f", step, loss, perplexity)
  and, for evaluation (line 1130 at c4ec573d, 840 at 683256db):
  logging.info("Train step %d eval loss: %f - eval perplexity: %f", ...)
- google/tunix tunix/rl/rl_cluster.py, RLCluster._log_metrics: between two train steps the string metrics
  the reward manager buffers, the batch's prompts and completions (tunix/rl/reward_manager.py
  _prepare_log_metrics, lines 205-206 at both commits), are logged as
  logging.info("Rollout string metric %s: %s", metric_name, agg_value), agg_value a numpy array of str
  (the call on lines 724-728 at c4ec573d, 714-718 at 683256db). numpy prints one element a line once
  they do not fit on one, so each rollout is many log lines without a train step among them.
- abseil/abseil-py absl/logging/__init__.py, get_absl_log_prefix:
  '%c%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s' % (severity, month, day, hour, minute, second,
  microsecond, thread id, file name, line, critical prefix ('' below FATAL))
"""

from __future__ import annotations

import math

TRAIN_STEP_FORMAT = "Train step %d training loss: %f  - training perplexity: %f"
EVAL_STEP_FORMAT = "Train step %d eval loss: %f - eval perplexity: %f"
ABSL_PREFIX_FORMAT = "%c%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s"
# The line numbers of the two logging.info calls in peft_trainer.py, by MaxText release.
TRAIN_STEP_CALL_LINE = {"0.2.4": 735, "0.2.3": 488}
EVAL_STEP_CALL_LINE = {"0.2.4": 1130, "0.2.3": 840}
ROLLOUT_STRING_METRIC_FORMAT = "Rollout string metric %s: %s"
ROLLOUT_METRIC_CALL_LINE = {"0.2.4": 724, "0.2.3": 714}


# google-tunix 0.1.7 (installed by both wheels) tunix/sft/checkpoint_manager.py maybe_restore, the
# logging.info call on line 234, when PeftTrainer.__init__ restores the actor from a saved checkpoint.
RESTORED_FORMAT = "Restored params from step: %d in %.3f seconds"
RESTORED_CALL_LINE = 234


def restored_line(step: int, seconds: float = 12.5) -> str:
    return absl_info(RESTORED_FORMAT % (step, seconds), RESTORED_CALL_LINE, file="checkpoint_manager.py")


def absl_info(message: str, line: int, second: int = 56, file: str = "peft_trainer.py") -> str:
    return ABSL_PREFIX_FORMAT % ("I", 8, 5, 12, 34, second, 789012, 140234, file, line, "") + message


def train_step_line(step: int, loss: float, maxtext: str = "0.2.4") -> str:
    return absl_info(TRAIN_STEP_FORMAT % (step, loss, math.exp(loss)), TRAIN_STEP_CALL_LINE[maxtext], step % 60)


def eval_step_line(step: int, loss: float, maxtext: str = "0.2.4") -> str:
    return absl_info(EVAL_STEP_FORMAT % (step, loss, math.exp(loss)), EVAL_STEP_CALL_LINE[maxtext], step % 60)


def rollout_lines(name: str, values: list[str], maxtext: str = "0.2.4") -> str:
    """RLCluster's log of one string metric ("prompts" or "completions"), as many lines as numpy prints."""
    import numpy as np

    return absl_info(ROLLOUT_STRING_METRIC_FORMAT % (name, np.array(values)), ROLLOUT_METRIC_CALL_LINE[maxtext],
                     file="rl_cluster.py")


# MaxText's evaluation lines (maxtext/trainers/post_train/rl/ in the 0.2.3 and 0.2.4 wheels): train_rl.py
# logs with max_logging.warning (absl logging.warning, stacklevel=2: the caller's file and line)
#   f"Pre RL Training: {corr=}, {total=}, {accuracy=}%, {partial_accuracy=}%," f" {format_accuracy=}%, {mean_reward=:.4f}"
# before training and the same with "Post RL Training: " after it; hooks.py logs
#   f"Intermediate Eval (step={outer_step}): {corr=}, {total=}," f" {accuracy=}%, {partial_accuracy=}%, {format_accuracy=}%," f" {mean_reward=:.4f}"
# The values are evaluate_rl.evaluate's: corr and total ints, the accuracies corr / total * 100.
EVAL_CALL_LINE = {("0.2.4", "pre"): ("train_rl.py", 785), ("0.2.4", "post"): ("train_rl.py", 823),
                  ("0.2.3", "pre"): ("train_rl.py", 716), ("0.2.3", "post"): ("train_rl.py", 754),
                  ("0.2.4", "intermediate"): ("hooks.py", 98), ("0.2.3", "intermediate"): ("hooks.py", 98)}


def evaluation_message(phase: str, corr: int, total: int, partially: int, formatted: int, mean_reward: float,
                       step: int | None = None) -> str:
    accuracy = corr / total * 100 if total > 0 else 0
    partial_accuracy = partially / total * 100 if total > 0 else 0
    format_accuracy = formatted / total * 100 if total > 0 else 0
    fields = (f"{corr=}, {total=}, {accuracy=}%, {partial_accuracy=}%,"
              f" {format_accuracy=}%, {mean_reward=:.4f}")
    lead = {"pre": "Pre RL Training", "post": "Post RL Training"}.get(phase, f"Intermediate Eval (step={step})")
    return f"{lead}: {fields}"


def evaluation_line(phase: str, corr: int, total: int, partially: int, formatted: int, mean_reward: float,
                    step: int | None = None, maxtext: str = "0.2.4", second: int = 30) -> str:
    """One evaluation line as absl writes it (severity W: max_logging.warning)."""
    file, line = EVAL_CALL_LINE[(maxtext, phase)]
    prefix = ABSL_PREFIX_FORMAT % ("W", 8, 5, 12, 40, second, 123456, 140234, file, line, "")
    return prefix + evaluation_message(phase, corr, total, partially, formatted, mean_reward, step)
