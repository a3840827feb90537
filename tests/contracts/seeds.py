"""Read the seeds' (the tutorials') commands: the MaxText arguments, env flags and source patches.

The seeds are shell snippets inside prose. A command starts at `python3 -m <module>` and runs over
backslash-continued lines. The GKE seeds wrap it in `--command "..."`, so one level of \\" and \\$
escaping is undone and the closing quote dropped. Variables come from the seed's own `export` lines,
with the user-specific ones (bucket, ...) replaced by our settings.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from tpu_rl.recipes import Recipe, Settings

# ../shared/seeds beside the checkout; TPU_RL_SEEDS names it for a checkout elsewhere (a git worktree)
SEEDS = Path(os.environ.get("TPU_RL_SEEDS") or Path(__file__).resolve().parents[3] / "shared" / "seeds")
_VARIABLE = re.compile(r"\$\{(\w+)\??\}|\$(\w+)")
_ARITHMETIC = re.compile(r"\$\(\(\s*(\d+)\s*-\s*(\w+)\s*\)\)")


def seed_number(recipe: Recipe) -> str:
    found = re.search(r"seed (\d{3})", recipe.description)
    if not found:
        raise LookupError(f"recipe '{recipe.name}' does not name its seed in its description")
    return found.group(1)


def seed_text(recipe: Recipe) -> str | None:
    matches = sorted(SEEDS.glob(f"{seed_number(recipe)}_*.txt"))
    return matches[0].read_text() if matches else None


def _unquote(value: str) -> str:
    try:
        words = shlex.split(value, comments=True)
    except ValueError:
        return value
    return words[0] if words else ""


def seed_variables(text: str, settings: Settings) -> dict[str, str]:
    variables: dict[str, str] = {}
    for match in re.finditer(r"^\s*(?:export\s+)?(\w+)=(.*)$", text, re.MULTILINE):
        name, raw = match.groups()
        if name.isupper() and not raw.startswith("$("):
            variables[name] = _unquote(raw)
    variables["RUN_NAME"] = "<clock>"  # seed 002: RUN_NAME=$(date ...)
    variables.update(GCS_BUCKET=settings.gcs_bucket, PROJECT=settings.project, REGION=settings.region)
    return variables


def expand(text: str, variables: dict[str, str]) -> str:
    text = _ARITHMETIC.sub(lambda m: str(int(m.group(1)) - int(expand(f"${m.group(2)}", variables))), text)
    for _ in range(5):  # variables refer to variables (MODEL_CHECKPOINT_DIRECTORY=/dev/shm/$MODEL_NAME/...)
        text = _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)
    return text


def _unescaped_quotes(raw: str) -> list[int]:
    return [i for i, char in enumerate(raw) if char == '"' and (i == 0 or raw[i - 1] != "\\")]


def seed_command(text: str, module: str, variables: dict[str, str]) -> list[str]:
    """The arguments after `python3 -m <module>` in the seed."""
    start = text.index(f"python3 -m {module}")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    raw = " ".join(lines)
    quotes = _unescaped_quotes(raw)
    if len(quotes) % 2:  # the closing quote of --command "..."
        raw = raw[: quotes[-1]] + raw[quotes[-1] + 1:]
    if '\\"' in raw or "\\$" in raw:
        raw = raw.replace('\\"', '"').replace("\\$", "$")
    return shlex.split(expand(raw, variables))[3:]


def as_mapping(arguments: list[str] | tuple[str, ...]) -> dict[str, str]:
    """key=value and --flag[=value] arguments by key (flags keep their dashes)."""
    mapping = {}
    for argument in arguments:
        key, _, value = argument.partition("=")
        mapping[key] = value
    return mapping


def seed_env_flags(text: str, flag: str) -> dict[str, str]:
    """Values of a repeated gcluster flag such as --env="K=V" or --pathways-worker-env="K=V"."""
    pairs = re.findall(rf'{re.escape(flag)}="?(\w+)=([^"\s]*)"?', text)
    return dict(pairs)


def seed_replacements(text: str) -> list[tuple[str, str]]:
    """The (old, new) pairs of the seed's python3 -c source patches: .replace('a', 'b') and re.sub('a', 'b', ...)."""
    pairs = re.findall(r"\.replace\('([^']*)', '([^']*)'\)", text)
    pairs += re.findall(r"re\.sub\('([^']*)', '([^']*)'", text)
    return pairs
