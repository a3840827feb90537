"""Every import of the project's packages, read from their files (ast): the repository's one reading of its
import graph, for tests/test_imports.py and the driver image's test."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "tpu_rl"
PACKAGES = ("recipes", "jobs", "infra", "stacks", "scripts")  # the folders, each installed as tpu_rl.<name>


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((NAMESPACE, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def package_of(module: str) -> str:
    """recipes for tpu_rl.recipes.catalog.entry; a name outside the namespace (cdktf.x) is its own first part."""
    first, _, rest = module.partition(".")
    return rest.partition(".")[0] if first == NAMESPACE else first


MODULES = {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports_of(module: str, path: Path) -> set[str]:
    """Every name `module` imports anywhere in its file, relative imports resolved (`from pkg import sub`
    names pkg.sub when that is one of our modules)."""
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
    return found


def import_graph() -> dict[str, set[str]]:
    """Each of our modules and the modules of ours it imports."""
    return {module: {name for name in imports_of(module, path) if name in MODULES and name != module}
            for module, path in MODULES.items()}
