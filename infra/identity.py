"""Service accounts with the least privilege each role needs.

- :class:`NodeServiceAccount` runs GKE nodes: logs, metrics and image pulls, plus the objects and the
  metadata of the artifacts bucket when given one. Host-network pods (the Pathways head and workers)
  cannot use Workload Identity, so they reach GCS as the node; the grants are on the bucket only.
- :class:`WorkloadServiceAccount` runs the jobs (and, on GKE, the runs' driver): the artifacts bucket,
  granted on the bucket only (the seeds grant storage.admin project-wide; this does not), and the token
  secret when it is given one.
  The TPU VM reads the token from Secret Manager at boot, so its account gets secretAccessor on that
  one secret; GKE pods get the token from the Kubernetes Secret that `tpu-rl run` fills (with the
  caller's credentials), so the GKE workload account gets no Secret Manager role at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cdktf import ITerraformDependable
from constructs import Construct

from tpu_rl.infra.google import (
    project_iam_member,
    secret_manager_secret_iam_member,
    service_account,
    service_account_iam_member,
    storage_bucket_iam_member,
)

# Log writes: GKE nodes, and the TPU VM's guest agent (it sends the startup script's lines to Cloud Logging).
LOG_WRITER = "roles/logging.logWriter"
# The only project-level roles any stack grants (issue 5 checks this allow-list).
NODE_ROLES: tuple[str, ...] = (
    LOG_WRITER,
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
)
# What host-network pods (the Pathways head and workers) get on the artifacts bucket, as the node: its
# objects, and reading its metadata (storage.buckets.get), which TensorFlow's GCS file system asks for at
# the bucket root and Pathways' closed-source scratch client may too (docs/security.md, Identities).
NODE_BUCKET_ROLES: tuple[str, ...] = ("roles/storage.objectAdmin", "roles/storage.legacyBucketReader")
SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"
WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"
# The OAuth scope nodes and VMs get: access is decided by IAM on their service account, not by scopes.
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def workload_identity_pool(project: str) -> str:
    """The project's Workload Identity pool: GKE enables it, Kubernetes SAs act in it."""
    return f"{project}.svc.id.goog"


@dataclass(frozen=True)
class NodeServiceAccountProps:
    project: str
    account_id: str
    display_name: str = "GKE nodes (tpu-rl)"
    roles: Sequence[str] = NODE_ROLES
    bucket: str | None = None  # the artifacts bucket, by name, for host-network pods
    bucket_roles: Sequence[str] = NODE_BUCKET_ROLES


class NodeServiceAccount(Construct):
    def __init__(self, scope: Construct, id: str, props: NodeServiceAccountProps) -> None:
        super().__init__(scope, id)
        self.account = service_account.ServiceAccount(
            self, "account", account_id=props.account_id, display_name=props.display_name, project=props.project
        )
        self.email = self.account.email
        for role in props.roles:
            project_iam_member.ProjectIamMember(
                self, role.removeprefix("roles/"), project=props.project, role=role, member=self.account.member
            )
        if props.bucket is not None:
            for index, role in enumerate(props.bucket_roles):
                # The first grant keeps the construct id it always had, so a deployed grant is not replaced.
                grant_id = "bucket" if index == 0 else f"bucket-{role.removeprefix('roles/storage.')}"
                storage_bucket_iam_member.StorageBucketIamMember(
                    self, grant_id, bucket=props.bucket, role=role, member=self.account.member
                )


@dataclass(frozen=True)
class KubernetesServiceAccountRef:
    """The Kubernetes service account a workload Google SA is bound to through Workload Identity."""

    namespace: str
    name: str


@dataclass(frozen=True)
class WorkloadServiceAccountProps:
    project: str
    account_id: str
    bucket: str  # the artifacts bucket, by name: this stack does not own it
    # The Secret Manager secret id the account reads, by name; None: no Secret Manager grant (GKE).
    token_secret: str | None
    bucket_role: str = "roles/storage.admin"  # granted on the bucket only, never on the project
    display_name: str = "tpu-rl workloads"
    # Project roles beyond the two resources, from NODE_ROLES (the only project roles any stack grants).
    project_roles: Sequence[str] = ()
    # The Kubernetes SAs that act as this account through Workload Identity (GKE: the jobs' and the driver's).
    kubernetes_service_accounts: Sequence[KubernetesServiceAccountRef] = ()
    # The Workload Identity pool exists only once the cluster does; the binding waits for it.
    binding_depends_on: Sequence[ITerraformDependable] = field(default_factory=tuple)


class WorkloadServiceAccount(Construct):
    def __init__(self, scope: Construct, id: str, props: WorkloadServiceAccountProps) -> None:
        super().__init__(scope, id)
        self.account = service_account.ServiceAccount(
            self, "account", account_id=props.account_id, display_name=props.display_name, project=props.project
        )
        self.email = self.account.email
        bucket_grant = storage_bucket_iam_member.StorageBucketIamMember(
            self, "bucket", bucket=props.bucket, role=props.bucket_role, member=self.account.member
        )
        # What must exist before anything runs as this account (a VM's startup script reads both).
        project_grants = [
            project_iam_member.ProjectIamMember(
                self, role.removeprefix("roles/"), project=props.project, role=role, member=self.account.member
            )
            for role in props.project_roles
        ]
        self.grants: list[ITerraformDependable] = [bucket_grant, *project_grants]
        if props.token_secret is not None:
            self.grants.append(secret_manager_secret_iam_member.SecretManagerSecretIamMember(
                self,
                "token-secret",
                project=props.project,
                secret_id=props.token_secret,
                role=SECRET_ACCESSOR,
                member=self.account.member,
            ))
        for index, ksa in enumerate(props.kubernetes_service_accounts):
            # The first binding keeps the construct id it always had, so a deployed binding is not replaced.
            binding_id = "workload-identity" if index == 0 else f"workload-identity-{ksa.name}"
            service_account_iam_member.ServiceAccountIamMember(
                self,
                binding_id,
                service_account_id=self.account.name,
                role=WORKLOAD_IDENTITY_USER,
                member=f"serviceAccount:{workload_identity_pool(props.project)}[{ksa.namespace}/{ksa.name}]",
                depends_on=list(props.binding_depends_on) or None,
            )
