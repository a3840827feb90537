"""The run's driver on GKE (issue 27): one batch/v1 Job per run that runs `tpu-rl drive`, the same pipeline
code `tpu-rl run` ran in the user's terminal, and the ConfigMap that holds what it was asked to do.

Pure: the attaching `run` builds both and creates them (scripts/pipeline/gke/attach.py). The request is
mounted as files, so the driver needs no permission to read ConfigMaps; the settings it needs are plain
env vars under their usual names (recipes/settings/specs.py). No secret goes in either: the driver never
reads the Hugging Face token, which `run` copies into the cluster before it creates the driver.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

from tpu_rl.jobs.driver_runtime import (DRIVER_CONTAINER, DriverRuntime, driver_container, driver_node_selector,
                                        driver_pod_annotations, driver_volumes)
from tpu_rl.jobs.k8s import RUN_LABEL, TTL_SECONDS_AFTER_FINISHED, run_labels
from tpu_rl.recipes import Settings, Step
from tpu_rl.recipes.conventions import DRIVER_KSA, NAMESPACE, on_system_pool
from tpu_rl.recipes.outcome import DRIVER_BACKOFF_LIMIT, DRIVER_RETRY, RUN_DECIDED
from tpu_rl.recipes.runs.spec import RunSpec, run_name
from tpu_rl.recipes.settings.specs import BY_FIELD, MissingSettings


def exit_code_values(codes: Iterable[int]) -> tuple[int, ...]:
    """A podFailurePolicy's onExitCodes values: the API accepts them only sorted and unique (batch/v1
    PodFailurePolicyOnExitCodesRequirement.values), whatever order the codes are declared in."""
    return tuple(sorted({int(code) for code in codes}))


DRIVER_PREFIX = "tpu-rl-driver-"
COMPONENT_LABEL = "tpu-rl/component"  # "driver": what `status` and `cancel` select the run's driver by
REQUEST_ANNOTATION = "tpu-rl/request-sha256"  # what it was asked to do: a second `run` compares it
REQUEST_DIR = "/etc/tpu-rl/request"
REQUEST_FILE = "request.json"
REQUEST_VOLUME = "tpu-rl-request"
# The endings the run itself decided fail the Job at once, never run again; every other ending of `drive`
# exits RETRY_EXIT_CODE, which counts toward backoffLimit, as do a SIGKILL (137) and an OOM kill. Both come
# from recipes/outcome.py, the one home of the codes; the install script retries the same way.
OUTCOME_EXIT_CODES = exit_code_values(RUN_DECIDED)
RETRY_EXIT_CODE = DRIVER_RETRY
# The driver ends within seconds of SIGTERM (scripts/cli/drive.py); past this the kubelet kills it.
DRIVER_GRACE_SECONDS = 15
# The settings the driver reads (the non-secret ones `run` needs, and the capacity choices).
DRIVER_SETTINGS = ("project", "region", "zone", "cluster_name", "gcs_bucket", "reservation", "hf_token_secret",
                   "capacity", "capacity_wait")


def driver_name(spec: RunSpec) -> str:
    """tpu-rl-driver-<run>: one driver per run (run names fit it, recipes/runs/identity.py)."""
    return DRIVER_PREFIX + run_name(spec)


def request_configmap_name(spec: RunSpec, digest: str) -> str:
    """Named by its request's digest: two `run`s of different requests never write one ConfigMap, so a
    driver always mounts its own request."""
    return f"{driver_name(spec)}-request-{digest[:12]}"


def driver_labels(spec: RunSpec) -> dict[str, str]:
    """run_labels (what `down` and `runs` select by, jobs/k8s.py recipe_selector) and its component."""
    return {**run_labels(spec), COMPONENT_LABEL: "driver", "app.kubernetes.io/managed-by": "tpu-rl"}


def driver_selector(spec: RunSpec) -> str:
    return f"{RUN_LABEL}={run_name(spec)},{COMPONENT_LABEL}=driver"


def run_request(spec: RunSpec, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
                version: str) -> dict[str, Any]:
    """What the driver is asked to do: `tpu-rl run`'s request as data (recipes/runs/user_files.py for the files,
    whose contents go in the ConfigMap beside it)."""
    return {"recipe": spec.recipe.name, "steps": list(steps), "sets": list(spec.sets), "run": spec.run,
            "sweep": spec.sweep, "fit": spec.fit,
            "replace": replace, "follow_logs": follow_logs,
            "user_files": [{"kind": f.kind, "name": f.name, "functions": list(f.functions), "source": f.source,
                            "unchecked": f.unchecked} for f in spec.user_files],
            "version": version}


# Request keys that only say how this `run` meets what it finds, or who asked: not what the run does (nor
# the sweep that started it: a later `run --run NAME` of a sweep's run attaches to its driver; nor the
# compiler's verdict, which the same run always gets; nor the consent the `run` that made it was given).
HOW_ASKED = ("replace", "follow_logs", "version", "command", "sweep", "fit", "consent")


def request_digest(request: Mapping[str, Any], files: Mapping[str, str], env: Mapping[str, str]) -> str:
    """The identity of a request: what the run does, with the settings the driver is given (`env`, as
    settings_env: another CAPACITY or zone is another request)."""
    same = {key: value for key, value in request.items() if key not in HOW_ASKED}
    return hashlib.sha256(json.dumps([same, dict(files), dict(env)], sort_keys=True).encode()).hexdigest()


def request_configmap(spec: RunSpec, request: Mapping[str, Any], digest: str,
                      job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request and the run's user files, as the driver's pod mounts them under REQUEST_DIR; owned by
    the driver's `job` once it exists, so that it goes with it (garbage collection of dependents)."""
    data = {REQUEST_FILE: json.dumps(request, indent=1, sort_keys=True)}
    data.update({f.name: f.content for f in spec.user_files})
    metadata: dict[str, Any] = {"name": request_configmap_name(spec, digest), "namespace": NAMESPACE,
                                "labels": driver_labels(spec)}
    if job is not None:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                        "uid": job["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings the driver reads, as the env vars a user sets (recipes/settings/specs.py)."""
    values: dict[str, str] = {}
    for field in DRIVER_SETTINGS:
        try:
            value = getattr(settings, field)
        except MissingSettings:  # a setting the user's command did not need and nobody set
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


def driver_job(spec: RunSpec, settings: Settings, runtime: DriverRuntime, request: Mapping[str, Any],
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
                                          "configMap": {"name": request_configmap_name(spec, digest)}}]
    labels = driver_labels(spec)
    pod = {
        # the runtime's version (read by an attaching CLI) and what the pod needs to mount its files
        "metadata": {"labels": labels, "annotations": driver_pod_annotations(runtime)},
        "spec": {
            "serviceAccountName": DRIVER_KSA,  # Workload Identity for the bucket; its Role for the cluster
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": DRIVER_GRACE_SECONDS,
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
        "metadata": {"name": driver_name(spec), "namespace": NAMESPACE, "labels": labels,
                     "annotations": {REQUEST_ANNOTATION: digest}},
        "spec": {
            "backoffLimit": DRIVER_BACKOFF_LIMIT,
            # No activeDeadlineSeconds: it counts across retries and a sweep's Kueue queue, and ending the
            # driver would leave its JobSets unwatched. The driver's own per-step bounds bound spending.
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
