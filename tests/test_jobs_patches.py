"""The rendered source patches really edit the source, are idempotent, and fail loudly on a mismatch:
with the `tpu-rl check failed:` line and the exit code on which the restartable train JobSet fails at once
(a retry runs the same image, so it cannot find the text either)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.jobs.patches import render_patch
from tpu_rl.recipes import SourcePatch, example_settings, get_recipe


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


def fail_at_once_exit_codes(recipe_name: str) -> list[int]:
    """The exit codes of the train head's workload container on which its Job fails with reason
    PodFailurePolicy, which the JobSet's first failure rule turns into FailJobSet (no restart): read off
    the rendered manifest on spot capacity, where the JobSet restarts on any other failure."""
    recipe = get_recipe(recipe_name).with_capacity(("spot",), "CAPACITY")
    train = jobs.render_manifests(spec_of(recipe), example_settings())["train"]
    assert train["spec"]["failurePolicy"]["rules"][0] == {
        "name": "headCheckFailed", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
        "targetReplicatedJobs": ["pathways-head"]}
    head = next(rj for rj in train["spec"]["replicatedJobs"] if rj["name"] == "pathways-head")
    (rule,) = head["template"]["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["containerName"] == "workload-container"
    assert rule["onExitCodes"]["operator"] == "In"
    return rule["onExitCodes"]["values"]


def check_failure(stderr: str) -> str:
    """The reason on the step's last line, which must be the one `tpu-rl run` reports (the text after
    tpu_rl.recipes.conventions.CHECK_FAILED_PREFIX)."""
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("tpu-rl check failed: "), stderr
    return last.removeprefix("tpu-rl check failed: ")


# The anchor of the adafactor patch is MaxText's `optax.adamw(...)` call in utils_rl.get_optimizer; a
# MaxText release that renames or reformats it leaves the file without the text (here: the same function
# calling another optimizer).
WITHOUT_THE_ADAMW_CALL = "def get_optimizer(tmvp_config, learning_rate):\n    return optax.sgd(learning_rate)\n"


def test_a_patch_whose_text_is_missing_fails_the_train_jobset_at_once_and_names_itself(tmp_path):
    utils = tmp_path / "utils_rl.py"
    utils.write_text(WITHOUT_THE_ADAMW_CALL)
    result = run(render_patch(patch_named("rl-optimizer-adafactor", path=str(utils))), tmp_path)
    assert result.returncode in fail_at_once_exit_codes("qwen3-v6e32"), result.stderr
    assert check_failure(result.stderr) == f"patch rl-optimizer-adafactor: 'optax[.]adamw[(][^)]+[)]' not found in {utils}"
    assert utils.read_text() == WITHOUT_THE_ADAMW_CALL  # nothing half-patched


def test_a_module_patch_whose_anchor_is_gone_fails_the_train_jobset_at_once(tmp_path, fake_fused_moe):
    fake_fused_moe.write_text("def fused_moe(x,\n    onehot_moe_permute_threshold: bool = False,\n):\n    pass\n")
    result = run(render_patch(patch_named("fused-moe-onehot-threshold", module="fakeinference.fused_moe_gmm")),
                 tmp_path)
    assert result.returncode in fail_at_once_exit_codes("gemma4-v6e64"), result.stderr
    assert check_failure(result.stderr).startswith("patch fused-moe-onehot-threshold: ")


@pytest.mark.parametrize("update", [{"module": "fakeinference.not_there"}, {"module": "nopackage.fused_moe_gmm"}],
                         ids=["module", "package"])
def test_a_patch_of_a_module_the_image_lacks_fails_the_train_jobset_at_once(tmp_path, fake_fused_moe, update):
    result = run(render_patch(patch_named("fused-moe-onehot-threshold", **update)), tmp_path)
    assert result.returncode in fail_at_once_exit_codes("gemma4-v6e64"), result.stderr
    assert check_failure(result.stderr) == (f"patch fused-moe-onehot-threshold: module {update['module']} is not "
                                            "installed in this image")


def test_a_patch_of_a_file_the_image_lacks_fails_the_train_jobset_at_once(tmp_path):
    missing = tmp_path / "trainers" / "utils_rl.py"
    result = run(render_patch(patch_named("rl-optimizer-adafactor", path=str(missing))), tmp_path)
    assert result.returncode in fail_at_once_exit_codes("qwen3-v6e32"), result.stderr
    assert check_failure(result.stderr) == f"patch rl-optimizer-adafactor: {missing} does not exist in this image"
