"""Sweeps: several runs of one recipe from one command (`tpu-rl sweep`), as data.

A sweep is a list of runs, each a tuple of --set items: the product of its `--grid KEY=V1,V2` options, or
the `[[runs]]` tables of a TOML file (each with its own `set` items and an optional `name`). Each run gets
its own name, derived readably from its values (`lr1e-6-gb0p04-3f2a`: each key's initials and its value,
then 4 hex of the run's identity, so the same values under other settings never reuse a run), within the
run-name rule of recipes/runs/identity.py. They share one conversion (recipes/runs/identity.py conversion_key): convert
depends on the model only, which no --set may change.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.names import check_name
from tpu_rl.recipes.runs.identity import MAX_RUN_NAME, check_run_name, digest
from tpu_rl.recipes.runs.spec import RunSpec, run_identity, run_name
from tpu_rl.recipes.user_text import read_text_file

NAME_HASH_CHARS = 4  # of the run's identity, after its values
SWEEP_NAME_HASH_CHARS = 7
# Run names are 2-MAX_RUN_NAME of [a-z0-9-] (recipes/runs/identity.py): anything else in a value becomes one of these.
_SPELLED = {".": "p", "_": "-", "+": ""}


@dataclass(frozen=True)
class SweepRun:
    sets: tuple[str, ...]  # the run's --set items, as given
    name: str | None = None  # as the file names it; None: derived (run_names)


# The most runs a sweep takes unless --max-runs says more: Kueue trains them one after another on one
# slice, so 100 runs of qwen3-v6e32's 170 minutes hold it about 12 days; a grid of three axes of four or
# five values stays under it, a mistyped one (10,000 runs) does not.
SWEEP_MAX_RUNS = 100
# A sweep's name is in each of its runs' run.json, which `runs` and `metrics --sweep` group them by: the rule of
# every name (recipes/names.py), as long as a Kubernetes label value (63), so that it could label its runs too;
# the default (sweep_name) is at most 34.
MAX_SWEEP_NAME = 63


def check_sweep_name(name: str, option: str = "--name") -> str:
    return check_name(name, option, "sweep", MAX_SWEEP_NAME, "each run's run.json records it, and `tpu-rl runs` "
                      "and `metrics --sweep` find the sweep's runs by it")


def check_size(runs: int, max_runs: int, source: str) -> None:
    """Refuse a sweep of more than `max_runs` runs (and a --max-runs below 1), before any run is checked."""
    if max_runs < 1:
        raise UserError(f"--max-runs {max_runs}: give the most runs the sweep may have, 1 or more")
    if runs > max_runs:
        raise UserError(f"{source} makes {runs:,} runs, over the sweep's bound of {max_runs}: drop values, or "
                        f"pass --max-runs {runs} to start that many; nothing was started")


def parse_grid(items: list[str]) -> list[SweepRun]:
    """`--grid learning_rate=1e-6,3e-6 --grid rl.grpo_beta=0.04,0.08` -> the runs of their product, the
    first axis varying slowest."""
    axes: list[list[str]] = []
    keys: list[str] = []
    for item in items:
        key, equals, text = item.partition("=")
        values = [value.strip() for value in text.split(",")]
        if not equals or not key.strip() or not all(values):
            raise UserError(f"--grid '{item[:60]}' is not KEY=V1,V2,...: pass a MaxText key and its values, e.g. "
                            "--grid learning_rate=1e-6,3e-6")
        if key in keys:
            raise UserError(f"--grid {key} is given twice: list all of its values in one --grid {key}=V1,V2,...")
        if len(set(values)) != len(values):
            raise UserError(f"--grid {key} lists a value twice ({text}): list each value once")
        keys.append(key.strip())
        axes.append([f"{key.strip()}={value}" for value in values])
    return [SweepRun(tuple(combination)) for combination in itertools.product(*axes)]


def read_sweep_file(path: str) -> tuple[str | None, list[SweepRun]]:
    """A sweep file: an optional top-level `name`, and `[[runs]]` tables, each with `set = ["KEY=VALUE",
    ...]` and an optional `name`. Returns the sweep's name (None when the file has none) and its runs."""
    option = f"--file {path}"
    text = read_text_file(Path(path), "--file", "pass a sweep file: TOML with [[runs]] tables (docs/experiments.md)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{option} is not TOML ({error}): see docs/experiments.md for a sweep file") from None
    unknown = sorted(set(data) - {"name", "runs"})
    runs = data.get("runs")
    if unknown or not isinstance(runs, list) or not runs:
        what = f"has unknown key(s) {', '.join(unknown)}" if unknown else "lists no [[runs]]"
        raise UserError(f"{option} {what}: write an optional name and one [[runs]] table per run, each with "
                        "set = [\"KEY=VALUE\", ...] and an optional name")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise UserError(f"{option}: name must be a string, e.g. name = \"lr-sweep\"")
    if name is not None:
        check_sweep_name(name, f"{option}: name")
    found = []
    for number, run in enumerate(runs, 1):
        where = f"{option}, run {number}"
        if not isinstance(run, dict) or set(run) - {"set", "name"}:
            raise UserError(f"{where}: a run has only `set` (a list of \"KEY=VALUE\") and an optional `name`")
        sets, run_name = run.get("set", []), run.get("name")
        if not isinstance(sets, list) or not all(isinstance(item, str) for item in sets):
            raise UserError(f"{where}: set must be a list of \"KEY=VALUE\" strings, e.g. "
                            "set = [\"learning_rate=1e-6\"]")
        if run_name is not None:
            if not isinstance(run_name, str):
                raise UserError(f"{where}: name must be a string")
            check_run_name(run_name, f"{where}: name")
        found.append(SweepRun(tuple(sets), run_name))
    return name, found


