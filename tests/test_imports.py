"""The packages import one way: every module imports, no chain of imports among them (at module level or
inside a function: a lazy import is still a dependency) comes back to where it began, and no package
imports one above it: stacks -> infra -> recipes, scripts -> jobs -> recipes (docs/development.md).
They live in one namespace, tpu_rl.<package>, in a checkout and installed: a built wheel holds only tpu_rl/
at its top, and no code names a package by its old top-level name."""

from __future__ import annotations

import ast
import graphlib
import importlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from import_graph import MODULES, NAMESPACE, PACKAGES, ROOT, import_graph, imports_of, package_of

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
APART = {"tpu_rl.scripts.rundata": {"tpu_rl.scripts.pipeline", "tpu_rl.scripts.metrics"},
         "tpu_rl.scripts.metrics": {"tpu_rl.scripts.pipeline"}, "tpu_rl.scripts.pipeline": {"tpu_rl.scripts.metrics"}}
CDKTF_PACKAGES = ("cdktf", "constructs", "cdktf_cdktf_provider_google", "jsii")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_sees_both_kinds_of_import():
    # a module-level one (the CLI's outcome) and one inside a function (the CLI's plan-review command)
    graph = import_graph()
    cli = {name for name in MODULES if _within(name, "tpu_rl.scripts.cli")}
    assert {"tpu_rl.recipes.outcome", "tpu_rl.scripts.plan_review"} <= set().union(*(graph[name] for name in cli))


def test_the_graph_covers_everypackage_of():
    assert {package_of(name) for name in MODULES} == set(PACKAGES)


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
                    if (to := package_of(name)) != (start := package_of(module))
                    and to not in MAY_IMPORT[start])
    assert not upward, f"imports back up the layers: {upward}"


def test_run_data_sits_below_the_pipeline_and_metrics():
    crossing = sorted(f"{module} -> {name}" for module, names in import_graph().items()
                      for package, others in APART.items() if _within(module, package)
                      for name in names if any(_within(name, other) for other in others))
    assert not crossing, f"move what both read into scripts/rundata/: {crossing}"


def test_the_pipeline_does_not_reach_into_plan_review():
    # the pipeline runs a user's run, plan review compares two revisions of the house; what both use (the
    # field-by-field diff) sits below both, in scripts/field_diff.py
    sideways = sorted(f"{module} -> {name}" for module, names in import_graph().items()
                      if _within(module, "tpu_rl.scripts.pipeline")
                      for name in names if _within(name, "tpu_rl.scripts.plan_review"))
    assert not sideways, f"move what both use below both: {sideways}"


def test_cdktf_is_imported_only_in_infra_and_stacks():
    leaks = sorted(f"{module} -> {name}" for module, path in MODULES.items()
                   if package_of(module) not in ("infra", "stacks")
                   for name in imports_of(module, path) if name.partition(".")[0] in CDKTF_PACKAGES)
    assert not leaks, f"cdktf outside infra/ and stacks/: {leaks}"


# A module does one job; one that grows past about 400 lines is split (as gke/ was, into its six jobs,
# and recipes' one model.py into the modules of catalog/ and capacity/). The rule holds in every package.
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


# --- one installed namespace --------------------------------------------------------------------------
# Everything of ours that is Python, product or not (the tests, peers, bench and tools import the packages
# too); vendored upstream files are not ours.
OUR_PYTHON = sorted(path for path in ROOT.rglob("*.py") if not any(
    part.startswith(".") or part in {"node_modules", "cdktf.out", "vendor", "build"}
    for part in path.relative_to(ROOT).parts))


def test_no_code_imports_a_package_by_its_old_top_level_name():
    """`import scripts.x` from a checkout would load a second copy of the module beside tpu_rl.scripts.x
    (patches and isinstance checks then miss it); installed, it finds nothing or someone else's package."""
    old = []
    for path in OUR_PYTHON:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            old += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                    if name.partition(".")[0] in PACKAGES]
    assert not old, f"import these as tpu_rl.<package> (from tpu_rl import jobs; from tpu_rl.jobs.x import y): {old}"


