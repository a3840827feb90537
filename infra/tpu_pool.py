"""One GKE node pool per TPU slice: a static, compactly placed set of hosts of one topology."""

from __future__ import annotations

from dataclasses import dataclass, field

from constructs import Construct

from infra.capacity import RESERVATION_KEY, check_reservation
from infra.gke_cluster import GkeCluster, node_config
from infra.google import container_node_pool
from recipes.model import CapacityMode

TPU_TAINT = ("google.com/tpu", "present", "NO_SCHEDULE")

# When GKE does upgrade a slice (after the cluster's upgrade exclusion, see infra.gke_cluster), it takes
# hosts down in place instead of first creating a surge host: a surge host must come from the same
# reservation, which holds exactly the slices the stack uses, so a surge upgrade would stall. These are
# the defaults of Cluster Toolkit's gke-node-pool module, which the gke-tpu-v6e-advanced blueprint uses
# for its TPU pool (GoogleCloudPlatform/cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a,
# modules/compute/gke-node-pool/variables.tf:428-444 and main.tf:23-27).
UPGRADE_STRATEGY = "SURGE"
UPGRADE_MAX_SURGE = 0
UPGRADE_MAX_UNAVAILABLE = 1


@dataclass(frozen=True)
class TpuSlicePoolProps:
    name: str
    cluster: GkeCluster
    machine_type: str
    disk_type: str  # from the recipe's machine table
    topology: str
    hosts: int  # node_count: every host of the slice, always up while the stack exists
    node_service_account: str
    capacity: CapacityMode
    reservation: str | None = None
    disk_size_gb: int = 100
    node_labels: dict[str, str] = field(default_factory=dict)  # Kubernetes labels of the nodes

    def __post_init__(self) -> None:
        check_reservation("TpuSlicePoolProps", self.capacity, self.reservation)


def reservation_affinity(props: TpuSlicePoolProps) -> container_node_pool.ContainerNodePoolNodeConfigReservationAffinity:
    if props.capacity == "reservation":
        return container_node_pool.ContainerNodePoolNodeConfigReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[props.reservation]
        )
    # Spot and on-demand capacity must not silently eat into a reservation someone else holds.
    return container_node_pool.ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")


class TpuSlicePool(Construct):
    def __init__(self, scope: Construct, id: str, props: TpuSlicePoolProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.pool = props.cluster.node_pool(
            self,
            "pool",
            name=props.name,
            node_config=node_config(
                props.machine_type,
                props.node_service_account,
                disk_type=props.disk_type,
                disk_size_gb=props.disk_size_gb,
                labels=props.node_labels,
                taints=[TPU_TAINT],
                reservation_affinity=reservation_affinity(props),
                spot=props.capacity == "spot",
            ),
            node_count=props.hosts,
            placement_policy=container_node_pool.ContainerNodePoolPlacementPolicy(
                type="COMPACT", tpu_topology=props.topology
            ),
            upgrade_settings=container_node_pool.ContainerNodePoolUpgradeSettings(
                strategy=UPGRADE_STRATEGY, max_surge=UPGRADE_MAX_SURGE, max_unavailable=UPGRADE_MAX_UNAVAILABLE
            ),
        )
