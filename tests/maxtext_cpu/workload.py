"""What the train probe (run.py probe) takes from the real workload besides its command line.

Runs in the project's venv (it reads the package); the probe runs in the MaxText venv and receives these
as environment variables:

- PROBE_TUNIX_COMMIT: the tunix commit the release's image installs (the wheel's
  dependencies/extra_deps/post_train_github_deps.txt), which decides how the actor is saved: the CPU venv
  has tunix's PyPI release instead (tools/generate_maxtext_constraints.py NEAREST_RELEASE);
- PROBE_WORKLOAD_ENV: the train container's environment variables that decide the checkpoint layout,
  JAX_PLATFORMS and ENABLE_PATHWAYS_PERSISTENCE (read by tunix's CheckpointManager when it is built:
  google/tunix 683256db = PyPI 0.1.7 tunix/sft/checkpoint_manager.py L53 and L63; c4ec573d L115-116; and
  by orbax: orbax-checkpoint 0.12.2 _src/multihost/multihost.py is_cloud_pathways_persistence_enabled);
- PROBE_PATCHES: the recipe's rendered source patches of MaxText's own files (tpu_rl.jobs.patches.render_patch),
  with the image's source root /deps/src/ moved to a scratch copy, which the probe fills from the wheel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tpu_rl.jobs.patches import IMAGE_SOURCE_ROOT, render_patch, resolve_patches
from tpu_rl.jobs.train import workload_env
from tpu_rl.jobs.vm import tpu_env
from tpu_rl.recipes import Recipe

REPO = Path(__file__).resolve().parents[2]
# The names tunix and orbax read when the checkpointer is built (see the module docstring).
LAYOUT_ENV = ("JAX_PLATFORMS", "ENABLE_PATHWAYS_PERSISTENCE")


def tunix_commit(version: str) -> str:
    """The tunix commit MaxText `version`'s image installs, read from the wheel."""
    sys.path.insert(0, str(REPO / "tools"))
    from generate_maxtext_constraints import github_commits  # noqa: PLC0415
    from contracts.maxtext_schema import fetch_wheel  # noqa: PLC0415

    wheel, reason = fetch_wheel(version)
    if wheel is None:
        raise AssertionError(reason)
    return github_commits(wheel)["google-tunix"]


def layout_env(recipe: Recipe) -> dict[str, str]:
    """JAX_PLATFORMS and ENABLE_PATHWAYS_PERSISTENCE as the recipe's train process has them (unset: absent)."""
    if recipe.platform == "gke":
        values = {item["name"]: item["value"] for item in workload_env(recipe) if "value" in item}
    else:  # the VM's startup script exports these before train_rl (jobs/vm.py render_startup_script)
        values = {**tpu_env(recipe), **recipe.rl.env, **resolve_patches(recipe).env}
    return {name: values[name] for name in LAYOUT_ENV if name in values}


def source_patches(recipe: Recipe, scratch: Path) -> list[dict[str, str]]:
    """The recipe's patches of MaxText's own source files, each {"root": scratch, "file": its path under
    the source root,
    "script": the rendered step with the source root moved to `scratch`}. A patch of another module
    (tpu_inference) is not installed on a CPU, so it is not here."""
    out = []
    for patch in resolve_patches(recipe).apply:
        if not (patch.path or "").startswith(IMAGE_SOURCE_ROOT):
            continue
        script = render_patch(patch).replace(IMAGE_SOURCE_ROOT, f"{scratch}/")
        out.append({"root": str(scratch), "file": patch.path.removeprefix(IMAGE_SOURCE_ROOT), "script": script})
    return out


def compares_forward(tiny: Path) -> bool:
    """Whether the probe compares MaxText's forward pass with transformers' (run.py
    forward_against_transformers): for dense models only. With the tiny MoE models the routed experts'
    output on a CPU has the expert MLP's width instead of the model's (qwen3-30b-a3b: (16, 12, 32) added
    to (16, 12, 64) at maxtext/models/qwen3.py L1656; gemma4-26b: post_feedforward_layernorm_2 at
    models/gemma4.py L145 gets width 32, 0.2.4), in MoE.sparse_matmul, whose megablox kernel is
    interpreted off TPU (maxtext/layers/moe.py L1517-1563). Not diagnosed further: the real runs use the
    TPU kernel, and the probe's load and save do not run the forward pass."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tiny import has_experts, recorded_sizes  # noqa: PLC0415

    return not has_experts(recorded_sizes(tiny))


def probe_env(recipe: Recipe, tiny: Path, scratch: Path) -> dict[str, str]:
    return {"PROBE_FORWARD": "1" if compares_forward(tiny) else "0",
            "PROBE_TUNIX_COMMIT": tunix_commit(recipe.maxtext_version),
            "PROBE_WORKLOAD_ENV": json.dumps(layout_env(recipe)),
            "PROBE_PATCHES": json.dumps(source_patches(recipe, scratch))}
