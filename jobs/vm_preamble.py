"""The VM startup script's two kinds of text: its bash parts, read whole from jobs/vm_script/*.sh (shipped in
the wheel as package data), and the run's values, rendered once at the top as readonly variables that the
parts read by name. Terraform's escaping of `${` and `%{` is the stacks' business (infra/terraform_literals.py).
Every readonly name is also listed in recipes/vm_script.py, so that no recipe's environment variable takes it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from tpu_rl.recipes.outcome import ScriptSeconds

SCRIPT_FOLDER = "vm_script"
# A bash variable name, as the parts read it: upper case, so shellcheck takes it for one set elsewhere.
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_WORD = re.compile(r"^[\w.-]+$")
# Words bash (and shellcheck) would read as its own in `NAME=word`: quoted, though bash takes them as values.
_RESERVED = {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done",
             "in", "function", "time", "coproc"}


@dataclass(frozen=True)
class Knob:
    """A value a test may replace through the environment (the guest agent sets none): `${ENV:-default}`."""
    env: str
    default: int

    @classmethod
    def of(cls, seconds: ScriptSeconds) -> Knob:
        """A retry rule's seconds (recipes/outcome.py VM_SCRIPT_RETRIES)."""
        return cls(seconds.env, seconds.seconds)


Value = str | int | Knob | tuple[str, ...] | Mapping[str, str | Knob]


def _scalar(value: str | int | Knob, always: bool = False) -> str:
    """`value` quoted for bash: only where needed (a `readonly RUN=name` line is read back as written), or
    always (inside an array, where shellcheck reads an unquoted comma as a separator)."""
    if isinstance(value, Knob):
        if not (_NAME.match(value.env) and isinstance(value.default, int)):
            raise ValueError(f"not a knob: {value}")
        return f'"${{{value.env}:-{value.default}}}"'
    quoted = shlex.quote(str(value))
    return f"'{quoted}'" if quoted == str(value) and (always or quoted in _RESERVED) else quoted


def _line(name: str, value: Value) -> str:
    if not _NAME.match(name):
        raise ValueError(f"not a name the script's parts read: {name!r}")
    if isinstance(value, tuple):
        return f"declare -ra {name}=({' '.join(_scalar(item, always=True) for item in value)})"
    if isinstance(value, Mapping):
        if not all(_WORD.match(key) for key in value):
            raise ValueError(f"{name}: keys must be plain words: {sorted(value)}")
        items = " ".join(f"[{key}]={_scalar(item, always=True)}" for key, item in value.items())
        return f"declare -rA {name}=({items})"
    return f"readonly {name}={_scalar(value)}"


def preamble(values: Mapping[str, Value]) -> str:
    """One line a value, in the order given: `readonly NAME=value`, or `declare -ra`/`-rA` for an array (the
    form shellcheck reads as one)."""
    return "\n".join(_line(name, value) for name, value in values.items())


def part(name: str) -> str:
    """The text of jobs/vm_script/<name>.sh, whole, without its trailing newline."""
    return resources.files("tpu_rl.jobs").joinpath(SCRIPT_FOLDER, f"{name}.sh").read_text().rstrip("\n")
