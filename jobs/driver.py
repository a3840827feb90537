"""The run's driver on GKE (issue 27): one batch/v1 Job per run that runs `tpu-rl drive`, the same pipeline
code `tpu-rl run` ran in the user's terminal, and the ConfigMap that holds what it was asked to do.

Pure: the attaching `run` builds both and creates them (scripts/pipeline/gke/attach.py). The request is
mounted as files, so the driver needs no permission to read ConfigMaps; the settings it needs are plain
env vars under their usual names (recipes/setting_specs.py). No secret goes in either: the driver never
reads the Hugging Face token, which `run` copies into the cluster before it creates the driver.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from jobs.driver_runtime import (DRIVER_CONTAINER, DriverRuntime, driver_container, driver_node_selector,
                                 driver_pod_annotations, driver_volumes)
from jobs.k8s import RUN_LABEL, TTL_SECONDS_AFTER_FINISHED, run_labels
from recipes import Recipe, Settings, Step
from recipes.capacity_modes import CPU, READY_WAIT_SECONDS
from recipes.conventions import DRIVER_KSA, NAMESPACE, on_system_pool
from recipes.runs import run_name
from recipes.setting_specs import BY_FIELD

DRIVER_PREFIX = "tpu-rl-driver-"
COMPONENT_LABEL = "tpu-rl/component"  # "driver": what `status` and `cancel` select the run's driver by
REQUEST_ANNOTATION = "tpu-rl/request-sha256"  # what it was asked to do: a second `run` compares it
REQUEST_DIR = "/etc/tpu-rl/request"
REQUEST_FILE = "request.json"
REQUEST_VOLUME = "tpu-rl-request"
# Failures of the driver process itself that the Job retries (an eviction or a node upgrade does not
# count, podFailurePolicy below); it resumes from run.json and the cluster's state.
DRIVER_BACKOFF_LIMIT = 3
# The exit codes of a run that ended with its outcome (scripts/outcome.py ExitCode): the Job fails at
# once, never runs the pipeline again. Any other (OOMKilled 137, a crash) is retried.
OUTCOME_EXIT_CODES = (1, 2, 3, 4, 5, 130)
# How much longer than the recipe's expected step times a driver may live: our choice, covering a train
# step that runs three times slower than measured before the stall bounds (scripts/pipeline/stall.py) end it.
STEP_TIME_FACTOR = 3
# The settings the driver reads (the non-secret ones `run` needs, and the capacity choices).
DRIVER_SETTINGS = ("project", "region", "zone", "cluster_name", "gcs_bucket", "reservation", "hf_token_secret",
                   "capacity", "capacity_wait")


def driver_name(recipe: Recipe) -> str:
    """tpu-rl-driver-<run>: one driver per run (run names fit it, recipes/runs.py)."""
    return DRIVER_PREFIX + run_name(recipe)


def request_configmap_name(recipe: Recipe) -> str:
    return f"{driver_name(recipe)}-request"


def driver_labels(recipe: Recipe) -> dict[str, str]:
    """run_labels (what `down` and `runs` select by, jobs/k8s.py recipe_selector) and its component."""
    return {**run_labels(recipe), COMPONENT_LABEL: "driver", "app.kubernetes.io/managed-by": "tpu-rl"}


def driver_selector(recipe: Recipe) -> str:
    return f"{RUN_LABEL}={run_name(recipe)},{COMPONENT_LABEL}=driver"


def run_request(recipe: Recipe, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
                version: str) -> dict[str, Any]:
    """What the driver is asked to do: `tpu-rl run`'s request as data (recipes/user_files.py for the files,
    whose contents go in the ConfigMap beside it)."""
    return {"recipe": recipe.name, "steps": list(steps), "sets": list(recipe.sets), "run": recipe.run,
            "sweep": recipe.sweep,
            "replace": replace, "follow_logs": follow_logs,
            "user_files": [{"kind": f.kind, "name": f.name, "functions": list(f.functions), "source": f.source,
                            "unchecked": f.unchecked} for f in recipe.user_files],
            "version": version}


def request_digest(request: Mapping[str, Any], files: Mapping[str, str]) -> str:
    """The identity of a request: what the run does (not --replace or --follow-logs, which only say how
    this `run` meets what it finds, nor the CLI's version, nor the sweep that started it: a later `run
    --run NAME` of a sweep's run attaches to its driver)."""
    same = {key: value for key, value in request.items()
            if key not in ("replace", "follow_logs", "version", "sweep")}
    return hashlib.sha256(json.dumps([same, dict(files)], sort_keys=True).encode()).hexdigest()


def request_configmap(recipe: Recipe, request: Mapping[str, Any]) -> dict[str, Any]:
    """The request and the run's user files, as the driver's pod mounts them under REQUEST_DIR."""
    data = {REQUEST_FILE: json.dumps(request, indent=1, sort_keys=True)}
    data.update({f.name: f.content for f in recipe.user_files})
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": request_configmap_name(recipe), "namespace": NAMESPACE,
                         "labels": driver_labels(recipe)},
            "data": data}


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings the driver reads, as the env vars a user sets (recipes/setting_specs.py)."""
    values: dict[str, str] = {}
    for field in DRIVER_SETTINGS:
        try:
            value = getattr(settings, field)
        except Exception:  # a setting the user's command did not need and nobody set
            continue
        if field == "zone":
            value = ",".join(settings.zones)
        elif field == "capacity" and value:
            value = ",".join(value)
        elif field == "capacity_wait":
            value = ",".join(f"{key}={int(seconds) if seconds == int(seconds) else seconds}s" for key, seconds in value)
        if value:
            values[BY_FIELD[field].env] = str(value)
    return values


def deadline_seconds(recipe: Recipe, settings: Settings) -> int:
    """How long the driver may live (activeDeadlineSeconds): each step's expected time STEP_TIME_FACTOR
    times, every capacity wait of every mode in every zone, the CPU pool's wait and the start bound of each
    step. Past it Kubernetes ends the driver; what it submitted keeps its own bounds (JobSet TTL)."""
    from recipes.run_time import train_time

    waits = dict(settings.capacity_wait)
    durations = recipe.durations_minutes
    minutes = durations.convert + train_time(recipe).minutes + durations.export
    capacity = sum(waits[mode] for mode in recipe.capacity) * len(settings.zones_for(recipe))
    steps = 3
    return int(minutes * 60 * STEP_TIME_FACTOR + capacity + steps * (waits[CPU] + READY_WAIT_SECONDS))


def driver_job(recipe: Recipe, settings: Settings, runtime: DriverRuntime, request: Mapping[str, Any],
               digest: str) -> dict[str, Any]:
    """The driver's Job. Never two driver pods at once (podReplacementPolicy Failed); an eviction or a node
    upgrade (DisruptionTarget) replaces the pod without counting as a failure (podFailurePolicy, Kubernetes
    1.31+ GA: kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy)."""
    args = ["drive", "--request", f"{REQUEST_DIR}/{REQUEST_FILE}"]
    container = driver_container(runtime, args)  # the image, its install, resources and security context
    container["env"] = [*container.get("env", []),
                        *({"name": name, "value": value} for name, value in settings_env(settings).items())]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": REQUEST_VOLUME, "mountPath": REQUEST_DIR, "readOnly": True}]
    volumes = [*driver_volumes(runtime), {"name": REQUEST_VOLUME,
                                          "configMap": {"name": request_configmap_name(recipe)}}]
    labels = driver_labels(recipe)
    pod = {
        # the runtime's version (read by an attaching CLI) and what the pod needs to mount its files
        "metadata": {"labels": labels, "annotations": driver_pod_annotations(runtime)},
        "spec": {
            "serviceAccountName": DRIVER_KSA,  # Workload Identity for the bucket; its Role for the cluster
            "restartPolicy": "Never",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            # the always-on system node, never the CPU pool: a 250m pod there would keep a 64-vCPU node up
            # through hours of capacity waits (docs/pipeline.md#the-runs-driver-gke)
            "nodeSelector": {**on_system_pool(), **driver_node_selector(runtime)},
            "containers": [container],
            "volumes": volumes,
        },
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": driver_name(recipe), "namespace": NAMESPACE, "labels": labels,
                     "annotations": {REQUEST_ANNOTATION: digest}},
        "spec": {
            "backoffLimit": DRIVER_BACKOFF_LIMIT,
            "activeDeadlineSeconds": deadline_seconds(recipe, settings),
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob", "onExitCodes": {"containerName": DRIVER_CONTAINER, "operator": "In",
                                                      "values": list(OUTCOME_EXIT_CODES)}},
            ]},
            "template": pod,
        },
    }
