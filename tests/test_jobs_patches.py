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
def fake_tunix(tmp_path):
    package = tmp_path / "faketunix"
    package.mkdir()
    (package / "__init__.py").write_text("")
    sampler = package / "vllm_sampler.py"
    sampler.write_text("def f(reshard_chunk_size: Optional[int] = None):\n"
                       "    return g(reshard_chunk_size=self.config.reshard_chunk_size)\n")
    return sampler


def test_module_patch_rewrites_the_module_source_and_is_idempotent(tmp_path, fake_tunix):
    step = render_patch(patch_named("tunix-reshard-chunk-size", module="faketunix.vllm_sampler"))
    first = run(step, tmp_path)
    assert first.returncode == 0, first.stderr
    assert fake_tunix.read_text() == ("def f(reshard_chunk_size: Optional[int] = 4):\n"
                                      "    return g(reshard_chunk_size=4)\n")
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
