"""Pure functions from a run (recipes/runs/spec.py RunSpec) and settings to what runs: JobSets (GKE) or a
startup script (VM). No I/O.

Public API (the CLI and the docs use these names):

- ``render_manifests(spec, settings, export_step=None) -> {"convert": JobSet, "train": JobSet, "export":
  JobSet}`` for GKE recipes, in step order (dicts ready for yaml.safe_dump or the Kubernetes client);
  export converts checkpoint ``export_step`` (default: the computed last step, an upper bound).
- ``render_startup_script(spec, settings) -> str``: the bash startup script of a VM recipe.
- ``jobset_name(spec, step)``: ``<run>-<step>`` for train and export, ``<recipe>-<hash>-convert`` for the
  conversion runs share (recipes/runs/identity.py), at most 28 characters.
- ``main_pod_selector(spec, step)``: label selector of the pod that runs the step's MaxText command,
  e.g. ``jobset.sigs.k8s.io/jobset-name=<run>-train,jobset.sigs.k8s.io/replicatedjob-name=pathways-head``.
- ``main_replicated_job(recipe, step)``: ``pathways-head`` for Pathways training, ``main`` otherwise.
- ``MAIN_CONTAINER``: ``workload-container``, the container to stream logs from in every step.
- ``user_files_configmap(paths)``: the ConfigMap of the run's --rewards/--data-processor files (None without
  them), as `run` creates it and `render` writes it.
- ``manifest_yaml(manifest)``: YAML for people (key order kept, scripts as literal blocks, no anchors).
- ``maxtext_commands(recipe, paths)``: the three MaxText commands as data (module, overrides, flags).
- ``ArtifactPaths``: every gs:// path a step reads or writes (jobs/paths.py).

Wrong platform (a VM recipe to render_manifests or a GKE recipe to render_startup_script) raises
recipes.UserError.
"""

from __future__ import annotations

from typing import Any

from tpu_rl.jobs.convert import convert_jobset
from tpu_rl.jobs.export import export_jobset
from tpu_rl.jobs.k8s import MAIN_CONTAINER, jobset_name, main_pod_selector, main_replicated_job, manifest_yaml
from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.train import train_jobset, user_files_configmap
from tpu_rl.jobs.vm import render_startup_script
from tpu_rl.recipes import Settings, Step, UserError
from tpu_rl.recipes.runs.spec import RunSpec


def render_manifests(spec: RunSpec, settings: Settings, export_step: int | None = None) -> dict[Step, dict[str, Any]]:
    """The three JobSets; export converts checkpoint `export_step` (None: the computed last step, an upper
    bound; `run` passes the newest finished step it read from the bucket)."""
    recipe = spec.recipe
    if not recipe.platform_rules.jobsets:
        raise UserError(
            f"recipe '{recipe.name}' runs on a TPU VM; render its startup script with render_startup_script "
            "(`tpu-rl render` does)"
        )
    if not recipe.pathways:
        raise UserError(f"recipe '{recipe.name}': GKE recipes train with Pathways; set pathways = true")
    paths = ArtifactPaths(spec, settings, export_step)
    return {"convert": convert_jobset(paths), "train": train_jobset(paths), "export": export_jobset(paths)}


__all__ = [
    "MAIN_CONTAINER",
    "ArtifactPaths",
    "MaxTextCommand",
    "jobset_name",
    "main_pod_selector",
    "main_replicated_job",
    "manifest_yaml",
    "maxtext_commands",
    "render_manifests",
    "render_startup_script",
    "user_files_configmap",
]
