"""Shared Kubernetes pieces of the three JobSets: names, labels, env, containers, pods, the JobSet shell.

Everything here is a small pure function returning plain dicts, so the builders in convert.py, train.py
and export.py read like the manifest they produce.
"""

from __future__ import annotations

from typing import Any, Mapping

import yaml

from tpu_rl.recipes import Recipe, Step, UserError
from tpu_rl.recipes.conventions import (
    CAPACITY_NODE_LABEL,
    ZONE_NODE_LABEL,
    HF_TOKEN_ENV,
    HF_TOKEN_K8S_SECRET,
    JOBSET_NAME_LABEL,
    LOCAL_QUEUE,
    MAX_JOBSET_NAME,
    NAMESPACE,
    NODE_POOL_LABEL,
    REPLICATED_JOB_LABEL,
    TPU_RESOURCE,
    WORKLOAD_KSA,
    cpu_pool_name,
    cpu_pool_toleration,
)
from tpu_rl.recipes.runs.identity import conversion_key, digest
from tpu_rl.recipes.runs.spec import RunSpec, run_name

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
MAIN_CONTAINER = "workload-container"
TTL_SECONDS_AFTER_FINISHED = 24 * 3600  # as the seeds (--gke-ttl-after-finished=24h); finished sets do not pile up
MAX_RESTARTS = 0  # as seed 000 (--restarts=0): a failed step is re-run by `tpu-rl run`, which resumes

COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
RECIPE_LABEL = "tpu-rl/recipe"
STEP_LABEL = "tpu-rl/step"
RUN_LABEL = "tpu-rl/run"  # train and export of one run: kubectl get jobsets -l tpu-rl/run=<run>
CONVERSION_LABEL = "tpu-rl/conversion"  # convert, shared by the runs of one conversion identity
# sha256 of the JobSet's spec as tpu-rl submitted it. The cluster adds defaults to the stored spec (and
# Kueue toggles spec.suspend), so `tpu-rl run` compares this to tell a JobSet it would submit the same way
# from one whose spec changed.
SPEC_DIGEST_ANNOTATION = "tpu-rl/spec-sha256"

CPU_REPLICATED_JOB = "main"
PATHWAYS_HEAD = "pathways-head"


def _owner(spec: RunSpec, step: Step) -> tuple[str, str]:
    """(label, value) of what a step's JobSet belongs to: the shared conversion for convert, else the run."""
    return (CONVERSION_LABEL, conversion_key(spec.recipe)) if step == "convert" else (RUN_LABEL, run_name(spec))


def jobset_name(spec: RunSpec, step: Step) -> str:
    """<run>-<step> for train and export, <recipe>-<conversion hash>-convert for the shared convert; the
    run-name rule (recipes/runs/identity.py) keeps both within MAX_JOBSET_NAME."""
    name = f"{_owner(spec, step)[1]}-{step}"
    if len(name) > MAX_JOBSET_NAME:
        raise UserError(
            f"JobSet name '{name}' has {len(name)} characters; the limit is {MAX_JOBSET_NAME} "
            "(pod names must fit 63): choose a shorter --run name"
        )
    return name


def main_replicated_job(recipe: Recipe, step: Step) -> str:
    """The replicated job whose pod runs the MaxText command of a step."""
    return PATHWAYS_HEAD if step == "train" and recipe.pathways else CPU_REPLICATED_JOB


def main_pod_selector(spec: RunSpec, step: Step) -> str:
    """kubectl-style label selector of the pod that runs a step's MaxText command."""
    return (f"{JOBSET_NAME_LABEL}={jobset_name(spec, step)},"
            f"{REPLICATED_JOB_LABEL}={main_replicated_job(spec.recipe, step)}")


def recipe_selector(recipe: Recipe) -> str:
    """The label selector of every object tpu-rl makes for the recipe's runs in the cluster: its JobSets
    (step_labels) and a run's driver Job (run_labels), which `down` and `runs` look for."""
    return f"{RECIPE_LABEL}={recipe.name}"


def run_labels(spec: RunSpec) -> dict[str, str]:
    """The labels of an object that belongs to one run (its driver Job): what recipe_selector finds, and
    the run, as its train and export JobSets carry it."""
    return {RECIPE_LABEL: spec.recipe.name, RUN_LABEL: run_name(spec)}


