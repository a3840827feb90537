"""The rendered source patches really edit the source, are idempotent, and fail loudly on a mismatch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs.patches import render_patch
from recipes import SourcePatch, get_recipe


def patch_named(name: str, **update) -> SourcePatch:
    recipes = ("qwen3-v6e32", "gemma4-v6e64")
    patch = next(p for r in recipes for p in get_recipe(r).patches if p.name == name)
    return patch.model_copy(update=update)


def run(step: str, tmp_path) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python3"
    if not python.exists():
        python.symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path)}
    return subprocess.run(["bash", "-c", step], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def fake_fused_moe(tmp_path):
    package = tmp_path / "fakeinference"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "fused_moe_gmm.py"
    module.write_text("def fused_moe(x,\n    onehot_moe_permute_threshold: int = 0,\n):\n    pass\n")
    return module


def test_module_patch_rewrites_the_module_source_and_is_idempotent(tmp_path, fake_fused_moe):
    step = render_patch(patch_named("fused-moe-onehot-threshold", module="fakeinference.fused_moe_gmm"))
    first = run(step, tmp_path)
    assert first.returncode == 0, first.stderr
    assert fake_fused_moe.read_text() == ("def fused_moe(x,\n    onehot_moe_permute_threshold: int = 100000,\n"
                                          "):\n    pass\n")
    again = run(step, tmp_path)  # a restarted container patches an already patched file
    assert again.returncode == 0, again.stderr


def test_regex_patch_swaps_adamw_for_adafactor(tmp_path):
    utils = tmp_path / "utils_rl.py"
    utils.write_text("opt = optax.adamw(learning_rate=lr, b1=0.9, weight_decay=0.1)\n")
    result = run(render_patch(patch_named("rl-optimizer-adafactor", path=str(utils))), tmp_path)
    assert result.returncode == 0, result.stderr
    assert utils.read_text() == "opt = optax.adafactor(learning_rate=learning_rate)\n"


def test_a_patch_whose_text_is_missing_fails_the_step_and_names_itself(tmp_path):
    other = tmp_path / "other.py"
    other.write_text("nothing to see\n")
    result = run(render_patch(patch_named("rl-optimizer-adafactor", path=str(other))), tmp_path)
    assert result.returncode != 0
    assert "patch rl-optimizer-adafactor" in result.stderr
