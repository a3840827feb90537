"""Names that the stacks, the manifests and the CLI must agree on. One home for each."""

# Kubernetes side of a GKE recipe.
NAMESPACE = "default"

# Names GKE and JobSet define, which the stacks, manifests and CLI read (we do not choose them).
TPU_RESOURCE = "google.com/tpu"  # the extended resource of TPU hosts, and the key of GKE's TPU node taint
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"  # node labels GKE puts on TPU nodes
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE's label of a node's pool: pods select pools with it
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet writes both as labels and annotations
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def tpu_node_selector(accelerator: str, topology: str) -> dict[str, str]:
    """The node labels of one TPU slice shape (pods select them; Kueue's TPU flavors match them)."""
    return {TPU_ACCELERATOR_LABEL: accelerator, TPU_TOPOLOGY_LABEL: topology}


def tpu_toleration() -> dict[str, str]:
    """Tolerates the NoSchedule taint on TPU nodes (the stacks' pools carry it, as GKE's own do)."""
    return {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def get_credentials_command(cluster_name: str, region: str, project: str) -> str:
    """What points kubectl at a recipe's cluster: the stack prints it, the CLI names it in its errors."""
    return f"gcloud container clusters get-credentials {cluster_name} --region {region} --project {project}"
# JobSet names stay within this, so that pod names (<jobset>-<job>-<index>-<index>-<suffix>) fit 63
# characters; run names are bounded by it (recipes/runs.py).
MAX_JOBSET_NAME = 28
WORKLOAD_KSA = "tpu-rl-workload"  # bound to the workload Google SA through Workload Identity
# The run's driver (jobs/driver.py): bound to the same Google SA (the bucket only), with its own Role.
DRIVER_KSA = "tpu-rl-driver"
# Its pod's requests: Python, the Kubernetes and Google clients and a poll every 15 s; it sits beside a
# step's pod on a CPU-pool node (jobs/driver.py), and recipes/cost.py prices this share of the node.
DRIVER_CPU_MILLI = 250
DRIVER_MEMORY_MIB = 512
LOCAL_QUEUE = "tpu-rl"
CLUSTER_QUEUE = "tpu-rl"
HF_TOKEN_K8S_SECRET = "tpu-rl-hf-token"  # filled from Secret Manager by `tpu-rl`, never by Terraform
HF_TOKEN_ENV = "HF_TOKEN"  # the variable MaxText reads; also the key inside the Kubernetes Secret

# GKE node pool names: the stacks create them, the manifests select them with
# cloud.google.com/gke-nodepool.
def cpu_pool_name() -> str:
    """The CPU pool, which runs conversion, export and the Pathways head."""
    return "cpu-np"


# The CPU pool's taint, which our CPU-pool pods tolerate. Untainted, a scaled-up cpu-np node is the
# largest free node, and a kube-system replica without a PodDisruptionBudget placed there keeps the
# autoscaler from removing it (kubernetes/autoscaler cluster-autoscaler/FAQ.md, "What types of pods can
# prevent CA from removing a node?"): the node would bill until someone drains it.
CPU_POOL_TAINT_KEY = "tpu-rl/dedicated"


def cpu_pool_taint() -> tuple[str, str, str]:
    """(key, value, effect) of the CPU pool's node taint: the stacks put it on the pool."""
    return CPU_POOL_TAINT_KEY, cpu_pool_name(), "NoSchedule"


def cpu_pool_toleration() -> dict[str, str]:
    """Tolerates exactly the CPU pool's taint: every pod the manifests place on the CPU pool carries it."""
    key, value, effect = cpu_pool_taint()
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def tpu_pool_name(slice_index: int, capacity: str = "reservation", zone_suffix: str = "") -> str:
    """One TPU node pool per capacity mode, zone and slice. A reservation's pools keep the names they always
    had (tpu-np-0, tpu-np-1, ...); the other modes name themselves: tpu-np-spot-0, tpu-np-flex-start-0, ...
    Pools in a further zone of ZONE carry its letter (`zone_suffix`): tpu-np-flex-start-b-0."""
    if capacity == "reservation":
        return f"tpu-np-{slice_index}"
    return f"tpu-np-{capacity}-{zone_suffix}-{slice_index}" if zone_suffix else f"tpu-np-{capacity}-{slice_index}"


# The one capacity mode whose TPU pools keep every host from deploy to destroy: a reservation is billed
# for its term whether used or not. The other modes' pools scale from zero, so their hosts exist (and
# bill) only while a train step runs. The stacks build the pools and recipes/cost.py prices them by this.
STATIC_TPU_CAPACITY = "reservation"


# The node label the stacks put on each TPU pool and its Kueue ResourceFlavor matches: Kueue copies a
# flavor's nodeLabels into the nodeSelector of the pods it admits to it, so a pod lands on a pool of
# the capacity mode Kueue chose.
CAPACITY_NODE_LABEL = "tpu-rl/capacity"
# The zone label GKE itself sets on every node ("well-known" Kubernetes label topology.kubernetes.io/zone,
# https://kubernetes.io/docs/reference/labels-annotations-taints/#topologykubernetesiozone): the TPU
# flavors of a stack with several zones match it, and `run` pins a later submission to it.
ZONE_NODE_LABEL = "topology.kubernetes.io/zone"


def tpu_flavor_name(capacity: str, zone_suffix: str = "") -> str:
    """The Kueue ResourceFlavor of one capacity mode's TPU pools in one zone. A reservation's keeps the name
    it always had (tpu), so a deployed queue keeps its flavor; the others: tpu-spot, tpu-flex-start,
    tpu-on-demand in the first zone of ZONE, and with the zone's letter in a further one: tpu-spot-b."""
    if capacity == "reservation":
        return "tpu"
    return f"tpu-{capacity}-{zone_suffix}" if zone_suffix else f"tpu-{capacity}"


# The Kueue AdmissionCheck that holds a flex-start workload until GKE has provisioned its whole slice
# (a ProvisioningRequest), and the ProvisioningRequestConfig it uses.
FLEX_START_ADMISSION_CHECK = "flex-start-slice"


# The GKE system pool (kube-system, the Kueue and JobSet controllers): the stacks create it, the cost
# estimate (recipes/cost.py) prices it.
SYSTEM_POOL_MACHINE_TYPE = "e2-standard-4"
SYSTEM_POOL_NODES = 1

# Pinned cluster add-ons. JobSet matches the vendored CRD in tests/contracts/vendor/jobset/ (SOURCE.toml).
JOBSET_VERSION = "v0.12.0"
KUEUE_VERSION = "v0.17.1"

ARTIFACTS_STACK = "artifacts"

# A container script that refuses to go on (for example a JAX / Pathways version mismatch found before
# training) prints one line starting with this prefix and exits non-zero; `tpu-rl run` reports that
# line as the failure reason.
CHECK_FAILED_PREFIX = "tpu-rl check failed: "

# What marks a finished checkpoint: the CLI's output checks (scripts/cloud/gcs.py) and the VM startup
# script's export step (jobs/vm.py) look for it.
# orbax-checkpoint 0.12.0 .. 0.12.8 (MaxText 0.2.3 pins >=0.12.0, 0.2.4 >=0.12.2 in
# dependencies/requirements/generated_requirements/tpu-post-train-requirements.txt of each wheel).
# orbax/checkpoint/_src/path/atomicity_types.py: COMMIT_SUCCESS_FILE = 'commit_success.txt'.
# _src/path/atomicity_defaults.py picks CommitFileTemporaryPath for gs:// paths (a bucket cannot rename
# a directory atomically); its finalize() (_src/path/atomicity.py) writes the file into the final
# directory. CheckpointManager finalizes each item (`<step>/items/`, `<step>/model_params/`) and then the
# step directory itself (_src/checkpointers/checkpointer.py, async_checkpointer.py), so the marker in the
# step directory is the last object of a checkpoint; orbax's own is_path_finalized looks for it before
# a restore. Both writers here use that default: to_maxtext through MaxText's
# create_orbax_checkpoint_manager (common/checkpointing.py), train_rl through tunix's CheckpointManager
# (tunix/sft/checkpoint_manager.py at 683256db: orbax CheckpointManager; at c4ec573d: orbax v1
# training.Checkpointer, which saves through the same v0 AsyncCheckpointer, v1/_src/saving/saving.py).
ORBAX_COMMIT_MARKER = "commit_success.txt"
