"""Plan review builds each side with that side's own module names: tpu_rl.<package> since the one installed
namespace, the bare top-level packages on a base from before it (the base of the change that made it).
Stub trees stand in for the real ones (a real side costs two synths): each says which names ran it. The
same stubs show that a side's one build process names the phase that failed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpu_rl.recipes.errors import UserError
from tpu_rl.scripts.plan_review.worktrees import build_side

REPO = Path(__file__).resolve().parents[1]
STUBS = {
    # the synth writes one stack named after the module path it was run as
    "stacks/__init__.py": "",
    "stacks/app.py": "import json, os, pathlib\n"
                     "out = pathlib.Path(os.environ['CDKTF_OUTDIR'], 'stacks', __spec__.name)\n"
                     "out.mkdir(parents=True)\n"
                     "(out / 'cdk.tf.json').write_text(json.dumps({'resource': {}}))\n",
    "recipes/__init__.py": "from types import SimpleNamespace\n"
                           "def example_settings(): return None\n"
                           "def all_recipes(): return {'r': SimpleNamespace(platform='vm')}\n",
    "recipes/model.py": "CAPACITY_MODES = ()\n",
    "jobs/__init__.py": "def render_manifests(recipe, settings): return {}\n"
                        "def render_startup_script(recipe, settings): return __name__\n",
}


def _tree(root: Path, namespaced: bool) -> Path:
    for name, text in STUBS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if namespaced:  # the namespace and the checkout's files it looks for
        (root / "tpu_rl").mkdir()
        shutil.copy2(REPO / "tpu_rl" / "__init__.py", root / "tpu_rl" / "__init__.py")
        for name in ("pyproject.toml", "cdktf.json"):
            (root / name).write_text("")
    return root


@pytest.mark.parametrize(("namespaced", "prefix"), [(True, "tpu_rl."), (False, "")],
                         ids=["after the namespace", "a base from before it"])
def test_each_side_runs_with_its_own_module_names(tmp_path, namespaced, prefix):
    tree = _tree(tmp_path / "tree", namespaced)
    work = tmp_path / "work"
    work.mkdir()
    side = build_side(tree, "the side", work)
    assert list(side.stacks) == [f"{prefix}stacks.app"]
    assert side.manifests == {"r": {"startup script": f"{prefix}jobs"}}


def test_a_side_with_jobs_registry_of_renderers_renders_through_it(tmp_path):
    # Since issue 38 a side renders through jobs.render_steps (its RENDERERS); the sides above have none and
    # render by their platforms' names, the fallback older base revisions need.
    tree = _tree(tmp_path / "tree", True)
    with (tree / "jobs" / "__init__.py").open("a") as jobs:
        jobs.write("def render_steps(recipe, settings): return {'through': 'render_steps'}\n")
    work = tmp_path / "work"
    work.mkdir()
    assert build_side(tree, "the side", work).manifests == {"r": {"through": "render_steps"}}


def _capacity_tree(root: Path, app_ending: str) -> Path:
    """A stub side that knows two capacity modes; its app ends with `app_ending`."""
    tree = _tree(root, True)
    (tree / "recipes" / "model.py").write_text('CAPACITY_MODES = ("spot", "on-demand")\n')
    with (tree / "stacks" / "app.py").open("a") as app:
        app.write(app_ending)
    return tree


def test_the_second_build_is_the_one_with_every_capacity_mode(tmp_path):
    # the stub app writes one stack more, named after CAPACITY, into the output directory it is given
    tree = _capacity_tree(tmp_path / "tree", "(out.parent / os.environ.get('CAPACITY', 'none')).mkdir()\n"
                                              "(out.parent / os.environ.get('CAPACITY', 'none') / 'cdk.tf.json')"
                                              ".write_text('{}')\n")
    (tmp_path / "work").mkdir()
    side = build_side(tree, "the side", tmp_path / "work")
    assert sorted(side.stacks) == ["none", "tpu_rl.stacks.app"]
    assert sorted(side.all_capacity) == ["spot,on-demand", "tpu_rl.stacks.app"]
    assert side.all_capacity_setting == "spot,on-demand"


def test_a_build_failing_with_every_capacity_mode_says_how_to_run_that_build(tmp_path):
    tree = _capacity_tree(tmp_path / "tree", "import sys\n"
                                              "if 'CAPACITY' in os.environ: sys.exit('no pools for that capacity')\n")
    (tmp_path / "work").mkdir()
    with pytest.raises(UserError, match=r"^synth failed at the side: no pools for that capacity \(run "
                                        r"`CAPACITY=spot,on-demand python -m tpu_rl.stacks.app` there to see why\)$"):
        build_side(tree, "the side", tmp_path / "work")


def test_rendering_failing_says_so_with_its_last_line(tmp_path):
    tree = _tree(tmp_path / "tree", True)
    (tree / "jobs" / "__init__.py").write_text("def render_startup_script(recipe, settings):\n"
                                               "    raise ValueError('a step without a command')\n")
    (tmp_path / "work").mkdir()
    with pytest.raises(UserError, match=r"^rendering the manifests failed at the side: "
                                        r"ValueError: a step without a command$"):
        build_side(tree, "the side", tmp_path / "work")