def step_labels(spec: RunSpec, step: Step) -> dict[str, str]:
    label, owner = _owner(spec, step)
    return {RECIPE_LABEL: spec.recipe.name, STEP_LABEL: step, label: owner}


def spec_digest(manifest: dict[str, Any]) -> str:
    return digest(manifest["spec"])


def with_spec_digest(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["annotations"] = {SPEC_DIGEST_ANNOTATION: spec_digest(manifest)}
    return manifest


def pin_capacity(manifest: dict[str, Any], mode: str, zone: str | None = None) -> dict[str, Any]:
    """A copy of a JobSet whose TPU pods select one capacity mode (and, given, one zone), with its digest
    renewed: `run`'s next mode or zone after a stockout (scripts/pipeline/gke/capacity.py). The zone is
    the label GKE sets on nodes, which the TPU flavors of a stack with zones match (recipes/capacity/placement.py).
    Kueue's flavor assigner skips a flavor whose
    nodeLabels the pod's nodeSelector does not match (kueue v0.17.1 pkg/scheduler/flavorassigner
    flavorassigner.go, "flavor %s doesn't match node affinity"), and merging the admitted flavor's
    nodeLabels into the same value is no conflict (pkg/podset/podset.go, pkg/util/maps HaveConflict)."""
    import copy

    pinned = copy.deepcopy(manifest)
    for rj in pinned["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        if any(TPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {}) for c in pod["containers"]):
            pod.setdefault("nodeSelector", {})[CAPACITY_NODE_LABEL] = mode
            if zone:
                pod["nodeSelector"][ZONE_NODE_LABEL] = zone
    return with_spec_digest(pinned)


# --- environment -------------------------------------------------------------------------------------

def env_value(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def env_field(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def hf_token_env() -> dict[str, Any]:
    """HF_TOKEN from the Kubernetes Secret that `tpu-rl` fills from Secret Manager; never a literal."""
    return {
        "name": HF_TOKEN_ENV,
        "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_K8S_SECRET, "key": HF_TOKEN_ENV}},
    }


def pathways_head_env() -> dict[str, Any]:
    """The coordinator's address: JobSet writes it into this label of every pod."""
    return env_field("PATHWAYS_HEAD", f"metadata.labels['{COORDINATOR_LABEL}']")


def env_list(*groups: list[dict[str, Any]] | Mapping[str, str]) -> list[dict[str, Any]]:
    """Concatenate env groups (lists of EnvVar or plain name->value maps); a name set twice is an error."""
    result: list[dict[str, Any]] = []
    for group in groups:
        items = [env_value(k, v) for k, v in group.items()] if isinstance(group, Mapping) else group
        for item in items:
            if any(existing["name"] == item["name"] for existing in result):
                raise UserError(f"environment variable {item['name']} is set twice in one container; tpu-rl sets "
                                "it already, so remove it from rl.env or rl.pathways_env in recipes.toml")
            result.append(item)
    return result


# --- containers and pods -----------------------------------------------------------------------------

def bash_script(*steps: str) -> str:
    """A container script: strict mode, then the steps separated by blank lines (each is commented)."""
    return "\n\n".join(["set -euo pipefail", *steps]) + "\n"


def container_security() -> dict[str, Any]:
    """No container needs to gain privileges (no setuid) or raw sockets; the TPU comes from the device plugin."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}


# A CPU-pool pod requests three quarters of its node: below what GKE leaves allocatable on these
# machine sizes once kube-reserved and its daemonsets are taken (so it schedules), large enough that
# no second step shares the node, and counted against the Kueue CPU and memory quota.
CPU_POOL_POD_SHARE = 0.75


def cpu_pool_requests(recipe: Recipe, share_of_pod: float = 1.0) -> dict[str, Any]:
    """Requests for a container that takes `share_of_pod` of a CPU-pool pod."""
    _, machine = recipe.cpu_pool_machine
    share = CPU_POOL_POD_SHARE * share_of_pod
    return {"requests": {"cpu": str(max(1, int(machine.vcpus * share))),
                         "memory": f"{max(1, int(machine.memory_gib * share))}Gi"}}


def main_container(image: str, script: str, env: list[dict[str, Any]], resources: dict[str, Any]) -> dict[str, Any]:
    # The script ends with `exec python3 -m ...`, so SIGTERM from Kubernetes reaches Python directly.
    return {"name": MAIN_CONTAINER, "image": image, "command": ["bash", "-c", script], "env": env,
            "resources": resources, "securityContext": container_security()}


# Steps whose pods run libtpu and Pathways, closed-source binaries xpk v1.13.1 runs without a seccomp
# profile; containerd's RuntimeDefault would refuse NUMA syscalls such as mbind (containerd/containerd
# contrib/seccomp/seccomp_default.go @96929a5d; docs/provenance.md#seccomp-of-the-train-pods).
UNCONFINED_STEPS: tuple[Step, ...] = ("train",)


def pod_seccomp(step: Step) -> dict[str, Any]:
    """The pod's securityContext: RuntimeDefault seccomp, except for the TPU/Pathways train pods (as xpk)."""
    if step in UNCONFINED_STEPS:
        return {}
    return {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}


def pod_template(
    run: RunSpec,
    step: Step,
    spec: dict[str, Any],
    *,
    restart_policy: str = "Never",
) -> dict[str, Any]:
    return {
        "metadata": {"labels": step_labels(run, step)},
        "spec": {
            "serviceAccountName": WORKLOAD_KSA,
            # Workload Identity works through the GKE metadata server; no pod talks to the Kubernetes API.
            "automountServiceAccountToken": False,
            **pod_seccomp(step),
            "restartPolicy": restart_policy,
            **spec,
        },
    }


def cpu_pool_placement() -> dict[str, Any]:
    """A pod spec's nodeSelector and tolerations for the CPU pool: its node pool label and its taint."""
    return {"nodeSelector": {NODE_POOL_LABEL: cpu_pool_name()}, "tolerations": [cpu_pool_toleration()]}


def indexed_job(pod: dict[str, Any], *, pods: int, backoff_limit: int, exclusive_on: str | None = None) -> dict[str, Any]:
    """A Job template for a replicated job; exclusive placement goes on the Job, where JobSet reads it."""
    template: dict[str, Any] = {}
    if exclusive_on:
        template["metadata"] = {"annotations": {EXCLUSIVE_TOPOLOGY: exclusive_on}}
    template["spec"] = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": backoff_limit,
        "template": pod,
    }
    return template


def replicated_job(name: str, job: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": job}


def jobset(
    spec: RunSpec,
    step: Step,
    replicated_jobs: list[dict[str, Any]],
    *,
    extra_spec: dict[str, Any] | None = None,
    failure_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    # Every step goes through the stack's LocalQueue, so Kueue admits it against the quota the stack
    # sized (TPU chips for train; CPU-pool cpu and memory for convert, export and the Pathways head).
    labels = {**step_labels(spec, step), QUEUE_LABEL: LOCAL_QUEUE}
    return with_spec_digest({
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": jobset_name(spec, step), "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "failurePolicy": failure_policy or {"maxRestarts": MAX_RESTARTS, "restartStrategy": "Recreate"},
            **(extra_spec or {}),
            "replicatedJobs": replicated_jobs,
        },
    })


def cpu_step_jobset(spec: RunSpec, step: Step, script: str) -> dict[str, Any]:
    """One pod on the CPU pool running a MaxText script with the HF token: convert and export.

    Queued like train, so that Kueue admits it against the CPU pool's quota: a step outside Kueue would
    take CPU nodes that the ClusterQueue counts as free and could hold back an admitted train.
    """
    recipe = spec.recipe
    container = main_container(recipe.maxtext.image, script, [hf_token_env()], cpu_pool_requests(recipe))
    pod = pod_template(spec, step, {**cpu_pool_placement(), "containers": [container]})
    job = indexed_job(pod, pods=1, backoff_limit=0)
    return jobset(spec, step, [replicated_job(CPU_REPLICATED_JOB, job)])


def _literal_blocks(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


class _ManifestDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # a manifest is read by people: no &anchors
        return True


_ManifestDumper.add_representer(str, _literal_blocks)


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """YAML for people: key order kept, scripts as literal blocks so the MaxText command reads as written."""
    return yaml.dump(manifest, Dumper=_ManifestDumper, sort_keys=False, width=120)
