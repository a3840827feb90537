"""Names that the stacks, the manifests and the CLI must agree on. One home for each."""

# Kubernetes side of a GKE recipe.
NAMESPACE = "default"
WORKLOAD_KSA = "tpu-rl-workload"  # bound to the workload Google SA through Workload Identity
LOCAL_QUEUE = "tpu-rl"
CLUSTER_QUEUE = "tpu-rl"
HF_TOKEN_K8S_SECRET = "tpu-rl-hf-token"  # filled from Secret Manager by `tpu-rl`, never by Terraform
HF_TOKEN_ENV = "HF_TOKEN"  # the variable MaxText reads; also the key inside the Kubernetes Secret

# Pinned cluster add-ons. JobSet matches the CRD schema in ../shared/schemas/.
JOBSET_VERSION = "v0.12.0"
KUEUE_VERSION = "v0.17.1"

ARTIFACTS_STACK = "artifacts"
