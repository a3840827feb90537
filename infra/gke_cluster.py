"""A regional GKE Standard cluster with private nodes, Workload Identity and a small system pool.

The control plane keeps a public endpoint, reachable only from the CIDRs the user lists (there is no
0.0.0.0/0 default: the props have no default at all). Nodes have no external IPs and use the
network's NAT for egress.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from cdktf import Fn
from constructs import Construct

from tpu_rl.infra.google import container_cluster, container_node_pool, data_google_container_engine_versions
from tpu_rl.infra.identity import CLOUD_PLATFORM_SCOPE, workload_identity_pool
from tpu_rl.infra.network import Network
from tpu_rl.infra.terraform_literals import terraform_expression
from tpu_rl.recipes import conventions
from tpu_rl.recipes.settings.checks import authorized_cidrs_problem

SYSTEM_POOL = conventions.SYSTEM_POOL_NAME

# A node upgrade recreates every host of a TPU slice and kills a days-long run, so GKE may patch the control
# plane but not upgrade nodes or the minor version: the gke-tpu-v6e-advanced blueprint's exclusion
# (cluster-toolkit@1047080375, docs/provenance.md#gke-upgrade-exclusion), with a window from plantimestamp().
UPGRADE_EXCLUSION_NAME = "no-minor-or-node-upgrades"
UPGRADE_EXCLUSION_SCOPE = "NO_MINOR_OR_NODE_UPGRADES"
# Longer than a training campaign; short enough to stay inside the months of support that the minor
# version a new REGULAR cluster starts on has left (an end past that is beyond what GKE allows).
UPGRADE_EXCLUSION_DAYS = 90
# The provider needs a window next to an exclusion (ExactlyOneOf daily/recurring in 6.50.0
# google/services/container/resource_container_cluster.go); the control-plane patches the exclusion
# still allows happen there. 09:00 GMT is Cluster Toolkit's default (modules/scheduler/gke-cluster/
# variables.tf, maintenance_start_time).
MAINTENANCE_WINDOW_START = "09:00"

Taint = tuple[str, str, str]  # key, value, effect

# A GKE version, e.g. 1.33.0-gke.1712000: major, minor, patch and the GKE build (the versioning scheme of
# https://cloud.google.com/kubernetes-engine/versioning#versioning_scheme). `[.]` instead of an escaped
# dot: the pattern passes through Python, JSON and an HCL string literal unchanged.
_GKE_VERSION = "^([0-9]+)[.]([0-9]+)[.]([0-9]+)-gke[.]([0-9]+)"


def gke_version_at_least(version: str, minimum: str) -> str:
    """A Terraform expression (without ${}) that is true when the GKE version `version` (an expression)
    is `minimum` or newer, comparing major, minor, patch and build as numbers."""
    wanted = re.match(_GKE_VERSION, minimum)
    if wanted is None:
        raise ValueError(f"'{minimum}' is not a GKE version like 1.33.0-gke.1712000")
    parts = [f'tonumber(regex("{_GKE_VERSION}", {version})[{index}])' for index in range(4)]
    condition = f"{parts[3]} >= {wanted.group(4)}"
    for part, value in reversed(list(zip(parts[:3], wanted.groups()[:3]))):
        condition = f"({part} > {value} || ({part} == {value} && {condition}))"
    return condition


def node_config(
    machine_type: str,
    service_account: str,
    *,
    disk_type: str,
    disk_size_gb: int = 100,
    labels: dict[str, str] | None = None,
    taints: Sequence[Taint] = (),
    reservation_affinity: container_node_pool.ContainerNodePoolNodeConfigReservationAffinity | None = None,
    spot: bool | None = None,
    flex_start: bool | None = None,
) -> container_node_pool.ContainerNodePoolNodeConfig:
    """The node settings every pool shares: its own SA, the GKE metadata server, shielded boot. A TPU pool
    adds its capacity mode's (None leaves a field out of the synthesized JSON, as jsii drops it)."""
    return container_node_pool.ContainerNodePoolNodeConfig(
        machine_type=machine_type,
        service_account=service_account,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        disk_size_gb=disk_size_gb,
        disk_type=disk_type,
        # Pods see their Workload Identity, never the node's credentials.
        workload_metadata_config=container_node_pool.ContainerNodePoolNodeConfigWorkloadMetadataConfig(
            mode="GKE_METADATA"
        ),
        shielded_instance_config=container_node_pool.ContainerNodePoolNodeConfigShieldedInstanceConfig(
            enable_secure_boot=True, enable_integrity_monitoring=True
        ),
        metadata={"disable-legacy-endpoints": "true"},
        labels=labels or None,
        taint=[
            container_node_pool.ContainerNodePoolNodeConfigTaint(key=key, value=value, effect=effect)
            for key, value, effect in taints
        ]
        or None,
        reservation_affinity=reservation_affinity,
        spot=spot,
        flex_start=flex_start,
    )


