"""`tpu-rl plan-review`: what a change does to the cloud and what it costs, without a cloud account.

Two sides are built from the same example settings: REF (default: the merge base with main) and the
working tree. Each side lives in a temporary `git worktree` (always removed; the checkout is never
touched) and is built by its own code: `python -m stacks.app` synthesizes its stacks and a small
collector renders every recipe's manifests with that side's `jobs`. The differences are printed as
Markdown: resources per stack, manifest fields per recipe and step, and the cost estimate per stack.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from recipes import conventions
from recipes.cost import CostBreakdown, RunEstimate, hourly_estimate, load_prices, pipeline_run_estimate, usd
from recipes.errors import UserError
from recipes.model import build_recipes
from recipes.settings import CONFIG_ENV, SPECS

DEFAULT_BASE_BRANCHES = ("main", "origin/main")
MISSING = "(none)"
MAX_VALUE_CHARS = 80
MAX_TEXT_LINES = 12

# Renders every recipe's manifests with the side's own code (run with cwd = that side's tree).
_COLLECT_MANIFESTS = r"""
import json, sys
import recipes
from jobs import render_manifests, render_startup_script
settings = recipes.example_settings()
rendered = {}
for name, recipe in recipes.all_recipes().items():
    if recipe.is_gke:
        rendered[name] = render_manifests(recipe, settings)
    else:
        rendered[name] = {"startup script": render_startup_script(recipe, settings)}
