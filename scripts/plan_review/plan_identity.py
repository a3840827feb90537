"""The read-only identity the plan-review workflow plans as: which predefined role reads which kind of
resource the stacks declare, and where each role is granted. docs/plan-review.md grants exactly these,
and tests/test_plan_review_docs.py checks both that every resource type of every stack has a role here
and that the docs grant these roles and no other.

Roles from Google's IAM predefined roles reference (https://cloud.google.com/iam/docs/roles-permissions,
the pages for compute, container, iam, secretmanager and storage): each is a viewer role; none reads a
secret's value or an object other than the state. `roles/viewer`, the basic role, is not used: it reads
nearly every service of the project, and the package's own scanner flags basic roles (checkov
CKV_GCP_117).
"""

from __future__ import annotations

from dataclasses import dataclass

PROJECT = "project"
ARTIFACTS_BUCKET = "artifacts bucket"
TOKEN_SECRET = "token secret"
STATE_BUCKET = "state bucket"


@dataclass(frozen=True)
class PlanRole:
    role: str
    scope: str  # where it is granted: the project, or one bucket or secret
    reads: str


PLAN_ROLES: tuple[PlanRole, ...] = (
    PlanRole("roles/compute.viewer", PROJECT, "networks, subnets, firewalls, routers and NAT, the TPU VM"),
    PlanRole("roles/container.clusterViewer", PROJECT, "GKE clusters and node pools (and the control plane "
             "endpoint Helm connects to)"),
    PlanRole("roles/iam.serviceAccountViewer", PROJECT, "service accounts"),
    PlanRole("roles/iam.securityReviewer", PROJECT, "the IAM policies the stacks add members to: the project's, "
             "the service accounts', the bucket's and the secret's"),
    PlanRole("roles/storage.bucketViewer", ARTIFACTS_BUCKET, "the artifacts bucket's settings, not its objects"),
    PlanRole("roles/secretmanager.viewer", TOKEN_SECRET, "the token secret's settings, never its value"),
    PlanRole("roles/storage.objectViewer", STATE_BUCKET, "the stacks' Terraform state (a read; nothing is written)"),
)

# Every resource type a stack declares -> the role that lets `terraform plan` refresh it.
ROLE_FOR_TYPE: dict[str, str] = {
    "google_compute_firewall": "roles/compute.viewer",
    "google_compute_instance": "roles/compute.viewer",
    "google_compute_network": "roles/compute.viewer",
    "google_compute_router": "roles/compute.viewer",
    "google_compute_router_nat": "roles/compute.viewer",
    "google_compute_subnetwork": "roles/compute.viewer",
    "google_container_cluster": "roles/container.clusterViewer",
    "google_container_node_pool": "roles/container.clusterViewer",
    # Helm reads a release from its Secrets through the cluster's API: container.clusters.get to sign in,
    # then Kubernetes RBAC in the release namespaces only (docs/plan-review.md, "Full GKE plans").
    "helm_release": "roles/container.clusterViewer",
    "google_service_account": "roles/iam.serviceAccountViewer",
    "google_project_iam_member": "roles/iam.securityReviewer",
    "google_service_account_iam_member": "roles/iam.securityReviewer",
    "google_storage_bucket_iam_member": "roles/iam.securityReviewer",
    "google_secret_manager_secret_iam_member": "roles/iam.securityReviewer",
    "google_storage_bucket": "roles/storage.bucketViewer",
    "google_secret_manager_secret": "roles/secretmanager.viewer",
}
