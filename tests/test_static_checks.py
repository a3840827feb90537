"""A tool that reads code without running it sees the house: every tpu_rl.<package> import of the checkout
resolves in the installed layout that tools/static_checks.py writes out as links (tpu_rl/__init__.py's run-time
path is never needed), and mypy, configured by pyproject.toml, finds the modules there. The full ruff and mypy
runs are `make lint`, the first step of `make test`."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from import_graph import MODULES, NAMESPACE, ROOT, imports_of

sys.path.insert(0, str(ROOT / "tools"))
import static_checks  # tools/ is not a package


@pytest.fixture(scope="module")
def layout():
    return static_checks.layout()


def _resolves(layout, name: str) -> bool:
    path = layout.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_layout_holds_every_module_of_the_checkout(layout):
    assert sorted(name for name in MODULES if not _resolves(layout, name)) == []
    assert len(MODULES) > 150  # recipes, infra, stacks, jobs and scripts, each module once


def test_every_import_of_the_namespace_resolves_statically(layout):
    ours = {module: imports_of(module, path) for module, path in MODULES.items()}
    for path in sorted((ROOT / "tests").rglob("*.py")):  # the tests import the packages too
        ours[str(path.relative_to(ROOT))] = {
            name for node in ast.walk(ast.parse(path.read_text(), str(path)))
            for name in ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])}
    unresolved = sorted(f"{where} -> {name}" for where, names in ours.items() for name in names
                        if name.partition(".")[0] == NAMESPACE and not _resolves(layout, name))
    assert unresolved == []
    assert sum(name.startswith(NAMESPACE + ".") for names in ours.values() for name in names) > 500


def test_mypy_resolves_the_namespace_and_refuses_a_name_it_lacks(layout, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import tpu_rl.recipes\nimport tpu_rl.scripts.cli\nfrom tpu_rl.jobs import maxtext\n"
                     "from tpu_rl.stacks import app\nfrom tpu_rl.infra import google\nimport tpu_rl.no_such_package\n")
    # --follow-imports=skip: each module is found, not checked (make lint checks them all)
    checked = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                              "--follow-imports=skip", "--no-incremental", str(probe)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "probe.py:6:" in errors[0] and "[import-not-found]" in errors[0], checked.stdout
