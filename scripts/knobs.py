"""The environment's knobs of seconds (TPU_RL_POLL_SECONDS, TPU_RL_CHECK_SECONDS, ...; docs/settings.md), each
checked where it is read."""

from __future__ import annotations

import math
import os

from tpu_rl.recipes import UserError


def seconds_env(name: str, default: float, *, zero_allowed: bool) -> float:
    """A number of seconds from the environment, checked where it is read: finite, not negative, and above 0
    unless 0 means something (no pause between polls or retries)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and (value > 0 or (zero_allowed and value == 0)):
        return value
    bound = "0 or more" if zero_allowed else "more than 0"
    raise UserError(f"{name}='{raw}' is not a number of seconds {bound}: set e.g. {name}={default:g} or unset "
                    f"it (default {default:g})")
