"""The `train` JobSet: GRPO with train_rl on Pathways, in the shape gcluster/xpk generate.

pathways-head (1 pod, CPU pool): native sidecars pathways-proxy (:29000) and pathways-rm (:29001), and
workload-container running train_rl through the proxy. worker (replicas = slices): one pathways-worker
(:29005) per TPU host, parallelism = completions = hosts per slice.
"""

from __future__ import annotations

from typing import Any

from jobs.k8s import (
    PATHWAYS_HEAD,
    NODE_POOL_LABEL,
    bash_script,
    container_security,
    cpu_pool_requests,
    cpu_pool_selector,
    env_field,
    env_list,
    hf_token_env,
    indexed_job,
    jobset,
    main_container,
    pathways_head_env,
    pod_template,
    replicated_job,
)
from jobs.maxtext import train_command
from jobs.patches import render_patch, resolve_patches
from jobs.paths import ArtifactPaths
from recipes import Recipe

PROXY_PORT = 29000
RESOURCE_MANAGER_PORT = 29001
WORKER_PORT = 29005
WORKER_PORTS = (WORKER_PORT, WORKER_PORT + 1, 8471, 8080)  # server, its second channel, TPU runtime, metrics
WORKER_BACKOFF_PER_HOST = 4  # as xpk: a few pod restarts per host before the worker job fails
TPU_RESOURCE = "google.com/tpu"
SHARED_TMP = "shared-tmp"  # hostPath /tmp shared by the head's containers, as xpk does


def _shared_tmp_mount() -> dict[str, str]:
    return {"name": SHARED_TMP, "mountPath": "/tmp"}


def _resource_manager_address() -> str:
    return f"--resource_manager_address=$(PATHWAYS_HEAD):{RESOURCE_MANAGER_PORT}"


def _scratch(paths: ArtifactPaths) -> str:
    return f"--gcs_scratch_location={paths.pathways_scratch}"


# Of the head pod's requests, each Pathways sidecar takes this part and train_rl the rest: the proxy
# and resource manager route arrays and RPCs, while train_rl holds host-side arrays and the rollouts.
SIDECAR_SHARE_OF_HEAD = 0.1
WORKLOAD_SHARE_OF_HEAD = 1 - 2 * SIDECAR_SHARE_OF_HEAD


