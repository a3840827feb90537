"""The `convert` JobSet: Hugging Face -> MaxText checkpoint, one pod on the CPU pool (never on TPU)."""

from __future__ import annotations

from typing import Any

from jobs.k8s import bash_script, cpu_step_jobset
from jobs.maxtext import convert_command
from jobs.paths import ArtifactPaths


def convert_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    command = convert_command(paths.recipe, paths)
    script = bash_script(f"# writes {paths.converted_items}\nexec {command.shell()}")
    return cpu_step_jobset(paths.recipe, "convert", script)