print(json.dumps(rendered, default=str))
"""


# --------------------------------------------------------------------------------------------------
# Flattening and describing differences (pure)

Leaf = object  # a scalar, a list of scalars, or an empty container


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _object_name(item: object) -> str | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("name"), str):
        return item["name"]
    metadata = item.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):  # a Kubernetes object
        return f"{item.get('kind', '')}/{metadata['name']}".lstrip("/")
    return None


def _list_keys(items: list) -> list[str]:
    """Lists of named objects (containers, env, replicatedJobs, Kubernetes objects) are keyed by name,
    others by index."""
    names = [_object_name(item) for item in items]
    if all(names) and len(set(names)) == len(names):
        return [f"[{name}]" for name in names]
    return [f".{index}" for index in range(len(items))]


def _structured(value: object) -> dict | list | None:
    """JSON or YAML embedded in a string (Helm values, Kubernetes manifests), parsed; None otherwise."""
    if not isinstance(value, str) or ("\n" not in value and not value.lstrip().startswith(("{", "["))):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return None
    return parsed if isinstance(parsed, (dict, list)) and parsed else None


def flatten(value: object, path: str = "") -> dict[str, Leaf]:
    """Nested JSON to dotted paths, e.g. {"placement_policy": {"tpu_topology": "4x8"}} ->
    {"placement_policy.tpu_topology": "4x8"}. JSON or YAML inside strings is flattened too. Lists of
    plain scalars stay whole (they diff as sets of arguments); keys starting with "//" (cdktf metadata)
    are dropped."""
    parsed = _structured(value)
    if parsed is not None:
        return flatten(parsed, path)
    if isinstance(value, dict) and value:
        flat: dict[str, Leaf] = {}
        for key, child in value.items():
            if str(key).startswith("//"):
                continue
            flat.update(flatten(child, f"{path}.{key}" if path else str(key)))
        return flat
    if isinstance(value, list) and value and not all(_is_scalar(i) and _structured(i) is None for i in value):
        flat = {}
        for key, child in zip(_list_keys(value), value):
            flat.update(flatten(child, f"{path}{key}" if path else key.lstrip(".")))
        return flat
    return {path: value}


def _show(value: Leaf) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split()) if "\n" not in text else text
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


_KEY_VALUE = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.DOTALL)


def _tokens(value: Leaf) -> list[str]:
    """Shell words of a script, or of each item of an argument list (a whole key=value item is one word)."""
    if isinstance(value, list):
        return [token for item in value for token in
                ([str(item)] if _KEY_VALUE.match(str(item)) or not str(item).split() else _tokens(str(item)))]
    try:
        return shlex.split(str(value))
    except ValueError:  # unbalanced quotes in a script: fall back to whitespace
        return str(value).split()


def _split_arguments(tokens: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """key=value arguments (a key may repeat, e.g. in several commands of a script) and the rest."""
    pairs: dict[str, list[str]] = {}
    rest: list[str] = []
    for token in tokens:
        match = _KEY_VALUE.match(token)
        if match:
            pairs.setdefault(match.group(1), []).append(match.group(2))
        else:
            rest.append(token)
    return pairs, rest


def _argument_changes(old: dict[str, list[str]], new: dict[str, list[str]]) -> list[str]:
    changes = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is None:
            changes.extend(f"+ {key}={_show(v)}" for v in after)
        elif after is None:
            changes.extend(f"- {key}={_show(v)}" for v in before)
        else:
            changes.append(f"{key} {_show(', '.join(before))} → {_show(', '.join(after))}")
    return changes


def _item_changes(old: list[str], new: list[str]) -> list[str]:
    removed = [item for item in old if item not in new]
    added = [item for item in new if item not in old]
    changes = [f"+ {_show(item)}" for item in added] + [f"- {_show(item)}" for item in removed]
    return changes or ["reordered"]


def describe(old: Leaf, new: Leaf) -> tuple[str, list[str]]:
    """One changed value as (inline text, extra lines). Argument lists and scripts diff as key=value
    sets; other multi-line text as changed lines; everything else as old → new."""
    textual = all(isinstance(v, (str, list)) and not (isinstance(v, list) and not all(_is_scalar(i) for i in v))
                  for v in (old, new))
    if textual:
        old_pairs, old_rest = _split_arguments(_tokens(old))
        new_pairs, new_rest = _split_arguments(_tokens(new))
        if (old_pairs or new_pairs) and old_rest == new_rest:
            return "; ".join(_argument_changes(old_pairs, new_pairs)) or "reordered", []
        if isinstance(old, list) and isinstance(new, list):
            return "; ".join(_item_changes([str(i) for i in old], [str(i) for i in new])), []
        if "\n" in f"{old}{new}":
            lines = [
                line for line in difflib.unified_diff(str(old).splitlines(), str(new).splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and not line.startswith(("+++", "---"))
            ]
            shown = [f"`{line}`" for line in lines[:MAX_TEXT_LINES]]
            if len(lines) > MAX_TEXT_LINES:
                shown.append(f"… {len(lines) - MAX_TEXT_LINES} more changed lines")
            return f"{len(lines)} lines changed", shown
    return f"{_show(old)} → {_show(new)}", []


def changed_fields(before: object, after: object) -> list[tuple[str, str, list[str]]]:
    """(path, description, extra lines) for every flattened field that differs, in path order."""
    old, new = flatten(before), flatten(after)
    out = []
    for path in sorted(old.keys() | new.keys()):
        if old.get(path, MISSING) != new.get(path, MISSING):
            text, extra = describe(old.get(path), new.get(path))
            out.append((path, text, extra))
    return out


# --------------------------------------------------------------------------------------------------
# Stacks

def resources(synth: dict) -> dict[str, dict]:
    """Addresses -> configuration for a synthesized stack: resources, data sources and outputs."""
    found: dict[str, dict] = {}
    for kind, blocks in synth.get("resource", {}).items():
        for name, body in blocks.items():
            found[f"{kind}.{name}"] = body
    for kind, blocks in synth.get("data", {}).items():
        for name, body in blocks.items():
            found[f"data.{kind}.{name}"] = body
    for name, body in synth.get("output", {}).items():
        found[f"output.{name}"] = body
    return found


@dataclass
class StackDiff:
    name: str
    status: str  # "added", "removed", "changed"
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[tuple[str, list[tuple[str, str, list[str]]]]] = field(default_factory=list)


def diff_stacks(before: dict[str, dict], after: dict[str, dict]) -> list[StackDiff]:
    diffs = []
    for stack in sorted(before.keys() | after.keys()):
        old, new = resources(before.get(stack, {})), resources(after.get(stack, {}))
        status = "added" if stack not in before else "removed" if stack not in after else "changed"
        diff = StackDiff(stack, status, sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys()))
        for address in sorted(old.keys() & new.keys()):
            fields = changed_fields(old[address], new[address])
            if fields:
                diff.changed.append((address, fields))
        if diff.added or diff.removed or diff.changed or status != "changed":
            diffs.append(diff)
    return diffs


def _inline(fields: list[tuple[str, str, list[str]]]) -> tuple[str, list[str]]:
    parts, extra = [], []
    for path, text, lines in fields:
        parts.append(f"{path} {text}" if path else text)
        extra.extend(lines)
    return ", ".join(parts), extra


def render_stacks(diffs: list[StackDiff]) -> list[str]:
    out = ["### Stacks", ""]
    if not diffs:
        return out + ["No resource changes.", ""]
    for diff in diffs:
        heading = f"#### `{diff.name}`"
        if diff.status != "changed":
            heading += f" (stack {diff.status})"
        out.append(heading)
        for address, fields in diff.changed:
            text, extra = _inline(fields)
            out.append(f"- changed `{address}`: {text}")
            out.extend(f"  - {line}" for line in extra)
        out.extend(f"- added `{address}`" for address in diff.added)
        out.extend(f"- removed `{address}`" for address in diff.removed)
        out.append("")
    return out


# --------------------------------------------------------------------------------------------------
# Manifests

@dataclass
class StepDiff:
    recipe: str
    step: str
    status: str  # "added", "removed", "changed"
    fields: list[tuple[str, str, list[str]]] = field(default_factory=list)


def diff_manifests(before: dict[str, dict], after: dict[str, dict]) -> list[StepDiff]:
    diffs = []
    for recipe in sorted(before.keys() | after.keys()):
        old_steps, new_steps = before.get(recipe, {}), after.get(recipe, {})
        for step in [*old_steps.keys(), *(s for s in new_steps if s not in old_steps)]:
            if step not in old_steps:
                diffs.append(StepDiff(recipe, step, "added"))
            elif step not in new_steps:
                diffs.append(StepDiff(recipe, step, "removed"))
            else:
                fields = changed_fields(old_steps[step], new_steps[step])
                if fields:
                    diffs.append(StepDiff(recipe, step, "changed", fields))
    return diffs


def render_manifests(diffs: list[StepDiff]) -> list[str]:
    out = ["### Manifests", ""]
    if not diffs:
        return out + ["No manifest changes.", ""]
    for diff in diffs:
        if diff.status != "changed":
            out.extend([f"#### `{diff.recipe}` {diff.step} (step {diff.status})", ""])
            continue
        out.append(f"#### `{diff.recipe}` {diff.step}")
        for path, text, extra in diff.fields:
            out.append(f"- `{path}`: {text}" if path else f"- {text}")
            out.extend(f"  - {line}" for line in extra)
        out.append("")
    return out


# --------------------------------------------------------------------------------------------------
# Cost

@dataclass(frozen=True)
class StackCost:
    hourly: CostBreakdown
    run: RunEstimate


def costs_for(recipes_toml: Path) -> dict[str, StackCost] | str:
    """Estimates for every recipe stack of one side, or why there are none."""
    try:
        table = tomllib.loads(recipes_toml.read_text())
        recipes = build_recipes(table, source=str(recipes_toml.name))
        return {name: StackCost(hourly_estimate(r), pipeline_run_estimate(r)) for name, r in recipes.items()}
    except (OSError, tomllib.TOMLDecodeError, UserError) as error:
        return f"no estimate ({' '.join(str(error).split())})"


def _cost_cell(cost: StackCost | None, stack: str) -> tuple[str, str]:
    if stack == conventions.ARTIFACTS_STACK:
        return "negligible", "—"
    if cost is None:
        return "—", "—"
    return cost.hourly.summary(), cost.run.summary()


def _change(before: StackCost | None, after: StackCost | None) -> str:
    old = before.hourly.total if before else 0.0
    new = after.hourly.total if after else 0.0
    delta = new - old
    if abs(delta) < 0.005:
        return "no change"
    return f"{'+' if delta > 0 else '−'}{usd(abs(delta))}/h"


def render_costs(stacks: list[str], before: dict[str, StackCost] | str, after: dict[str, StackCost] | str) -> list[str]:
    prices = load_prices()
    checked = sorted({p.checked for p in prices.machines.values()} | {prices.gke_cluster.checked}
                     | {p.checked for modes in prices.tpu.values() for p in modes.values()})
    out = [
        "### Cost (estimates)",
        "",
        f"Estimates from list prices in recipes/prices.toml ({prices.region}, checked {', '.join(checked)}); "
        "not a quote. Hourly figures are while a pipeline runs; reserved TPU capacity is billed for the "
        "reservation's term whether it is used or not, and a TPU slice that scales from zero (spot, "
        "on-demand, flex-start) only during the train step.",
        "",
    ]
    for label, side in (("REF", before), ("working tree", after)):
        if isinstance(side, str):
            out.extend([f"_{label}: {side}_", ""])
    before_costs = before if isinstance(before, dict) else {}
    after_costs = after if isinstance(after, dict) else {}
    out.extend([
        "| Stack | Before, per hour | After, per hour | Change | One pipeline run, before | One pipeline run, after |",
        "|---|---|---|---|---|---|",
    ])
    for stack in stacks:
        old, new = before_costs.get(stack), after_costs.get(stack)
        old_hour, old_run = _cost_cell(old, stack)
        new_hour, new_run = _cost_cell(new, stack)
        if stack == conventions.ARTIFACTS_STACK:
            change = "no change"
        elif isinstance(before, str) or isinstance(after, str):
            change = "—"  # one side has no estimate: a difference would be meaningless
        else:
            change = _change(old, new)
        out.append(f"| `{stack}` | {old_hour} | {new_hour} | {change} | {old_run} | {new_run} |")
    out.append("")
    return out


# --------------------------------------------------------------------------------------------------
# Building one side

@dataclass
class Side:
    stacks: dict[str, dict]  # stack -> synthesized cdk.tf.json
    manifests: dict[str, dict]  # recipe -> step -> JobSet (GKE) or {"startup script": text} (VM)
    costs: dict[str, StackCost] | str  # recipe stack -> estimate, or why there is none


_SIDE_CACHE: dict[str, Side] = {}  # tree hash -> side; a tree builds the same way within one process


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if result.returncode:
        raise subprocess.CalledProcessError(result.returncode, args, result.stdout, result.stderr)
    return result.stdout.strip()


def _side_env(tree: Path, outdir: Path) -> dict[str, str]:
    """Example settings on both sides: drop every settings variable and the config file pointer."""
    env = {key: value for key, value in os.environ.items()
           if key not in {spec.env for spec in SPECS} | {CONFIG_ENV, "PYTHONSAFEPATH"}}
    env.update({"PYTHONPATH": str(tree), "CDKTF_OUTDIR": str(outdir), "PYTHONDONTWRITEBYTECODE": "1",
                "CHECKPOINT_DISABLE": "1", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"})
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _read_synth(outdir: Path) -> dict[str, dict]:
    stacks = {}
    for path in sorted(outdir.glob("stacks/*/cdk.tf.json")):
        stacks[path.parent.name] = json.loads(path.read_text())
    return stacks


def build_side(tree: Path, label: str, workdir: Path) -> Side:
    """Synthesize the stacks and render the manifests of one tree, with that tree's own code."""
    outdir = workdir / "cdktf.out"
    env = _side_env(tree, outdir)
    synth = subprocess.run([sys.executable, "-m", "stacks.app"], cwd=tree, env=env, capture_output=True, text=True)
    stacks = _read_synth(outdir) or _read_synth(tree / "cdktf.out")
    if synth.returncode or not stacks:
        reason = _last_line(synth.stderr or synth.stdout) if synth.returncode else "it wrote no cdk.tf.json"
        raise UserError(f"synth failed at {label}: {reason} (run `python -m stacks.app` there to see why)")
    collect = subprocess.run([sys.executable, "-c", _COLLECT_MANIFESTS], cwd=tree, env=env,
                             capture_output=True, text=True)
    if collect.returncode:
        raise UserError(f"rendering the manifests failed at {label}: {_last_line(collect.stderr)}")
    return Side(stacks, json.loads(collect.stdout), costs_for(tree / "recipes" / "recipes.toml"))


