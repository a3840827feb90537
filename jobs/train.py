"""The `train` JobSet: GRPO with train_rl on Pathways, in the shape gcluster/xpk generate.

pathways-head (1 pod, CPU pool): native sidecars pathways-proxy (:29000) and pathways-rm (:29001), and
workload-container running train_rl through the proxy. worker (replicas = slices): one pathways-worker
(:29005) per TPU host, parallelism = completions = hosts per slice.
"""

from __future__ import annotations

from typing import Any

from tpu_rl.jobs.checks import CHECK_FAILED_EXIT_CODE, jax_pairing_check
from tpu_rl.jobs.k8s import (
    COORDINATOR_LABEL,
    JOBSET_NAME_LABEL,
    MAIN_CONTAINER,
    NAMESPACE,
    PATHWAYS_HEAD,
    REPLICATED_JOB_LABEL,
    NODE_POOL_LABEL,
    RUN_LABEL,
    bash_script,
    container_security,
    cpu_pool_requests,
    cpu_pool_placement,
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
from tpu_rl.jobs.maxtext import train_command
from tpu_rl.jobs.patches import render_patch, resolve_patches
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe
from tpu_rl.recipes.capacity.modes import MODE_RULES, uses_queued_provisioning
from tpu_rl.recipes.catalog.entry import quantity_bytes
from tpu_rl.recipes.conventions import TPU_RESOURCE, tpu_node_selector, tpu_toleration
from tpu_rl.recipes.runs.user_files import USER_FILES_DIR, USER_FILES_VOLUME, configmap_name

PROXY_PORT = 29000
RESOURCE_MANAGER_PORT = 29001
WORKER_PORT = 29005
WORKER_PORTS = (WORKER_PORT, WORKER_PORT + 1, 8471, 8080)  # server, its second channel, TPU runtime, metrics
WORKER_BACKOFF_PER_HOST = 4  # as xpk: a few pod restarts per host before the worker job fails
# When the workers start together with the head (startup_order AnyOrder), they may restart while the head
# still waits for its node and images; a Job counts every container restart of its pods against
# backoffLimit (restartPolicy OnFailure). apple/axlearn, which starts Pathways head and workers together,
# allows 32 per host (axlearn/cloud/gcp/pathways_utils.py _PATHWAYS_BACK_OFF_LIMIT, @34aed43c).
WORKER_BACKOFF_PER_HOST_ANY_ORDER = 32
SHARED_TMP = "shared-tmp"  # hostPath /tmp shared by the head's containers and by each worker, as xpk does


def _shared_tmp_mount() -> dict[str, str]:
    return {"name": SHARED_TMP, "mountPath": "/tmp"}


# The env and volumes below follow the Pathways JobSet xpk generates (AI-Hypercomputer/xpk v1.13.1,
# src/xpk/templates/pathways_workload_create.yaml.j2), with Cluster Toolkit's memory-backed /dev/shm;
# the differences: tests/seed_differences.py XPK_DIFFERENCES (docs/provenance.md#the-pathways-jobset-follows-xpk).


def jobset_identity_env() -> list[dict[str, Any]]:
    """JOBSET_NAME and REPLICATED_JOB_NAME, as xpk sets them on the resource manager and the workers.
    JobSet writes each key as both a label and an annotation; xpk reads the annotation."""
    return [env_field("REPLICATED_JOB_NAME", f"metadata.annotations['{REPLICATED_JOB_LABEL}']"),
            env_field("JOBSET_NAME", f"metadata.annotations['{JOBSET_NAME_LABEL}']")]


def _shared_tmp_volume() -> dict[str, Any]:
    return {"name": SHARED_TMP, "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}


# A container's /dev/shm is a 64 MiB tmpfs by default, too small for JAX, vLLM and the Pathways server's
# shared-memory transfers; Cluster Toolkit mounts a memory-backed emptyDir there, on the workload container
# and on each worker (pathways_jobset.tmpl @0196a14a). Its pages count against the container's memory.
DEV_SHM = "dshm"


def _dev_shm_mount() -> dict[str, str]:
    return {"name": DEV_SHM, "mountPath": "/dev/shm"}


def _dev_shm_volume() -> dict[str, Any]:
    return {"name": DEV_SHM, "emptyDir": {"medium": "Memory"}}


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
    # Under Pathways the proxy compiles, so the run's XLA flags are its arguments (AI-Hypercomputer/maxtext
    # benchmarks/maxtext_xpk_runner.py _get_pathways_proxy_flags @43d7bcca).
    args = [f"--server_port={PROXY_PORT}", _resource_manager_address(), _scratch(paths), *recipe.rl.xla_flags]
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
    env = env_list(
        [pathways_head_env()],
        jobset_identity_env(),
        # The resource manager listens on the coordinator's address (xpk: HOST_ADDRESS from the label).
        [env_field("HOST_ADDRESS", f"metadata.labels['{COORDINATOR_LABEL}']")],
        {"TPU_SKIP_MDS_QUERY": "true"},
        recipe.rl.pathways_env,
    )
    return _sidecar(recipe, "pathways-rm", recipe.pathways_images.server, args, env)


def train_script(paths: ArtifactPaths) -> str:
    """The workload-container script: the JAX/Pathways check, named source patches, then train_rl."""
    recipe = paths.recipe
    steps = [jax_pairing_check(recipe), *(render_patch(patch) for patch in resolve_patches(recipe).apply)]
    command = train_command(recipe, paths)
    steps.append(f"# loads {paths.train_loads}, writes {paths.actor_checkpoints}\nexec {command.shell()}")
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


def workload_resources(recipe: Recipe) -> dict[str, Any]:
    """train_rl's requests, and its memory limit from rl.memory_max where the recipe sets one.

    Seed 000 wrote memory.max into the container's cgroup; in an unprivileged container that file is
    read-only and the write fails silently, so it capped nothing. A Kubernetes limit is enforced by the
    kubelet: a host-memory spike OOM-kills this container (the step fails, exit 137) instead of
    starving the node. The request stays at or below the limit, as Kubernetes requires."""
    resources = cpu_pool_requests(recipe, WORKLOAD_SHARE_OF_HEAD)
    limit = recipe.rl.memory_max
    if limit is None:
        return resources
    requests = resources["requests"]
    if quantity_bytes(requests["memory"]) > quantity_bytes(limit):
        requests["memory"] = limit
    return {**resources, "limits": {"memory": limit}}


def _user_files_mounts(paths: ArtifactPaths) -> list[dict[str, Any]]:
    """The run's --rewards/--data-processor files, read-only where the overrides point (recipes/runs/user_files.py)."""
    return [{"name": USER_FILES_VOLUME, "mountPath": USER_FILES_DIR, "readOnly": True}] if paths.spec.user_files else []


def _user_files_volumes(paths: ArtifactPaths) -> list[dict[str, Any]]:
    if not paths.spec.user_files:
        return []
    return [{"name": USER_FILES_VOLUME, "configMap": {"name": configmap_name(paths.run_name)}}]


def user_files_configmap(paths: ArtifactPaths) -> dict[str, Any] | None:
    """The ConfigMap of the run's --rewards/--data-processor files that the train head mounts, as `run`
    creates it and `render` writes it; None for a run without files."""
    files = paths.spec.user_files
    if not files:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": configmap_name(paths.run_name), "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "tpu-rl", RUN_LABEL: paths.run_name}},
            "data": {file.name: file.content for file in files}}