def _sidecar(recipe: Recipe, name: str, image: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    # A native sidecar: an init container that keeps running next to the main container.
    return {"name": name, "image": image, "restartPolicy": "Always", "args": args, "env": env,
            "resources": cpu_pool_requests(recipe, SIDECAR_SHARE_OF_HEAD),
            "volumeMounts": [_shared_tmp_mount()], "securityContext": container_security()}


def pathways_proxy(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    args = [f"--server_port={PROXY_PORT}", _resource_manager_address(), _scratch(paths)]
    return _sidecar(recipe, "pathways-proxy", recipe.pathways_images.proxy, args,
                    env_list([pathways_head_env()], recipe.rl.pathways_env))


def pathways_resource_manager(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    args = [
        f"--server_port={RESOURCE_MANAGER_PORT}",
        _scratch(paths),
        "--node_type=resource_manager",
        f"--instance_count={recipe.shape.slices}",
        f"--instance_type={recipe.shape.pathways_instance_type}",
    ]
    env = env_list([pathways_head_env()], {"TPU_SKIP_MDS_QUERY": "true"}, recipe.rl.pathways_env)
    return _sidecar(recipe, "pathways-rm", recipe.pathways_images.server, args, env)


def memory_limit_step(memory_max: str) -> str:
    # As seed 000. Where the container's cgroup filesystem is read-only (unprivileged containers on
    # cgroup v2) the write fails and is ignored, exactly as in the seed.
    return "\n".join([
        f"# cap this container's memory at {memory_max} (seed 000), so a host-memory spike fails the run, not the node",
        f"(echo {memory_max} > /sys/fs/cgroup/memory.max || echo {memory_max} > "
        "/sys/fs/cgroup/memory/memory.limit_in_bytes) 2>/dev/null || true",
    ])


def train_script(paths: ArtifactPaths) -> str:
    """The workload-container script: optional memory cap, named source patches, then train_rl."""
    recipe = paths.recipe
    steps = []
    if recipe.rl.memory_max:
        steps.append(memory_limit_step(recipe.rl.memory_max))
    steps += [render_patch(patch) for patch in resolve_patches(recipe).apply]
    command = train_command(recipe, paths)
    steps.append(f"# loads {paths.converted_items}, writes {paths.actor_checkpoints}\nexec {command.shell()}")
    return bash_script(*steps)


def workload_env(recipe: Recipe) -> list[dict[str, Any]]:
    return env_list(
        [pathways_head_env()],
        {
            # The seeds run train_rl with JAX_PLATFORMS=proxy,cpu: devices through the Pathways proxy,
            # host-side arrays on CPU.
            "JAX_PLATFORMS": "proxy,cpu",
            "JAX_BACKEND_TARGET": f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}",
            "XCLOUD_ENVIRONMENT": "GCP",
        },
        recipe.rl.env,
        resolve_patches(recipe).env,
        # hostNetwork: the pod IP is the host IP, which is what the seeds take from `hostname -I`.
        [env_field("VLLM_HOST_IP", "status.podIP"), hf_token_env()],
    )


def pathways_head_job(paths: ArtifactPaths) -> dict[str, Any]:
    # hostNetwork as in xpk. Note: GKE's Workload Identity does not serve host-network pods; they reach
    # GCS (scratch, checkpoints) as the node's service account, which therefore needs the bucket.
    recipe = paths.recipe
    workload = main_container(recipe.maxtext.image, train_script(paths), workload_env(recipe),
                              cpu_pool_requests(recipe, WORKLOAD_SHARE_OF_HEAD))
    workload["volumeMounts"] = [_shared_tmp_mount()]
    pod = pod_template(recipe, "train", {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": cpu_pool_selector(),
        "initContainers": [pathways_proxy(paths), pathways_resource_manager(paths)],
        "containers": [workload],
        "volumes": [{"name": SHARED_TMP, "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}],
    })
    return indexed_job(pod, pods=1, backoff_limit=0, exclusive_on="kubernetes.io/hostname")


def pathways_worker(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    env = env_list(
        [pathways_head_env()],
        {"MEGASCALE_NUM_SLICES": str(recipe.shape.slices)},
        [env_field("MEGASCALE_SLICE_ID", "metadata.labels['jobset.sigs.k8s.io/job-index']")],
        {"MEGASCALE_COORDINATOR_ADDRESS": "$(PATHWAYS_HEAD)"},
        recipe.rl.pathways_env,
    )
    chips = str(recipe.shape.chips_per_vm)
    return {
        "name": "pathways-worker",
        "image": recipe.pathways_images.server,
        "args": [f"--server_port={WORKER_PORT}", _resource_manager_address(), _scratch(paths)],
        "env": env,
        "ports": [{"containerPort": port} for port in WORKER_PORTS],
        "resources": {"limits": {TPU_RESOURCE: chips}},
        "securityContext": container_security(),
    }


def worker_job(paths: ArtifactPaths) -> dict[str, Any]:
    shape = paths.recipe.shape
    pod = pod_template(paths.recipe, "train", {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": shape.gke_accelerator,
            "cloud.google.com/gke-tpu-topology": shape.topology,
        },
        "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [pathways_worker(paths)],
    }, restart_policy="OnFailure")
    hosts = shape.hosts_per_slice
    # One slice per TPU node pool: exclusive on the node pool keeps a worker job on a single slice.
    return indexed_job(pod, pods=hosts, backoff_limit=hosts * WORKER_BACKOFF_PER_HOST, exclusive_on=NODE_POOL_LABEL)


def train_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    return jobset(
        recipe,
        "train",
        [
            replicated_job(PATHWAYS_HEAD, pathways_head_job(paths)),
            replicated_job("worker", worker_job(paths), replicas=recipe.shape.slices),
        ],
        extra_spec={
            "coordinator": {"replicatedJob": PATHWAYS_HEAD},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [PATHWAYS_HEAD]},
        },
        queued=True,
    )