def test_pyproject_installs_every_package_folder_under_the_namespace():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    config = project["tool"]["setuptools"]
    assert config["package-dir"] == {NAMESPACE: NAMESPACE, **{f"{NAMESPACE}.{p}": p for p in PACKAGES}}
    folders = {NAMESPACE} | {".".join((NAMESPACE, *init.parent.relative_to(ROOT).parts))
                             for package in PACKAGES for init in (ROOT / package).rglob("__init__.py")}
    assert sorted(config["packages"]) == sorted(folders), "list every package folder in pyproject.toml"
    assert project["project"]["scripts"] == {"tpu-rl": f"{NAMESPACE}.scripts.cli:main"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The package built as a user's pip builds it, offline, from a copy of the checkout's tracked files."""
    try:
        import setuptools
        version = tuple(int(part) for part in setuptools.__version__.split(".")[:2])
    except ImportError:
        version = (0, 0)
    if version < (70, 1):
        pytest.fail("building the wheel offline needs setuptools >= 70.1 (bdist_wheel built in) in this venv: "
                    "run `make install` (the test extra has it)")
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file() and name.split("/")[0] in {*PACKAGES, NAMESPACE, "pyproject.toml", "README.md"}:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--quiet", "--wheel-dir", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (found,) = out.glob("tpu_rl-*.whl")
    return found


def test_the_wheel_has_only_the_namespace_at_its_top(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {NAMESPACE, "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    # every module and data file of the folders, under tpu_rl/
    for package, patterns in (("recipes", ("*.py", "*.toml", "maxtext_keys/*.toml")),
                              ("infra", ("*.py", "charts/manifests/*.yaml", "google_lazy_require.js")),
                              ("stacks", ("*.py",)), ("jobs", ("*.py", "vm_script/*.sh")), ("scripts", ("*.py",))):
        expected = {f"{NAMESPACE}/{p.relative_to(ROOT).as_posix()}" for pattern in patterns
                    for p in (ROOT / package).rglob(pattern) if "__pycache__" not in p.parts}
        assert expected and expected <= set(names), sorted(expected - set(names))[:5]
    entry_points = next(zipfile.Path(wheel, name).read_text() for name in names if name.endswith("entry_points.txt"))
    assert f"tpu-rl = {NAMESPACE}.scripts.cli:main" in entry_points


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The wheel installed into a fresh venv (its dependencies from this venv's site-packages): (the venv, its
    site-packages, an environment that runs it outside any checkout)."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", "--quiet", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "TPU_RL"))}
    # the dependencies: this interpreter's site-packages, whose .pth files (an editable install) are not read
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if Path(path).name == "site-packages")
    return venv, site, env


def test_the_installed_console_script_runs_from_the_wheel_alone(installed, tmp_path):
    """Run outside any checkout: `tpu-rl --help` works, the code is the wheel's, and someone else's top-level
    `scripts` (with files beside it that look like a checkout's) is not picked up."""
    venv, site, env = installed
    python = venv / "bin" / "python"
    top = {path.name for path in site.iterdir()}
    assert NAMESPACE in top and not {"scripts", "jobs", "recipes", "infra", "stacks"} & top, sorted(top)
    (site / "scripts").mkdir()  # someone else's package, and files that look like a checkout's
    (site / "scripts" / "__init__.py").write_text("raise ImportError('the wrong scripts')\n")
    for name in ("pyproject.toml", "cdktf.json"):
        (site / name).write_text("")
    work = tmp_path / "work"
    work.mkdir()
    helped = subprocess.run([str(venv / "bin" / "tpu-rl"), "--help"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "Usage" in helped.stdout, helped.stderr[-2000:]
    where = subprocess.run([str(python), "-c", "import tpu_rl.scripts.cli as cli; print(cli.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr[-2000:]
    assert Path(where.stdout.strip()).is_relative_to(site / NAMESPACE / "scripts"), where.stdout


# The VM recipe's startup script as the wheel renders it, from its own jobs/vm_script/*.sh.
RENDER = ("import sys; from tpu_rl.jobs import render_startup_script; from tpu_rl.recipes import example_settings, "
          "get_recipe; from tpu_rl.recipes.runs.spec import RunSpec; "
          "sys.stdout.write(render_startup_script(RunSpec.of_catalog(get_recipe(sys.argv[1])), example_settings()))")


def test_the_installed_wheel_renders_the_vm_startup_script_from_its_own_parts(installed, tmp_path):
    from tpu_rl.jobs import render_startup_script
    from tpu_rl.recipes import all_recipes, example_settings
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.recipes.platforms import StepRunner

    venv, site, env = installed
    parts = sorted(path.name for path in (site / NAMESPACE / "jobs" / "vm_script").glob("*.sh"))
    assert parts == sorted(path.name for path in (ROOT / "jobs" / "vm_script").glob("*.sh"))
    vm = [name for name, recipe in all_recipes().items()
          if recipe.platform_facts.steps_run_as == StepRunner.STARTUP_SCRIPT]
    assert vm, "no VM recipe to render"
    for name in vm:
        rendered = subprocess.run([str(venv / "bin" / "python"), "-c", RENDER, name], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120)
        assert rendered.returncode == 0, rendered.stderr[-2000:]
        assert rendered.stdout == render_startup_script(RunSpec.of_catalog(all_recipes()[name]), example_settings())