def pathways_head_job(paths: ArtifactPaths) -> dict[str, Any]:
    # hostNetwork as in xpk. Note: GKE's Workload Identity does not serve host-network pods; they reach
    # GCS (scratch, checkpoints) as the node's service account, which therefore needs the bucket.
    recipe = paths.recipe
    workload = main_container(recipe.maxtext.image, train_script(paths), workload_env(recipe),
                              workload_resources(recipe))
    workload["volumeMounts"] = [_shared_tmp_mount(), _dev_shm_mount(), *_user_files_mounts(paths)]
    pod = pod_template(paths.spec, "train", {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        **cpu_pool_placement(),
        "initContainers": [pathways_proxy(paths), pathways_resource_manager(paths)],
        "containers": [workload],
        "volumes": [_shared_tmp_volume(), _dev_shm_volume(), *_user_files_volumes(paths)],
    })
    job = indexed_job(pod, pods=1, backoff_limit=0, exclusive_on="kubernetes.io/hostname")
    if restarts_after_preemption(recipe):
        # A refusal of the head's own checks fails the Job with reason PodFailurePolicy, which the JobSet's
        # first failure rule turns into FailJobSet (restartPolicy Never, as podFailurePolicy requires).
        job["spec"]["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": MAIN_CONTAINER, "operator": "In", "values": [CHECK_FAILED_EXIT_CODE]}}]}
    return job


