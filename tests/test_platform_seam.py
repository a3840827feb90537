"""The platform is a seam, not a branch (issue 26): the CLI and the pipeline ask
scripts/pipeline/platforms.py for the recipe's implementation, and only the implementations (a package each)
and that one lookup know which platform they are on. What differs as data is a PlatformRules row
(recipes/capacity/modes.py)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import typing

from peers.fixtures import REPO, clean_environment

from tpu_rl.recipes.capacity.modes import PLATFORM_RULES, Platform as PlatformName
from tpu_rl.scripts.pipeline.platforms import IMPLEMENTATIONS, Platform, platform_for

PRODUCT_PACKAGES = ("scripts", "jobs", "recipes", "infra", "stacks")
IMPLEMENTATION_PACKAGES = ("scripts/pipeline/gke/", "scripts/pipeline/vm/")
ROUTE = "scripts/pipeline/platforms.py"  # the one place that maps a platform's name to its implementation
# A condition on the platform, in each form Python writes one: a flag, a comparison (with a name or with a
# platform's literal), membership, a match, an isinstance of an implementation. A lookup by the platform's
# name in a table of data (PLATFORM_RULES, NEEDS, stacks/app.py's compositions) is the seam, not a branch.
BRANCH = re.compile(r"\bis_(?:gke|vm)\b|\bplatform\)?\s*[!=]=|[!=]=\s*[\w.]*platform\b"
                    r"|[!=]=\s*[\"'](?:gke|vm)[\"']|[\"'](?:gke|vm)[\"']\s*[!=]="
                    r"|\bplatform\)?\s+(?:not\s+)?in\b|\bmatch\s+[\w.()]*platform\b|isinstance\([^)]*\b(?:Gke|Vm)\w*Platform")


def _branches() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative == ROUTE or relative.startswith(IMPLEMENTATION_PACKAGES):
                continue
            lines = [f"{number}: {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1)
                     if BRANCH.search(line)]
            if lines:
                found[relative] = lines
    return found


def test_the_pattern_sees_each_kind_of_branch():
    # Guards the guard: the forms the seam replaced (scripts/cli/cloud.py, recipes/catalog/entry.py before it).
    for line in ('if recipe.is_gke:', 'if self.platform == "vm" and x:', 'recipe.platform != "vm"',
                 'if "gke" == recipe.platform:', 'if recipe.platform in ("gke",):', 'if platform not in SLICED:',
                 'match recipe.platform:', 'if isinstance(impl, VmPlatform):', 'if platform_for(r).name == "vm":',
                 'if str(recipe.platform) == kind:', 'if (recipe.platform) == "gke":', "x if kind != 'vm' else y"):
        assert BRANCH.search(line), line
    for line in ('IMPLEMENTATIONS[recipe.platform]', 'rules = PLATFORM_RULES[self.platform]',
                 '"run": {"gke": CLUSTER, "vm": VM},'):
        assert not BRANCH.search(line), line


def test_no_platform_branch_outside_the_implementations():
    assert _branches() == {}, "branch on the platform behind the seam (scripts/pipeline/platforms.py) instead"


def test_every_platform_has_rules_and_an_implementation_of_the_whole_protocol():
    names = set(typing.get_args(PlatformName))
    assert set(IMPLEMENTATIONS) == names and set(PLATFORM_RULES) == names
    wanted = {name for name, member in vars(Platform).items() if inspect.isfunction(member) and name[0] != "_"}
    assert {"run", "cancel", "status", "logs", "evaluate", "render"} <= wanted
    for name in names:
        implementation = platform_for(type("Recipe", (), {"platform": name})())
        assert implementation.name == name
        missing = {method for method in wanted if not callable(getattr(implementation, method, None))}
        assert not missing, f"{IMPLEMENTATIONS[name]} lacks {sorted(missing)}"
        for method in wanted:  # the CLI calls them by keyword: the same parameters as the protocol
            assert (list(inspect.signature(getattr(implementation, method)).parameters)
                    == list(inspect.signature(getattr(Platform, method)).parameters)[1:]), (name, method)


def test_help_imports_no_platform_implementation(tmp_path):
    probe = ("import sys\nfrom typer.testing import CliRunner\nfrom tpu_rl.scripts.cli import app\n"
             "result = CliRunner().invoke(app, ['--help'])\nassert result.exit_code == 0, result.output\n"
             "print(sorted(m for m in sys.modules if m.startswith(('tpu_rl.scripts.pipeline.gke', 'tpu_rl.scripts.pipeline.vm'))))")
    env = {**clean_environment(tmp_path), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"
