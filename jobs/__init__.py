"""Pure functions from a run (recipes/runs/spec.py RunSpec) and settings to what runs: JobSets (GKE) or a
startup script (VM). No I/O.

Public API (the CLI and the docs use these names):

- ``render_manifests(spec, settings, export_step=None) -> {"convert": JobSet, "train": JobSet, "export":
  JobSet}`` for GKE recipes, in step order (dicts ready for yaml.safe_dump or the Kubernetes client);
  export converts checkpoint ``export_step`` (default: the computed last step, an upper bound).
- ``render_startup_script(spec, settings) -> str``: the bash startup script of a VM recipe.
- ``render_steps(spec, settings) -> {name: JobSet or text}``: what runs the run's steps, by the renderer
  RENDERERS keys by the recipe's platform fact ``steps_run_as`` (recipes/platforms/): the JobSets by step,
  or ``{"startup script": text}``. A platform whose steps run some other way adds its renderer there.
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

A recipe whose steps run another way (a VM recipe to render_manifests or a GKE recipe to
render_startup_script) raises recipes.UserError.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from tpu_rl.jobs.convert import convert_jobset
from tpu_rl.jobs.export import export_jobset
from tpu_rl.jobs.k8s import MAIN_CONTAINER, jobset_name, main_pod_selector, main_replicated_job, manifest_yaml
from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.train import train_jobset, user_files_configmap
from tpu_rl.jobs.vm import render_startup_script
from tpu_rl.recipes import Settings, Step, UserError
from tpu_rl.recipes.platforms import StepRunner, registered
from tpu_rl.recipes.runs.spec import RunSpec


def render_manifests(spec: RunSpec, settings: Settings, export_step: int | None = None) -> dict[Step, dict[str, Any]]:
    """The three JobSets; export converts checkpoint `export_step` (None: the computed last step, an upper
    bound; `run` passes the newest finished step it read from the bucket)."""
    recipe = spec.recipe
    if recipe.platform_facts.steps_run_as != StepRunner.JOBSETS:
        raise UserError(f"recipe '{recipe.name}' runs its steps as a {recipe.platform_facts.steps_run_as}, not "
                        "JobSets; render them with render_steps (`tpu-rl render` does)")
    if not recipe.pathways:
        raise UserError(f"recipe '{recipe.name}': GKE recipes train with Pathways; set pathways = true")
    paths = ArtifactPaths(spec, settings, export_step)
    return {"convert": convert_jobset(paths), "train": train_jobset(paths), "export": export_jobset(paths)}


def _startup_script(spec: RunSpec, settings: Settings) -> dict[str, str]:
    return {"startup script": render_startup_script(spec, settings)}


# What a renderer writes: the JobSets by step, or {"startup script": text}.
Rendered = Mapping[Step, dict[str, Any]] | Mapping[str, str]
# What runs a run's steps (the platform fact steps_run_as) -> its renderer: one row per way, not per platform.
RENDERERS: Mapping[StepRunner, Callable[[RunSpec, Settings], Rendered]] = {
    StepRunner.JOBSETS: render_manifests,
    StepRunner.STARTUP_SCRIPT: _startup_script,
}


def render_steps(spec: RunSpec, settings: Settings) -> Rendered:
    """What runs the run's steps, by name: the JobSets by step, or {"startup script": text}."""
    render = registered(RENDERERS, spec.recipe.platform_facts.steps_run_as, "RENDERERS of jobs/__init__.py",
                        "a way of running steps")
    return render(spec, settings)


__all__ = [
    "MAIN_CONTAINER",
    "ArtifactPaths",
    "MaxTextCommand",
    "jobset_name",
    "main_pod_selector",
    "main_replicated_job",
    "manifest_yaml",
    "maxtext_commands",
    "RENDERERS",
    "render_manifests",
    "render_startup_script",
    "render_steps",
    "user_files_configmap",
]