def _abbreviation(key: str) -> str:
    """learning_rate -> lr, rl.grpo_beta -> gb, temperature -> temp: the initials of the last part's words,
    or its first four letters when it is one word."""
    words = [word for word in key.rpartition(".")[2].lower().split("_") if word]
    return "".join(word[0] for word in words) if len(words) > 1 else (words[0][:4] if words else "k")


def canonical(value: str) -> str:
    """A number as its value, not its spelling (`0.000002` and `2e-6` are both `2e-6`; `1.50` is `1.5`),
    with its sign; anything else as given."""
    try:
        number = float(value)
    except ValueError:
        return value
    if not number == number or number in (float("inf"), float("-inf")):
        return value
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], f"{number:g}")


def _spelled(value: str) -> str:
    """The value within a run name: its canonical form, `.` spelled `p`, its sign kept (`-1`)."""
    text = "".join(_SPELLED.get(char, char) for char in canonical(value.strip()).lower())
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "", text)).rstrip("-")


def derived_name(sets: tuple[str, ...], identity: dict, taken: frozenset[str] | set[str] = frozenset()) -> str:
    """A run's name from its --set items: each key's abbreviation and value, then NAME_HASH_CHARS hex of
    its identity (more when that name is `taken` by another run of the sweep, whose values were cut the
    same); the values are cut to fit MAX_RUN_NAME."""
    values = "-".join(_abbreviation(item.partition("=")[0]) + _spelled(item.partition("=")[2]) for item in sets)
    for chars in range(NAME_HASH_CHARS, 2 * NAME_HASH_CHARS):
        name = _with_tail(values, digest(identity)[:chars])
        if name not in taken:
            return name
    return name


def _with_tail(values: str, tail: str) -> str:
    room = MAX_RUN_NAME - len(tail) - 1
    head = re.sub(r"-+", "-", values[:room]).strip("-") or "run"
    if not head[0].isalpha():
        head = ("r" + head)[:room].rstrip("-")
    return check_run_name(f"{head}-{tail}", "a sweep's derived run name")


def sweep_name(recipe_name: str, names: list[str]) -> str:
    """The sweep's default name: the recipe's and SWEEP_NAME_HASH_CHARS hex of its runs' names."""
    return f"{recipe_name}-sweep-{digest(sorted(names))[:SWEEP_NAME_HASH_CHARS]}"


def check_distinct(specs: list[RunSpec], source: str) -> None:
    """Refuse two runs that would train the same weights, or share a name; `source` names where the runs
    came from (--grid, --file PATH)."""
    seen: dict[str, int] = {}
    names: dict[str, int] = {}
    for number, spec in enumerate(specs, 1):
        key = digest(run_identity(spec))
        if key in seen:
            raise UserError(f"{source}: runs {seen[key]} and {number} of the sweep train the same weights (their "
                            f"--set items {', '.join(spec.sets) or 'none'} give the same settings): drop one of them")
        seen[key] = number
        name = run_name(spec)
        if name in names:
            raise UserError(f"{source}: runs {names[name]} and {number} of the sweep are both named "
                            f"'{name}': give each run its own name")
        names[name] = number


def check_sweepable(recipe) -> None:
    """A sweep queues its runs' train steps in Kueue; a platform without a queue refuses it (its fact
    `refused`) before anything is read."""
    if "sweep" in recipe.platform_facts.refused:
        raise UserError(f"tpu-rl sweep is refused for {recipe.name}: its one TPU VM runs one startup script, so "
                        "runs cannot queue for it; run them one after another with `tpu-rl run --set ...`, or "
                        "sweep a GKE recipe (tpu-rl recipes lists them)")