def pathways_worker(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    env = env_list(
        [pathways_head_env()],
        # XCLOUD_ENVIRONMENT tells the server it runs on Google Cloud; the XOR tracer is off as in xpk
        # (apple/axlearn's axlearn/common/compiler_options.py sets megascale_grpc_enable_xor_tracer=false
        # as a "temporary workaround to avoid memory leak in megascale").
        {"XCLOUD_ENVIRONMENT": "GCP", "MEGASCALE_GRPC_ENABLE_XOR_TRACER": "false",
         "MEGASCALE_NUM_SLICES": str(recipe.shape.slices)},
        jobset_identity_env(),
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
        "volumeMounts": [_shared_tmp_mount(), _dev_shm_mount()],
        "securityContext": container_security(),
    }


def worker_job(paths: ArtifactPaths) -> dict[str, Any]:
    shape = paths.recipe.shape
    pod = pod_template(paths.spec, "train", {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": tpu_node_selector(shape.gke_accelerator, shape.topology),
        "tolerations": [tpu_toleration()],
        "containers": [pathways_worker(paths)],
        "volumes": [_shared_tmp_volume(), _dev_shm_volume()],
    }, restart_policy="OnFailure")
    hosts = shape.hosts_per_slice
    per_host = WORKER_BACKOFF_PER_HOST_ANY_ORDER if startup_order(paths.recipe) == "AnyOrder" else WORKER_BACKOFF_PER_HOST
    # One slice per TPU node pool: exclusive on the node pool keeps a worker job on a single slice.
    return indexed_job(pod, pods=hosts, backoff_limit=hosts * per_host, exclusive_on=NODE_POOL_LABEL)


# How many times a train JobSet on preemptible capacity (recipes/capacity/modes.py) is recreated after a
# failure before it is declared failed. Each attempt resumes from the last checkpoint and loses at most
# rl.checkpoint_period steps, so a few preemptions in one run are survived; a failure that repeats whatever
# the host (an OOM, a bad override) costs at most this many extra starts of the slice instead of looping.
# Every restart counts against the bound: none uses RestartJobSetAndIgnoreMaxRestarts.
PREEMPTIBLE_MAX_RESTARTS = 3


def restarts_after_preemption(recipe: Recipe) -> bool:
    """Whether the train JobSet restarts after a failure: when a capacity it may run on is preemptible.
    A list of only reservation and on-demand keeps maxRestarts 0, as seed 000: a failure there is real."""
    return any(MODE_RULES[mode].preemptible for mode in recipe.capacity)


def train_failure_policy(recipe: Recipe) -> dict[str, Any] | None:
    """The train JobSet's failurePolicy on preemptible capacity (None: the default of every step).

    A restart continues training, it does not start over: tunix's PeftTrainer restores the latest checkpoint
    of the run's fixed checkpoint directory when it is built (google/tunix @c4ec573d
    tunix/sft/checkpoint_manager.py CheckpointManager.maybe_restore;
    docs/provenance.md#a-restart-resumes-from-the-latest-checkpoint).

    JobSet v0.12.0 (pkg/controllers/failure_policy.go): the first matching rule acts, no match means
    RestartJobSet, which fails the JobSet once status.restartsCountTowardsMax reaches maxRestarts. The one
    rule here fails the JobSet at once when the head's own checks refused to start (exit
    CHECK_FAILED_EXIT_CODE through the head Job's podFailurePolicy). BlockingRecreate waits until every
    pod of the failed attempt is gone before creating the next: the old head may still be writing a
    checkpoint that the new one would otherwise restore half-written or not see, and both use the same
    host-network ports."""
    if not restarts_after_preemption(recipe):
        return None
    return {
        "maxRestarts": PREEMPTIBLE_MAX_RESTARTS,
        "restartStrategy": "BlockingRecreate",
        "rules": [{"name": "headCheckFailed", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
                   "targetReplicatedJobs": [PATHWAYS_HEAD]}],
    }


# --- the order in which the JobSet starts the head and the workers -----------------------------------
# InOrder, as xpk v1.13.1 and Cluster Toolkit write it: JobSet v0.12.0 resumes the workers once the head's Job
# is ready. Not on flex-start: the autoscaler books the provisioned slice for only 10 minutes
# (kubernetes/autoscaler cluster-autoscaler/FAQ.md), so AnyOrder lets the workers take it at once while
# the head's node scales up (docs/provenance.md#start-order-inorder-and-anyorder-on-flex-start).


def startup_order(recipe: Recipe) -> str:
    """InOrder as xpk, or AnyOrder when Kueue may admit the JobSet onto a flex-start (queued) slice."""
    return "AnyOrder" if uses_queued_provisioning(recipe.capacity) else "InOrder"


def train_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    return jobset(
        paths.spec,
        "train",
        [
            replicated_job(PATHWAYS_HEAD, pathways_head_job(paths)),
            replicated_job("worker", worker_job(paths), replicas=recipe.shape.slices),
        ],
        extra_spec={
            "coordinator": {"replicatedJob": PATHWAYS_HEAD},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "startupPolicy": {"startupPolicyOrder": startup_order(recipe)},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [PATHWAYS_HEAD]},
        },
        failure_policy=train_failure_policy(recipe),
    )
