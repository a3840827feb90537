"""Log lines as MaxText's RL trainer writes them, built from the upstream format strings, for fixtures.

Sources (read at the tunix commits the MaxText wheels pin; see notes/runtime-facts.md):
- google/tunix tunix/sft/peft_trainer.py, PeftTrainer._log_metrics, with `logging` = absl.logging:
  c4ec573d (MaxText 0.2.4): the call on line 735; 683256db (MaxText 0.2.3): on line 488.
  logging.info("Train step %d training loss: %f  - training perplexity: %f", step, loss, perplexity)
  and, for evaluation (line 1130 at c4ec573d, 840 at 683256db):
  logging.info("Train step %d eval loss: %f - eval perplexity: %f", ...)
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


def absl_info(message: str, line: int, second: int = 56) -> str:
    return ABSL_PREFIX_FORMAT % ("I", 8, 5, 12, 34, second, 789012, 140234, "peft_trainer.py", line, "") + message


def train_step_line(step: int, loss: float, maxtext: str = "0.2.4") -> str:
    return absl_info(TRAIN_STEP_FORMAT % (step, loss, math.exp(loss)), TRAIN_STEP_CALL_LINE[maxtext], step % 60)


def eval_step_line(step: int, loss: float, maxtext: str = "0.2.4") -> str:
    return absl_info(EVAL_STEP_FORMAT % (step, loss, math.exp(loss)), EVAL_STEP_CALL_LINE[maxtext], step % 60)