def upgrade_exclusion_policy() -> container_cluster.ContainerClusterMaintenancePolicy:
    """A daily window for control-plane patches and no node or minor upgrades for the stack's first days."""
    opened = Fn.plantimestamp()
    return container_cluster.ContainerClusterMaintenancePolicy(
        daily_maintenance_window=container_cluster.ContainerClusterMaintenancePolicyDailyMaintenanceWindow(
            start_time=MAINTENANCE_WINDOW_START
        ),
        maintenance_exclusion=[
            container_cluster.ContainerClusterMaintenancePolicyMaintenanceExclusion(
                exclusion_name=UPGRADE_EXCLUSION_NAME,
                start_time=opened,
                end_time=Fn.timeadd(opened, f"{UPGRADE_EXCLUSION_DAYS * 24}h"),
                exclusion_options=container_cluster.ContainerClusterMaintenancePolicyMaintenanceExclusionExclusionOptions(
                    scope=UPGRADE_EXCLUSION_SCOPE
                ),
            )
        ],
    )


@dataclass(frozen=True)
class GkeClusterProps:
    name: str
    project: str
    region: str
    zone: str  # where the node pools live unless a pool names its own (TPU capacity is zonal)
    network: Network
    node_service_account: str  # email
    authorized_cidrs: Sequence[str]  # no default on purpose: the user names who may reach the API
    # The system pool runs kube-system and the add-on controllers. No defaults: the stack passes what
    # the cost estimate prices (tpu_rl.recipes.conventions), so the two cannot drift apart.
    system_machine_type: str
    system_min_nodes: int
    system_max_nodes: int = conventions.SYSTEM_POOL_MAX_NODES
    system_disk_type: str = "pd-balanced"  # fits the E2 system machines, which take no Hyperdisk
    release_channel: str = "REGULAR"
    labels: dict[str, str] = field(default_factory=dict)  # GCP resource labels of the cluster
    # The oldest control-plane version the stack's node pools need, e.g. 1.33.0-gke.1712000 for flex-start
    # TPU pools (recipes.toml, [tpu.<generation>.flex_start] min_gke_version); None: any version.
    min_master_version: str | None = None

    def __post_init__(self) -> None:
        problem = authorized_cidrs_problem(list(self.authorized_cidrs))
        if problem:
            raise ValueError(f"GkeClusterProps.authorized_cidrs {problem}")


