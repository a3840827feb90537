"""`--set` values MaxText's types take but no run means: refused by `run` and `render` in one line naming
the field, unless `--unusual-values` says the value is deliberate.

MaxText validates a key's type and its declared bounds (recipes/runs/maxtext_values.py checks both). What its
types let through:
- a YAML boolean for a number: pydantic's lax mode takes `true` as 1 and 1.0 (learning_rate=true);
- a negative number for a key whose release default is 0 or more (a size, a count, a length, a rate), as
  most such keys declare no bound (per_device_batch_size=-4, max_target_length=-5);
- a magnitude far from the release's default: more than FAR_FACTOR times it (learning_rate=1e3 against
  3e-6), or above FAR_ABSOLUTE for a key whose default is 0 or null.
"""

from __future__ import annotations

from typing import Any

from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.runs.maxtext_values import parse_override, release_schema, release_values

FAR_FACTOR = 1e5
FAR_ABSOLUTE = 1e7
UNUSUAL_FLAG = "--unusual-values"
# -1 is MaxText's own "decide it for me" for these (MaxText 0.2.4 configs/types.py: each field's default is
# -1, rollout_tensor_parallelism "auto-determined", and the config check "must be -1 or > 0").
AUTO_MINUS_ONE = frozenset({"rollout_tensor_parallelism", "rollout_data_parallelism"})


def unusual(version: str, key: str, value: Any) -> str | None:
    """Why `value` (as YAML read it, before pydantic's coercion) is no value a run uses for `key`, or None."""
    spec = release_schema(version)["keys"].get(key)
    words = set(spec["type"].split(" | ")) if spec else set()
    if not words & {"int", "float"}:
        return None
    if isinstance(value, bool):
        if "bool" in words:
            return None
        return (f"{key} takes a number, and YAML reads {str(value).lower()} as a boolean (MaxText would take it "
                f"as {int(value)})")
    if not isinstance(value, (int, float)):
        return None
    if value == -1 and key.rpartition(".")[2] in AUTO_MINUS_ONE:
        return None
    default = release_values(version).get(key)
    # The own value a far one is measured against: a number, not a flag, and not 0.
    usual = default if isinstance(default, (int, float)) and not isinstance(default, bool) and default != 0 else None
    if value < 0 and (default is None or (isinstance(default, (int, float)) and default >= 0)):
        return f"{key} is negative, and MaxText {version}'s own value is {default if default is not None else 'null'}"
    if usual is not None and abs(value) > FAR_FACTOR * abs(usual):
        return f"{key} is more than {FAR_FACTOR:g} times MaxText {version}'s own value ({default})"
    if usual is None and abs(value) > FAR_ABSOLUTE:
        return f"{key} is above {FAR_ABSOLUTE:g}"
    return None


def check_usual(version: str, item: str, value: Any) -> None:
    """Refuse an unusual --set item in one line (UserError)."""
    why = unusual(version, item.partition("=")[0], value)
    if why:
        raise UserError(f"--set {item}: {why}; no run means that: give the value you mean, or pass {UNUSUAL_FLAG} "
                        "to submit it as it is")


def has_unusual(version: str, sets: tuple[str, ...]) -> bool:
    """Whether a run's --set items hold a value only --unusual-values lets through (its hints repeat the flag)."""
    return any(unusual(version, item.partition("=")[0], parse_override(*item.split("=", 1))) for item in sets)
