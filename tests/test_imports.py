"""The packages import one way: every module imports, no chain of imports among them (at module level or
inside a function: a lazy import is still a dependency) comes back to where it began, and no package
imports one above it: stacks -> infra -> recipes, scripts -> jobs -> recipes (docs/development.md)."""

from __future__ import annotations

import ast
import graphlib
import importlib

import pytest

from import_graph import MODULES, PACKAGES, ROOT, import_graph, imports_of

# What each package may import besides itself. stacks take the VM's startup script from jobs (pure
# functions); nothing imports scripts, and scripts import neither infra nor stacks (cdktf stays there).
MAY_IMPORT = {
    "recipes": set(),
    "jobs": {"recipes"},
    "infra": {"recipes"},
    "stacks": {"infra", "jobs", "recipes"},
    "scripts": {"jobs", "recipes"},
}
# Inside scripts/: run data is read below both the pipeline and `tpu-rl metrics`, which use it and not
# each other.
APART = {"scripts.rundata": {"scripts.pipeline", "scripts.metrics"},
         "scripts.metrics": {"scripts.pipeline"}, "scripts.pipeline": {"scripts.metrics"}}
CDKTF_PACKAGES = ("cdktf", "constructs", "cdktf_cdktf_provider_google", "jsii")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_sees_both_kinds_of_import():
    # a module-level one (the CLI's outcome) and one inside a function (the CLI's plan-review command)
    graph = import_graph()
    cli = {name for name in MODULES if _within(name, "scripts.cli")}
    assert {"scripts.outcome", "scripts.plan_review"} <= set().union(*(graph[name] for name in cli))


def test_the_graph_covers_every_package():
    assert {name.partition(".")[0] for name in MODULES} == set(PACKAGES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    importlib.import_module(module)


def test_no_import_cycle_among_the_modules():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_no_package_imports_one_above_it():
    upward = sorted(f"{module} -> {name}" for module, names in import_graph().items() for name in names
                    if (to := name.partition(".")[0]) != (start := module.partition(".")[0])
                    and to not in MAY_IMPORT[start])
    assert not upward, f"imports back up the layers: {upward}"


def test_run_data_sits_below_the_pipeline_and_metrics():
    crossing = sorted(f"{module} -> {name}" for module, names in import_graph().items()
                      for package, others in APART.items() if _within(module, package)
                      for name in names if any(_within(name, other) for other in others))
    assert not crossing, f"move what both read into scripts/rundata/: {crossing}"


def test_cdktf_is_imported_only_in_infra_and_stacks():
    leaks = sorted(f"{module} -> {name}" for module, path in MODULES.items()
                   if module.partition(".")[0] not in ("infra", "stacks")
                   for name in imports_of(module, path) if name.partition(".")[0] in CDKTF_PACKAGES)
    assert not leaks, f"cdktf outside infra/ and stacks/: {leaks}"


# A module does one job; one that grows past about 400 lines is split (as gke/ was, into its six jobs,
# and recipes/model.py into catalog, entry, shape and capacity_modes). The rule holds in every package.
MAX_MODULE_LINES = 400


@pytest.mark.parametrize("package", (*PACKAGES, "tests/peers"))
def test_no_module_grows_past_about_400_lines(package):
    long = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / package).rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by what they do: {long}"


def test_no_test_module_imports_another():
    """What test modules share lives in a helper module (tests/cli_helpers.py, tests/vm_helpers.py,
    tests/import_graph.py, tests/peers/), so a module runs, moves and is read on its own."""
    tests = ROOT / "tests"
    found = sorted(f"{path.relative_to(ROOT)} imports {name}" for path in sorted(tests.rglob("*.py"))
                   for name in _imported_names(path)
                   if name.removeprefix("tests.").partition(".")[0].startswith("test_"))
    assert not found, f"move what they share into a helper module: {found}"


def _imported_names(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
            found.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "tests")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant):
            found.add(str(node.args[0].value))
    return found