class GkeCluster(Construct):
    def __init__(self, scope: Construct, id: str, props: GkeClusterProps) -> None:
        super().__init__(scope, id)
        self.props = props
        ranges = props.network.props.secondary_ranges
        if ranges is None:
            raise ValueError("GkeCluster needs a Network with secondary ranges for pods and services")
        self.cluster = container_cluster.ContainerCluster(
            self,
            "cluster",
            name=props.name,
            project=props.project,
            location=props.region,  # regional control plane
            network=props.network.network.id,
            subnetwork=props.network.subnetwork.id,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=container_cluster.ContainerClusterIpAllocationPolicy(
                cluster_secondary_range_name=ranges.pods_name,
                services_secondary_range_name=ranges.services_name,
            ),
            private_cluster_config=container_cluster.ContainerClusterPrivateClusterConfig(
                enable_private_nodes=True, enable_private_endpoint=False
            ),
            master_authorized_networks_config=container_cluster.ContainerClusterMasterAuthorizedNetworksConfig(
                cidr_blocks=[
                    container_cluster.ContainerClusterMasterAuthorizedNetworksConfigCidrBlocks(
                        cidr_block=cidr, display_name=f"authorized-{index}"
                    )
                    for index, cidr in enumerate(props.authorized_cidrs)
                ],
                gcp_public_cidrs_access_enabled=False,
            ),
            release_channel=container_cluster.ContainerClusterReleaseChannel(channel=props.release_channel),
            maintenance_policy=upgrade_exclusion_policy(),
            workload_identity_config=container_cluster.ContainerClusterWorkloadIdentityConfig(
                workload_pool=workload_identity_pool(props.project)
            ),
            addons_config=container_cluster.ContainerClusterAddonsConfig(
                gcs_fuse_csi_driver_config=container_cluster.ContainerClusterAddonsConfigGcsFuseCsiDriverConfig(
                    enabled=True
                ),
            ),
            enable_shielded_nodes=True,
            # Authenticate with Google identities only; no long-lived client certificate (GKE's default,
            # stated so that it stays so).
            master_auth=container_cluster.ContainerClusterMasterAuth(
                client_certificate_config=container_cluster.ContainerClusterMasterAuthClientCertificateConfig(
                    issue_client_certificate=False
                ),
            ),
            # Node pools are managed below; the default pool exists only while the cluster is created,
            # and even then runs as the node SA with the GKE metadata server.
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config=container_cluster.ContainerClusterNodeConfig(
                service_account=props.node_service_account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=container_cluster.ContainerClusterNodeConfigWorkloadMetadataConfig(
                    mode="GKE_METADATA"
                ),
                shielded_instance_config=container_cluster.ContainerClusterNodeConfigShieldedInstanceConfig(
                    enable_secure_boot=True, enable_integrity_monitoring=True
                ),
            ),
            min_master_version=self._channel_default_at_least(props.min_master_version),
            # The exclusion's dates are set once, at creation (see UPGRADE_EXCLUSION_DAYS); so is the version
            # (see _channel_default_at_least).
            lifecycle={"ignore_changes": ["node_config", "maintenance_policy[0].maintenance_exclusion",
                                          *(["min_master_version"] if props.min_master_version else [])]},
            # `cdktf destroy <recipe>` must be able to stop all spend; the bucket holds what matters.
            deletion_protection=False,
            resource_labels=props.labels or None,
        )
        self.system_pool = self.node_pool(
            self,
            "system-pool",
            name=SYSTEM_POOL,
            node_config=node_config(
                props.system_machine_type,
                props.node_service_account,
                disk_type=props.system_disk_type,
            ),
            initial_node_count=props.system_min_nodes,
            autoscaling=container_node_pool.ContainerNodePoolAutoscaling(
                min_node_count=props.system_min_nodes, max_node_count=props.system_max_nodes
            ),
        )

    def node_pool(
        self, scope: Construct, id: str, *, name: str, node_config: container_node_pool.ContainerNodePoolNodeConfig,
        auto_repair: bool = True, zone: str | None = None, node_count: int | None = None,
        initial_node_count: int | None = None, autoscaling: container_node_pool.ContainerNodePoolAutoscaling | None = None,
        queued_provisioning: container_node_pool.ContainerNodePoolQueuedProvisioning | None = None,
        placement_policy: container_node_pool.ContainerNodePoolPlacementPolicy | None = None,
        upgrade_settings: container_node_pool.ContainerNodePoolUpgradeSettings | None = None,
    ) -> container_node_pool.ContainerNodePool:
        """A pool of this cluster in one zone (`zone`, by default the cluster's first, props.zone),
        auto-upgraded (release channels require it) and, unless the pool's provisioning model forbids it
        (flex-start, tpu_rl.infra.tpu_pool), auto-repaired. The cluster is regional, so a pool may be in any zone
        of its region (hashicorp/google 6.50.0, resource_container_node_pool.go `node_locations`: "Nodes
        must be in the region of their regional cluster")."""
        return container_node_pool.ContainerNodePool(
            scope,
            id,
            name=name,
            project=self.props.project,
            cluster=self.cluster.id,
            location=self.props.region,
            node_locations=[zone or self.props.zone],
            management=container_node_pool.ContainerNodePoolManagement(auto_repair=auto_repair, auto_upgrade=True),
            node_config=node_config,
            node_count=node_count,
            initial_node_count=initial_node_count,
            autoscaling=autoscaling,
            queued_provisioning=queued_provisioning,
            placement_policy=placement_policy,
            upgrade_settings=upgrade_settings,
        )

    def _channel_default_at_least(self, minimum: str | None) -> str | None:
        """The version to create the cluster at when it needs at least `minimum`: the release channel's
        default, which a plan refuses (a postcondition) if it is older than `minimum`.

        Why not min_master_version = minimum: hashicorp/google 6.50.0 sends min_master_version as the
        cluster's initialClusterVersion on create (google/services/container/resource_container_cluster.go,
        `InitialClusterVersion: d.Get("min_master_version")`), and GKE creates clusters only at versions it
        still offers, which a patch release written down here stops being within months. The channel's
        default is what GKE picks when no version is given, so the cluster is created as it would be
        anyway, and the minimum is checked where it is known, at plan time. ignore_changes keeps a later
        default from upgrading the control plane on the next apply (the provider upgrades the master when
        min_master_version rises). Cluster Toolkit does the same: the channel's version from
        google_container_engine_versions as min_master_version, ignore_changes on it, and a precondition
        comparing versions (GoogleCloudPlatform/cluster-toolkit@1047080375, modules/scheduler/gke-cluster;
        docs/provenance.md#cluster-version-at-create).
        """
        if minimum is None:
            return None
        versions = data_google_container_engine_versions.DataGoogleContainerEngineVersions(
            self, "versions", project=self.props.project, location=self.props.region
        )
        channel_default = f'self.release_channel_default_version["{self.props.release_channel}"]'
        versions.add_override("lifecycle.postcondition", [{
            "condition": terraform_expression(gke_version_at_least(channel_default, minimum)),
            "error_message": f"GKE's {self.props.release_channel} default version in {self.props.region} is "
                             f"older than {minimum}, which this recipe's node pools need (flex-start TPU pools): "
                             "retry when the channel has moved on, or use another capacity mode",
        }])
        return Fn.lookup(versions.release_channel_default_version, self.props.release_channel)

    @property
    def endpoint(self) -> str:
        return self.cluster.endpoint

    @property
    def ca_certificate(self) -> str:
        return self.cluster.master_auth.cluster_ca_certificate
