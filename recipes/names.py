"""The one rule for a name tpu-rl takes or makes: a recipe's, a run's, a sweep's. Each becomes part of a
Kubernetes object's name or label, a stack's name or a prefix in the bucket, and a run's reaches MaxText on a
command line that omegaconf parses as YAML: lowercase letters, digits and '-', starting with a letter (so never a
number) and ending with a letter or digit, and never a word YAML or MaxText's pyconfig reads as something other
than a string. Only the longest a name may be differs, with what it names."""

from __future__ import annotations

import re
from typing import TypeGuard

from tpu_rl.recipes.errors import UserError

# Words YAML or MaxText's pyconfig read as something other than a string (bools, null, `none` -> None:
# research §2, value-type pitfalls); run_name must reach pydantic as a str.
NOT_A_STRING = frozenset({"yes", "no", "on", "off", "true", "false", "null", "none", "nan", "inf"})
_NAME = re.compile(r"[a-z](?:[a-z0-9-]*[a-z0-9])?\Z")


def is_name(name: object, longest: int) -> TypeGuard[str]:
    return (isinstance(name, str) and 2 <= len(name) <= longest and bool(_NAME.match(name))
            and name not in NOT_A_STRING)


def check_name(name: object, option: str, kind: str, longest: int, names: str) -> str:
    """`name` when it keeps the rule within `longest` characters, else UserError naming `option` and the
    rule; `kind` is what it names (run, sweep, recipe), `names` what it becomes: the reason for the rule."""
    if not is_name(name, longest):
        shown = name[:60] + "…" if isinstance(name, str) and len(name) > 60 else name
        raise UserError(f"{option} '{shown}' is not a {kind} name: use 2-{longest} lowercase letters, digits or '-', "
                        "starting with a letter and ending with a letter or digit, and not a YAML word like true "
                        f"or none ({names})")
    return name
