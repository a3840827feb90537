"""The `convert` JobSet: Hugging Face -> MaxText checkpoint, one pod on the CPU pool (never on TPU)."""

from __future__ import annotations

from typing import Any

from tpu_rl.jobs.checks import jax_pairing_check
from tpu_rl.jobs.k8s import bash_script, cpu_step_jobset
from tpu_rl.jobs.maxtext import convert_command
from tpu_rl.jobs.paths import ArtifactPaths


def convert_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    command = convert_command(recipe, paths)
    # The first step runs in the training image on the CPU pool: checking the JAX/Pathways pairing here
    # finds a mismatch before train requests a slice.
    checks = [jax_pairing_check(recipe)] if recipe.pathways else []
    script = bash_script(*checks, f"# writes {paths.converted_items}\nexec {command.shell()}")
    return cpu_step_jobset(paths.spec, "convert", script)
