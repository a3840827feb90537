"""Names that the stacks, the manifests and the CLI must agree on. One home for each."""

# Kubernetes side of a GKE recipe.
NAMESPACE = "default"
WORKLOAD_KSA = "tpu-rl-workload"  # bound to the workload Google SA through Workload Identity
LOCAL_QUEUE = "tpu-rl"
CLUSTER_QUEUE = "tpu-rl"
HF_TOKEN_K8S_SECRET = "tpu-rl-hf-token"  # filled from Secret Manager by `tpu-rl`, never by Terraform
HF_TOKEN_ENV = "HF_TOKEN"  # the variable MaxText reads; also the key inside the Kubernetes Secret

# GKE node pool names: the stacks create them, the manifests select them with
# cloud.google.com/gke-nodepool.
def cpu_pool_name() -> str:
    """The CPU pool, which runs conversion, export and the Pathways head."""
    return "cpu-np"


def tpu_pool_name(slice_index: int) -> str:
    """One TPU node pool per slice: tpu-np-0, tpu-np-1, ..."""
    return f"tpu-np-{slice_index}"


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