def _tree_hash(tree: Path) -> str:
    """A hash of the tree's contents (its own worktree index; the checkout's index is not touched)."""
    _git(tree, "add", "-A")
    return _git(tree, "write-tree")


def _populate_working_tree(repo: Path, tree: Path) -> None:
    """Make `tree` (a worktree at HEAD) match the checkout, uncommitted and untracked files included."""
    tracked = set(_git(repo, "ls-files", "-z").split("\0")) - {""}
    others = set(_git(repo, "ls-files", "-z", "--others", "--exclude-standard").split("\0")) - {""}
    for name in tracked | others:
        source, target = repo / name, tree / name
        if source.is_file() or source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            try:
                shutil.copy2(source, target, follow_symlinks=False)
            except FileNotFoundError:  # deleted while we copied: the review shows the tree without it
                continue
        elif target.is_file() and name in tracked:  # deleted in the checkout
            target.unlink()
    user_config = tree / "tpu-rl.toml"  # personal settings never enter a review; both sides use the example
    if user_config.exists() and "tpu-rl.toml" not in tracked:
        user_config.unlink()


class _Worktrees:
    """Temporary detached worktrees, always removed (and pruned) on exit."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.paths: list[Path] = []
        self.temp = Path(tempfile.mkdtemp(prefix="tpu-rl-plan-review-"))

    def add(self, name: str, commit: str) -> Path:
        path = self.temp / name
        _git(self.repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        self.paths.append(path)
        return path

    def __enter__(self) -> "_Worktrees":
        return self

    def __exit__(self, *exc: object) -> None:
        for path in self.paths:
            subprocess.run(["git", "-C", str(self.repo), "worktree", "remove", "--force", str(path)],
                           capture_output=True)
        subprocess.run(["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True)
        shutil.rmtree(self.temp, ignore_errors=True)


def _resolve_repo(repo: Path) -> Path:
    try:
        return Path(_git(repo, "rev-parse", "--show-toplevel"))
    except (subprocess.CalledProcessError, FileNotFoundError, NotADirectoryError):
        raise UserError(f"{repo} is not a git repository: run plan-review inside a clone of tpu-rl") from None


def _resolve_base(repo: Path, base: str | None) -> tuple[str, str]:
    """(commit, label) for REF; without REF the merge base of HEAD with main."""
    if base is None:
        for branch in DEFAULT_BASE_BRANCHES:
            try:
                commit = _git(repo, "merge-base", "HEAD", branch)
            except subprocess.CalledProcessError:
                continue
            return commit, f"merge base with {branch} ({commit[:10]})"
        raise UserError("no branch main or origin/main to compare with: pass --base REF (e.g. --base HEAD~1)")
    try:
        commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    except subprocess.CalledProcessError:
        raise UserError(f"unknown ref '{base}': pass a branch, tag or commit that exists here "
                        "(`git fetch` first if it is remote)") from None
    return commit, f"{base} ({commit[:10]})"


def _side(trees: _Worktrees, name: str, commit: str, label: str, repo: Path | None) -> Side:
    tree = trees.add(name, commit)
    if repo is not None:
        _populate_working_tree(repo, tree)
    key = _tree_hash(tree)
    if key not in _SIDE_CACHE:
        work = trees.temp / f"{name}-build"
        work.mkdir()
        _SIDE_CACHE[key] = build_side(tree, label, work)
    return _SIDE_CACHE[key]


@dataclass(frozen=True)
class Review:
    markdown: str
    changed_stacks: tuple[str, ...]  # stacks whose synthesized configuration differs (for `terraform plan`)
    before: Side
    after: Side


def compare(before: Side, after: Side, base_label: str) -> str:
    """The review as Markdown, or one line when nothing differs."""
    return compare_sides(before, after, base_label).markdown


def compare_sides(before: Side, after: Side, base_label: str) -> Review:
    stack_diffs = diff_stacks(before.stacks, after.stacks)
    changed_stacks = tuple(diff.name for diff in stack_diffs if diff.status != "removed")
    step_diffs = diff_manifests(before.manifests, after.manifests)
    stacks = sorted(before.stacks.keys() | after.stacks.keys())
    costs_differ = _cost_signature(before.costs) != _cost_signature(after.costs)
    if not stack_diffs and not step_diffs and not costs_differ:
        return Review(f"No changes: the stacks, manifests and cost estimates at {base_label} and in the working tree "
                      "are the same.", (), before, after)
    lines = [f"## Plan review: {base_label} → working tree", "",
             "Both sides built with the example settings, each by its own code.", ""]
    lines += render_stacks(stack_diffs)
    lines += render_manifests(step_diffs)
    lines += render_costs(stacks, before.costs, after.costs)
    return Review("\n".join(lines).rstrip() + "\n", changed_stacks, before, after)


def _cost_signature(costs: dict[str, StackCost] | str) -> object:
    if isinstance(costs, str):
        return costs
    return {name: (round(c.hourly.total, 4), c.hourly.has_reserved, round(c.run.total, 4)) for name, c in costs.items()}


def review(base: str | None = None, repo: Path | None = None) -> Review:
    """REF vs the working tree of `repo` (default: the current directory), and the stacks that changed.

    Raises UserError (one line) for an unknown ref, a directory that is not a git repository, or a
    synth or render that fails on either side.
    """
    root = _resolve_repo(Path(repo or Path.cwd()).resolve())
    commit, base_label = _resolve_base(root, base)
    try:
        head = _git(root, "rev-parse", "--verify", "HEAD")
        with _Worktrees(root) as trees:
            before = _side(trees, "ref", commit, base_label, None)
            after = _side(trees, "working", head, "the working tree", root)
    except subprocess.CalledProcessError as error:  # git itself refused (no commits, locked worktree, ...)
        raise UserError(f"git {error.cmd[0]} failed in {root}: {_last_line(error.stderr or '')}") from None
    return compare_sides(before, after, base_label)
