"""The tuning settings: how `tpu-rl` polls, backs off and bounds a request or the first contact with an
endpoint, how long it waits for a TPU VM back from maintenance or on a check of the user's file. Declared here like the settings of
specs.py (each its environment variable, default and help), checked once where they are read, and shown
by docs/settings.md as `tuning_table` writes it (tests/test_settings_tuning.py).

Unlike those they say nothing of where things are, so they have no config-file key and no command needs one:
each is read from the environment, and unset means its default. The retry policy's defaults are
recipes/outcome.py's, the one home of what is tried again.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping

from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.outcome import RetryPolicy


@dataclass(frozen=True)
class TuningSpec:
    env: str
    default: float  # seconds
    help: str
    zero_allowed: bool  # 0 means something (no pause between polls or retries, no grace); else more than 0

    def seconds(self, env: Mapping[str, str] | None = None) -> float:
        """The value set in the environment (unset or empty: the default), checked: a finite number of seconds,
        not negative, and above 0 unless 0 means something."""
        raw = (os.environ if env is None else env).get(self.env)
        if not raw:
            return self.default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and (value > 0 or (self.zero_allowed and value == 0)):
            return value
        bound = "0 or more" if self.zero_allowed else "more than 0"
        raise UserError(f"{self.env}='{raw}' is not a number of seconds {bound}: set e.g. {self.env}="
                        f"{self.default:g} or unset it (default {self.default:g})")


POLL = TuningSpec("TPU_RL_POLL_SECONDS", 15.0, "how often `run` looks while it waits", zero_allowed=True)
RETRY_BASE = TuningSpec("TPU_RL_RETRY_BASE_SECONDS", RetryPolicy.base_delay,
                        "the first pause before an API request is tried again; each next one doubles",
                        zero_allowed=True)
REQUEST_TIMEOUT = TuningSpec("TPU_RL_REQUEST_TIMEOUT_SECONDS", RetryPolicy.request_timeout,
                             "how long one Kubernetes API request may take", zero_allowed=False)
REACH = TuningSpec("TPU_RL_REACH_SECONDS", RetryPolicy.reach_seconds,
                   "how long the first contact with the bucket or the cluster, or one Compute, TPU or Secret "
                   "Manager call, may take in all, retries included", zero_allowed=False)
# docs/settings.md and docs/pipeline.md state this default (tests/test_docs_links.py holds them to it).
MAINTENANCE_GRACE = TuningSpec("TPU_RL_MAINTENANCE_GRACE_SECONDS", 3600.0,
                               "how long `run` waits for a stopped TPU VM to come back from maintenance",
                               zero_allowed=True)
CHECK = TuningSpec("TPU_RL_CHECK_SECONDS", 60.0,
                   "how long `check-rewards` (and `run --rewards`/`--data-processor`) may wait on a clean Python "
                   "importing and calling your file; it says what it waits for after 2 s", zero_allowed=False)
TUNING: tuple[TuningSpec, ...] = (POLL, RETRY_BASE, REQUEST_TIMEOUT, REACH, MAINTENANCE_GRACE, CHECK)


def retry_policy(env: Mapping[str, str] | None = None) -> RetryPolicy:
    """The retry policy with the environment's tuning."""
    return RetryPolicy(base_delay=RETRY_BASE.seconds(env), request_timeout=REQUEST_TIMEOUT.seconds(env),
                       reach_seconds=REACH.seconds(env))


def tuning_table() -> str:
    """TUNING as the Markdown table of docs/settings.md."""
    lines = ["| variable | what | default |", "| --- | --- | --- |"]
    lines += [f"| `{spec.env}` | {spec.help} ({'0 or more' if spec.zero_allowed else 'more than 0'}) | "
              f"default {spec.default:g} s |" for spec in TUNING]
    return "\n".join(lines) + "\n"
