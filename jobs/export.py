"""The `export` JobSet: the last RL checkpoint -> Hugging Face safetensors, one pod on the CPU pool."""

from __future__ import annotations

from typing import Any

from jobs.k8s import bash_script, cpu_step_jobset
from jobs.maxtext import export_command
from jobs.paths import ArtifactPaths


def export_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    command = export_command(paths.recipe, paths)
    script = bash_script(f"# reads {paths.final_params}, writes {paths.hf_export}\nexec {command.shell()}")
    return cpu_step_jobset(paths.recipe, "export", script)
