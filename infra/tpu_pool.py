"""One GKE node pool per TPU slice and capacity mode: compactly placed hosts of one topology.

How each capacity mode gets its hosts (its row of recipes/capacity/modes.py says which of these applies):
- reservation: every host of the slice, from deploy to destroy (`node_count`), from the specific
  reservation. The reservation is billed for its term whether used or not, so idle hosts cost nothing
  extra; these are the pools the stacks always created.
- spot, on-demand: no host until a train step's pods ask for one. The pool autoscales from 0 to the
  slice's hosts; GKE scales a multi-host slice pool atomically, all hosts or none, and back to 0 when
  no TPU workload is left ("About TPUs in GKE", https://docs.cloud.google.com/tpu/docs/kubernetes-engine-setup,
  Cloud TPU node pool autoscaling: "the node pool always has either 64 nodes or zero nodes").
- flex-start (Dynamic Workload Scheduler): like spot and on-demand, plus `flex_start` and queued
  provisioning. With queued provisioning GKE creates the nodes only for a ProvisioningRequest, which
  Kueue files for a train step and which GKE fulfils with the whole slice at once; Kueue starts the step
  only then (tpu_rl.infra.kueue_queues, the flex-start AdmissionCheck). How long the nodes live is the
  request's maxRunDurationSeconds, not a node-pool max_run_duration (see QUEUED_POOL_FIELDS_LEFT_OUT).

Why queued provisioning rather than plain flex-start for these multi-host slices: without it, Kueue
admits the train JobSet as soon as its quota fits, so the Pathways head starts on the CPU pool (and
bills) while the workers wait, possibly for hours, for the autoscaler to find a flex-start slice. With
it, nothing of the step runs until GKE reports the slice provisioned, and a request GKE gives up on
releases the quota and is retried with backoff. GKE recommends it for "workloads [that] are required to
run across multiple nodes simultaneously" and plain flex-start "for smaller workloads that can run on a
single node" (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest), and Google's
TPU fallback tutorial creates exactly such a pool for a multi-host v6e slice:
`--machine-type=ct6e-standard-4t --tpu-topology=4x4 --reservation-affinity=none --enable-autoscaling
--enable-queued-provisioning --flex-start --num-nodes=0 --min-nodes=0 --max-nodes=4`
(https://cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws). A ProvisioningRequest takes
one pod set; the train JobSet has two (the Pathways head on the CPU pool, the TPU workers), which is why
the ProvisioningRequestConfig lists google.com/tpu as its only managed resource: Kueue then puts only
the pod sets that request a TPU into the request (kubernetes-sigs/kueue v0.17.1,
pkg/controller/admissionchecks/provisioning/controller.go, requiredPodSets).

Field by field, the autoscaled pools follow Cluster Toolkit's gke-node-pool module and its v6e flex-start
blueprints (GoogleCloudPlatform/cluster-toolkit@1047080375, docs/provenance.md#autoscaled-tpu-pools-follow-cluster-toolkit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from constructs import Construct

from tpu_rl.infra.capacity import RESERVATION_KEY, check_reservation
from tpu_rl.infra.gke_cluster import GkeCluster, node_config
from tpu_rl.infra.google import container_node_pool
from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode

TPU_TAINT = (conventions.TPU_RESOURCE, "present", "NO_SCHEDULE")  # the taint GKE puts on its own TPU node pools

# A slice is upgraded in place, no surge host: a surge host must come from the reservation, which holds
# only the stack's slices. Cluster Toolkit gke-node-pool's defaults (docs/provenance.md#tpu-pool-upgrade-strategy).
UPGRADE_STRATEGY = "SURGE"
UPGRADE_MAX_SURGE = 0
UPGRADE_MAX_UNAVAILABLE = 1

# Left out of the flex-start pool: upgrade_settings (GKE sets SHORT_LIVED, which hashicorp/google 6.50.0
# cannot write, so a block would diff on every plan) and max_run_duration (the ProvisioningRequest's
# maxRunDurationSeconds bounds the nodes, as in xpk v1.13.1; docs/provenance.md#flex-start-pool-fields-left-out).
QUEUED_POOL_FIELDS_LEFT_OUT = ("upgrade_settings", "max_run_duration")

# The autoscaler may place the slice in any of the pool's zones (there is one, TpuSlicePoolProps.zone): the GKE
# queued-provisioning how-to's `--location-policy=ANY`, as Cluster Toolkit and xpk set it.
AUTOSCALING_LOCATION_POLICY = "ANY"


@dataclass(frozen=True)
class TpuSlicePoolProps:
    name: str
    cluster: GkeCluster
    machine_type: str
    disk_type: str  # from the recipe's machine table
    topology: str
    hosts: int  # every host of the slice: node_count of a reservation's pool, the maximum of the others
    node_service_account: str
    capacity: CapacityMode
    reservation: str | None = None
    disk_size_gb: int = 100
    node_labels: dict[str, str] = field(default_factory=dict)  # Kubernetes labels of the nodes
    # The pool's one zone (None: the cluster's first): COMPACT placement is offered only within one zone, and a
    # stack with several zones has a pool per zone (docs/provenance.md#one-zone-per-slice-pool).
    zone: str | None = None

    def __post_init__(self) -> None:
        check_reservation("TpuSlicePoolProps", self.capacity, self.reservation)

    @property
    def static(self) -> bool:
        return not MODE_RULES[self.capacity].scales_to_zero


def reservation_affinity(props: TpuSlicePoolProps) -> container_node_pool.ContainerNodePoolNodeConfigReservationAffinity:
    bound = check_reservation("TpuSlicePoolProps", props.capacity, props.reservation)
    if bound is not None:
        return container_node_pool.ContainerNodePoolNodeConfigReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[bound]
        )
    # Spot, flex-start and on-demand capacity must not silently eat into a reservation someone else holds.
    return container_node_pool.ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")


def flex_start_seconds(hours: int) -> int:
    """How long GKE keeps a flex-start slice: the ProvisioningRequest's maxRunDurationSeconds."""
    return hours * 3600


