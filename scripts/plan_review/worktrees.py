"""Building one side of the review: REF or the working tree, each in a temporary `git worktree` (always
removed; the checkout is never touched), synthesized and rendered by its own code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.settings.specs import CONFIG_ENV, SPECS
from tpu_rl.scripts.plan_review.report import StackCost, costs_for

DEFAULT_BASE_BRANCHES = ("main", "origin/main")
CAPACITY_ENV = next(spec.env for spec in SPECS if spec.field == "capacity")

# Builds a side with its own code in one process, not three (each start pays cdktf's imports and node, ~2 s):
# the app, every recipe's manifests, the app with every capacity mode (docs/plan-review.md, "One process").
_BUILD_SIDE = r"""
import importlib, importlib.util, json, os, runpy, sys
ns, manifests_file, capacity_env = sys.argv[1:4]
app = ns + "stacks.app"


def phase(name):
    print(PHASE + name, file=sys.stderr, flush=True)


def synth():
    sys.argv = [app]
    try:
        runpy.run_module(app, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (0, None):
            raise


def moved_aside():
    for outdir in (os.environ["CDKTF_OUTDIR"], "cdktf.out"):
        if os.path.isdir(outdir):
            os.rename(outdir, outdir + DEFAULT_SUFFIX)


phase("synth")
synth()
moved_aside()
phase("manifests")
recipes = importlib.import_module(f"{ns}recipes")
jobs = importlib.import_module(f"{ns}jobs")
settings = recipes.example_settings()
# Whether the side itself has the module: an editable install of the checkout answers for names the side
# lacks (setuptools' editable finder maps tpu_rl.<package> to the checkout), so it must lie in the side.
def found(name):
    try:
        spec = importlib.util.find_spec(ns + name)
    except ImportError:  # its parent is a module there, not a package
        return False
    return bool(spec and spec.origin) and os.path.realpath(spec.origin).startswith(os.path.realpath(os.getcwd()) + os.sep)
def first_found(*names):
    return next((name for name in names if found(name)), None)
# A side with a RunSpec (recipes.runs.spec; recipes.run_spec before recipes/ had a package per concept)
# renders the run of each recipe as recipes.toml defines it
spec_home = first_found("recipes.runs.spec", "recipes.run_spec")
as_run = importlib.import_module(ns + spec_home).RunSpec.of_catalog if spec_home else (lambda recipe: recipe)
# A side with jobs' registry of renderers (jobs.render_steps) renders through it; an older base revision
# has none, and renders by its two platforms' names as it did then.
render_steps = getattr(jobs, "render_steps", None)
renderers = {"gke": lambda recipe: jobs.render_manifests(as_run(recipe), settings),
             "vm": lambda recipe: {"startup script": jobs.render_startup_script(as_run(recipe), settings)}}
render = (lambda recipe: render_steps(as_run(recipe), settings)) if render_steps else (
    lambda recipe: renderers[recipe.platform](recipe))
rendered = {name: render(recipe) for name, recipe in recipes.all_recipes().items()}
# The capacity modes' module: recipes.capacity.modes since recipes/ has a package per concept, before that
# recipes.capacity_modes, before its split recipes.model; a side from before capacity modes has none
home = first_found("recipes.capacity.modes", "recipes.capacity_modes", "recipes.model")
modes = getattr(importlib.import_module(ns + home), "CAPACITY_MODES", None) if home else None
with open(manifests_file, "w") as out:
    json.dump({"manifests": rendered, "capacity_modes": list(modes or [])}, out, default=str)
if modes:
    os.environ[capacity_env] = ",".join(modes)
    phase("synth all capacity")
    synth()
"""
PHASE = "tpu-rl plan-review phase: "
DEFAULT_SUFFIX = "-default"  # where the first build's output directory is moved


def _namespace(tree: Path) -> str:
    """The prefix of a side's module names: the packages install as tpu_rl.<package> (tpu_rl/__init__.py),
    but a base from before that (e.g. the base of the change that made the namespace) has them at the top."""
    return "tpu_rl." if (tree / "tpu_rl" / "__init__.py").is_file() else ""


@dataclass
class Side:
    stacks: dict[str, dict]  # stack -> synthesized cdk.tf.json
    manifests: dict[str, dict]  # recipe -> step -> JobSet (GKE) or {"startup script": text} (VM)
    costs: dict[str, StackCost] | str  # recipe stack -> estimate, or why there is none
    # The stacks again with CAPACITY set to every mode the side knows, so that every mode's TPU pools
    # are compared, not only those of each recipe's own capacity (a change to flex-start pools alone
    # must not read "No changes"); {} for a side that knows no modes.
    all_capacity: dict[str, dict] = field(default_factory=dict)
    all_capacity_setting: str = ""


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


def _built(tree: Path, outdir: Path, suffix: str = "") -> dict[str, dict]:
    """A build's stacks: in the output directory given, or in the tree's cdktf.out for a side that ignores it."""
    return _read_synth(outdir.with_name(outdir.name + suffix)) or _read_synth(tree / f"cdktf.out{suffix}")


def build_side(tree: Path, label: str, workdir: Path) -> Side:
    """Synthesize the stacks and render the manifests of one tree, with that tree's own code (_BUILD_SIDE)."""
    outdir, manifests_file = workdir / "cdktf.out", workdir / "manifests.json"
    script = f"PHASE, DEFAULT_SUFFIX = {PHASE!r}, {DEFAULT_SUFFIX!r}\n{_BUILD_SIDE}"
    build = subprocess.run([sys.executable, "-c", script, _namespace(tree), str(manifests_file), CAPACITY_ENV],
                           cwd=tree, env=_side_env(tree, outdir), capture_output=True, text=True)
    _, announced, last = build.stderr.rpartition(PHASE)  # the phase it was in, then that phase's output
    phase, _, output = last.partition("\n") if announced else ("synth", "", last)
    collected = json.loads(manifests_file.read_text()) if manifests_file.is_file() else {}
    every_mode = ",".join(collected.get("capacity_modes", []))
    app = f"{_namespace(tree)}stacks.app"
    how = {"synth": f"python -m {app}", "synth all capacity": f"{CAPACITY_ENV}={every_mode} python -m {app}"}
    if build.returncode:
        reason = _last_line(output or build.stdout)
        if phase == "manifests":
            raise UserError(f"rendering the manifests failed at {label}: {reason}")
        raise UserError(f"synth failed at {label}: {reason} (run `{how.get(phase, how['synth'])}` there to see why)")
    stacks, all_capacity = _built(tree, outdir, DEFAULT_SUFFIX), _built(tree, outdir) if every_mode else {}
    if not stacks or (every_mode and not all_capacity):
        empty = "synth" if not stacks else "synth all capacity"
        raise UserError(f"synth failed at {label}: it wrote no cdk.tf.json (run `{how[empty]}` there to see why)")
    return Side(stacks, collected["manifests"], costs_for(tree / "recipes" / "recipes.toml"), all_capacity, every_mode)


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


def build_sides(base: str | None, repo: Path | None) -> tuple[Side, Side, str]:
    """REF's side, the working tree's side and REF's label, for `repo` (default: the current directory)."""
    root = _resolve_repo(Path(repo or Path.cwd()).resolve())
    commit, base_label = _resolve_base(root, base)
    try:
        head = _git(root, "rev-parse", "--verify", "HEAD")
        with _Worktrees(root) as trees:
            before = _side(trees, "ref", commit, base_label, None)
            after = _side(trees, "working", head, "the working tree", root)
    except subprocess.CalledProcessError as error:  # git itself refused (no commits, locked worktree, ...)
        raise UserError(f"git {error.cmd[0]} failed in {root}: {_last_line(error.stderr or '')}") from None
    return before, after, base_label
