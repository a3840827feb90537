"""A CPU node pool that scales from zero: the Pathways head, checkpoint conversion and export run here."""

from __future__ import annotations

from dataclasses import dataclass, field

from constructs import Construct

from tpu_rl.infra.gke_cluster import GkeCluster, Taint, node_config
from tpu_rl.infra.google import container_node_pool


# A taint's effect as Kubernetes writes it (what pods tolerate) and as the GKE API takes it on a node pool
# (hashicorp/google 6.50.0 node_config `taint.effect`: NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE).
GKE_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


def gke_taint(taint: Taint) -> Taint:
    key, value, effect = taint
    return key, value, GKE_TAINT_EFFECTS[effect]


@dataclass(frozen=True)
class CpuPoolProps:
    name: str
    cluster: GkeCluster
    machine_type: str
    disk_type: str  # from the recipe's machine table
    node_service_account: str
    min_nodes: int = 0  # no CPU spend while nothing runs
    max_nodes: int = 2  # the head or a conversion, plus one spare
    disk_size_gb: int = 200  # conversions stage checkpoints on local disk
    node_labels: dict[str, str] = field(default_factory=dict)  # Kubernetes labels of the nodes
    # (key, value, Kubernetes effect), e.g. tpu_rl.recipes.conventions.cpu_pool_taint(): only the pods that tolerate
    # it land on the pool, so nothing else keeps a scaled-up node from scaling down.
    taint: Taint | None = None


class CpuPool(Construct):
    def __init__(self, scope: Construct, id: str, props: CpuPoolProps) -> None:
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
                taints=[gke_taint(props.taint)] if props.taint else (),
            ),
            initial_node_count=props.min_nodes,
            autoscaling=container_node_pool.ContainerNodePoolAutoscaling(
                min_node_count=props.min_nodes, max_node_count=props.max_nodes
            ),
        )