def upgrade_settings(props: TpuSlicePoolProps) -> container_node_pool.ContainerNodePoolUpgradeSettings | None:
    """In-place upgrades for the pools that take them; none for flex-start (QUEUED_POOL_FIELDS_LEFT_OUT)."""
    if MODE_RULES[props.capacity].queued_provisioning:
        return None
    return container_node_pool.ContainerNodePoolUpgradeSettings(
        strategy=UPGRADE_STRATEGY, max_surge=UPGRADE_MAX_SURGE, max_unavailable=UPGRADE_MAX_UNAVAILABLE
    )


class PoolSizing(TypedDict, total=False):
    node_count: int
    initial_node_count: int
    autoscaling: container_node_pool.ContainerNodePoolAutoscaling


def sizing(props: TpuSlicePoolProps) -> PoolSizing:
    """A reservation's pool holds every host; the others scale between 0 and the slice's hosts."""
    if props.static:
        return {"node_count": props.hosts}
    return {
        "initial_node_count": 0,
        "autoscaling": container_node_pool.ContainerNodePoolAutoscaling(
            min_node_count=0, max_node_count=props.hosts, location_policy=AUTOSCALING_LOCATION_POLICY
        ),
    }


class TpuSlicePool(Construct):
    def __init__(self, scope: Construct, id: str, props: TpuSlicePoolProps) -> None:
        super().__init__(scope, id)
        self.props = props
        flex_start = MODE_RULES[props.capacity].queued_provisioning
        self.pool = props.cluster.node_pool(
            self,
            "pool",
            name=props.name,
            node_config=node_config(
                props.machine_type,
                props.node_service_account,
                disk_type=props.disk_type,
                disk_size_gb=props.disk_size_gb,
                labels={**props.node_labels, conventions.CAPACITY_NODE_LABEL: props.capacity},
                taints=[TPU_TAINT],
                reservation_affinity=reservation_affinity(props),
                spot=MODE_RULES[props.capacity].spot,
                flex_start=flex_start or None,
            ),
            # Cluster Toolkit refuses flex-start with auto-repair on ("enable_flex_start needs node auto_repair
            # set to false", a gke-node-pool precondition); GKE's queued-provisioning how-to passes
            # --no-enable-autorepair because a repair "could disrupt workloads that run on repaired nodes".
            auto_repair=not flex_start,
            queued_provisioning=container_node_pool.ContainerNodePoolQueuedProvisioning(enabled=True)
            if flex_start else None,
            placement_policy=container_node_pool.ContainerNodePoolPlacementPolicy(
                type="COMPACT", tpu_topology=props.topology
            ),
            upgrade_settings=upgrade_settings(props),
            zone=props.zone,
            **sizing(props),
        )
