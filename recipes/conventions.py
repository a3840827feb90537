"""Names that the stacks, the manifests and the CLI must agree on. One home for each."""

from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode

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
# characters; run names are bounded by it (recipes/runs/identity.py).
MAX_JOBSET_NAME = 28
WORKLOAD_KSA = "tpu-rl-workload"  # bound to the workload Google SA through Workload Identity
# The run's driver (one Job per GKE run, jobs/driver.py) acts as this KSA: the Role of
# recipes/driver/access.py in NAMESPACE, and the workload Google SA (the bucket only) through Workload
# Identity. The stack names its Role and RoleBinding the same.
DRIVER_KSA = "tpu-rl-driver"
# Its pod's requests (jobs/driver_runtime.py): it polls the API and the bucket every 15 s, so a quarter of
# a core; the package's install and its clients need 1 GiB. recipes/costs/run.py prices this share.
DRIVER_CPU_MILLI = 250
DRIVER_MEMORY_GIB = 1
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


def tpu_pool_name(slice_index: int, capacity: CapacityMode = CapacityMode.RESERVATION, zone_suffix: str = "") -> str:
    """One TPU node pool per capacity mode, zone and slice. A reservation's pools keep the names they always
    had (tpu-np-0, tpu-np-1, ...); the other modes name themselves: tpu-np-spot-0, tpu-np-flex-start-0, ...
    Pools in a further zone of ZONE carry its letter (`zone_suffix`): tpu-np-flex-start-b-0."""
    if MODE_RULES[capacity].legacy_names:
        return f"tpu-np-{slice_index}"
    return f"tpu-np-{capacity}-{zone_suffix}-{slice_index}" if zone_suffix else f"tpu-np-{capacity}-{slice_index}"


# The node label the stacks put on each TPU pool and its Kueue ResourceFlavor matches: Kueue copies a
# flavor's nodeLabels into the nodeSelector of the pods it admits to it, so a pod lands on a pool of
# the capacity mode Kueue chose.
CAPACITY_NODE_LABEL = "tpu-rl/capacity"
# The zone label GKE itself sets on every node ("well-known" Kubernetes label topology.kubernetes.io/zone,
# https://kubernetes.io/docs/reference/labels-annotations-taints/#topologykubernetesiozone): the TPU
# flavors of a stack with several zones match it, and `run` pins a later submission to it.
ZONE_NODE_LABEL = "topology.kubernetes.io/zone"


def tpu_flavor_name(capacity: CapacityMode, zone_suffix: str = "") -> str:
    """The Kueue ResourceFlavor of one capacity mode's TPU pools in one zone. A reservation's keeps the name
    it always had (tpu), so a deployed queue keeps its flavor; the others: tpu-spot, tpu-flex-start,
    tpu-on-demand in the first zone of ZONE, and with the zone's letter in a further one: tpu-spot-b."""
    if MODE_RULES[capacity].legacy_names:
        return "tpu"
    return f"tpu-{capacity}-{zone_suffix}" if zone_suffix else f"tpu-{capacity}"


# The Kueue AdmissionCheck that holds a flex-start workload until GKE has provisioned its whole slice
# (a ProvisioningRequest), and the ProvisioningRequestConfig it uses.
FLEX_START_ADMISSION_CHECK = "flex-start-slice"


# The GKE system pool (kube-system, the Kueue and JobSet controllers): the stacks create it, the cost
# estimate (recipes/costs/run.py) prices it.
SYSTEM_POOL_NAME = "system-np"
SYSTEM_POOL_MACHINE_TYPE = "e2-standard-4"
# Its size, which the runs' drivers share (recipes/costs/run.py driver_share): 4 vCPU, 16 GB, as recipes/costs/prices.toml's
# source for the machine type says.
SYSTEM_POOL_VCPUS = 4
SYSTEM_POOL_MEMORY_GIB = 16
SYSTEM_POOL_NODES = 1
SYSTEM_POOL_MAX_NODES = 3  # its autoscaler's maximum, for what a sweep's drivers may add (infra/gke_cluster.py)

