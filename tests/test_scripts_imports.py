"""scripts/ as packages that import one way: every module imports, and no chain of imports among them
(at module level or inside a function: a lazy import is still a dependency) comes back to where it began."""

from __future__ import annotations

import ast
import graphlib
import importlib
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SCRIPTS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(SCRIPTS.rglob("*.py"))}


def _imported(module: str, path: Path) -> set[str]:
    """The scripts modules that `module` imports anywhere in its file (`from pkg import sub` names sub)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


def import_graph() -> dict[str, set[str]]:
    return {module: _imported(module, path) for module, path in MODULES.items()}


def test_the_graph_sees_both_kinds_of_import():
    # a module-level one (the CLI's outcome) and one inside a function (the CLI's plan-review command)
    graph = import_graph()
    cli = {name for name in MODULES if name == "scripts.cli" or name.startswith("scripts.cli.")}
    assert {"scripts.outcome", "scripts.plan_review"} <= set().union(*(graph[name] for name in cli))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_scripts_module_imports(module):
    importlib.import_module(module)


def test_no_import_cycle_among_scripts_modules():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


# A module does one job; one that grows past about 400 lines is split (as gke/ was, into its six jobs,
# and recipes/model.py into catalog, entry, shape and capacity_modes). The rule holds in every package.
MAX_MODULE_LINES = 400
ROOT = SCRIPTS.parent
PACKAGES = ("scripts", "recipes", "jobs", "infra", "stacks", "tests/peers")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_grows_past_about_400_lines(package):
    long = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / package).rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by what they do: {long}"