# Pinned cluster add-ons. JobSet matches the vendored CRD in tests/contracts/vendor/jobset/ (SOURCE.toml).
JOBSET_VERSION = "v0.12.0"
KUEUE_VERSION = "v0.17.1"
# The Helm releases a stack uninstalls without waiting (infra/cluster_addons.py, docs/stacks.md "Deploy
# and destroy"); `down` reads whether a stack's state still records a wait for them.
KUEUE_RELEASE = "kueue"
QUEUES_RELEASE = "tpu-rl-queues"
UNWAITED_RELEASES = (KUEUE_RELEASE, QUEUES_RELEASE)

ARTIFACTS_STACK = "artifacts"

# Where each stack's Terraform state lives (stacks/base.py writes the backend block; `tpu-rl down` reads the
# state to check whose cluster it holds). Local state sits at the repository root, outside cdktf.out/,
# which `make clean` removes. With TF_STATE_BUCKET, Terraform's GCS backend keeps the default workspace's
# state in `<prefix>/default.tfstate` (hashicorp/terraform v1.9.8,
# internal/backend/remote-state/gcs/backend_state.go `stateFile`; backend.DefaultStateName "default").
STATE_PREFIX = "tpu-rl"


def local_state_file(stack: str) -> str:
    """The local state file of a stack, relative to the repository root."""
    return f"terraform.{stack}.tfstate"


def remote_state_object(stack: str) -> str:
    """The object of a stack's state in TF_STATE_BUCKET."""
    return f"{STATE_PREFIX}/{stack}/default.tfstate"

# A container script that refuses to go on (for example a JAX / Pathways version mismatch found before
# training) prints one line starting with this prefix and exits non-zero; `tpu-rl run` reports that
# line as the failure reason.
CHECK_FAILED_PREFIX = "tpu-rl check failed: "

# What marks a finished checkpoint (the CLI's output checks, the VM's export step): orbax writes it last
# into a step's directory on gs:// (orbax-checkpoint 0.12.x orbax/checkpoint/_src/path/atomicity_types.py
# COMMIT_SUCCESS_FILE; docs/provenance.md#orbax-commit-marker).
ORBAX_COMMIT_MARKER = "commit_success.txt"

# MaxText to_huggingface, save_model_files in maxtext/checkpoint_conversion/utils/utils.py (0.2.3 and
# 0.2.4 alike): tokenizer.save_pretrained, then config.json, then the weights: either one
# model.safetensors (everything under 3 GB, shard_checkpoint) or model-0000i-of-0000N.safetensors shards
# followed, last, by model.safetensors.index.json whose "weight_map" names the shard of each tensor.
HF_CONFIG = "config.json"
HF_SINGLE_WEIGHTS = "model.safetensors"
HF_WEIGHTS_INDEX = "model.safetensors.index.json"
# transformers >= 5.11 (MaxText 0.2.3 pins >=5.11.0, 0.2.4 >=5.12.1; read at 5.11.0, 5.12.1, 5.24.0):
# AutoTokenizer always returns a tokenizers-backed class (models/auto/tokenization_auto.py, "V5: Always
# use fast tokenizers"); save_pretrained writes tokenizer_config.json (tokenization_utils_base.py) and
# TokenizersBackend._save_pretrained writes tokenizer.json (tokenization_utils_tokenizers.py).
# special_tokens_map.json is no longer written, and chat_template.jinja only when the model has a template.
HF_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


def on_system_pool() -> dict[str, str]:
    """The nodeSelector of what runs on the system pool (the Kueue and JobSet controllers, the webhook
    probe, a run's driver): it never scales from zero and is not tainted, so none of them keeps a CPU or
    TPU node up."""
    return {NODE_POOL_LABEL: SYSTEM_POOL_NAME}
