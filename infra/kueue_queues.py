"""The Kueue objects a GKE stack's queues are made of: one ResourceFlavor per capacity mode and zone, the
CPU flavor, the flex-start AdmissionCheck and its ProvisioningRequestConfig, the ClusterQueue with the
stack's own capacity as quota, and the LocalQueue (installed by tpu_rl.infra.cluster_addons)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import CapacityMode, uses_queued_provisioning
from tpu_rl.recipes.capacity.placement import Place, tpu_places
from tpu_rl.recipes.catalog.facts import MachineSize

KUEUE_API = "kueue.x-k8s.io/v1beta2"
TPU_RESOURCE = conventions.TPU_RESOURCE
CPU_FLAVOR = "cpu"
# Flex-start slices through a ProvisioningRequest (tpu_rl.infra.tpu_pool says why): Kueue's admission check
# controller for it, and GKE's provisioning class for flex-start with queued provisioning, whose nodes
# carry the taint below (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest).
PROVISIONING_REQUEST_CONTROLLER = "kueue.x-k8s.io/provisioning-request"  # kueue v0.17.1 apis/kueue/v1beta2/provisioningrequestconfig_types.go
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"


@dataclass(frozen=True)
class QueueProps:
    """What the ClusterQueue admits: exactly the TPU slices and CPU pool the stack creates."""

    cluster_queue: str
    local_queue: str
    namespace: str
    tpu_accelerator: str  # node label value, e.g. tpu-v6e-slice
    tpu_topology: str
    tpu_chips: int  # all slices
    tpu_hosts: int  # all slices
    tpu_host: MachineSize
    cpu_pool: str
    cpu_nodes: int  # the CPU pool's maximum size
    cpu_machine: MachineSize
    # The capacity modes with TPU pools, in the order Kueue tries them: one ResourceFlavor each.
    tpu_capacity: tuple[CapacityMode, ...] = (CapacityMode.RESERVATION,)
    # The zones with TPU pools, in fallback order (ZONE): one flavor per mode and zone, matched also by the
    # zone label GKE puts on nodes (recipes/capacity/placement.py). Empty: one flavor per mode, matched by no zone.
    tpu_zones: tuple[str, ...] = ()
    flex_start_max_run_seconds: int | None = None  # the ProvisioningRequest's maxRunDurationSeconds

    def __post_init__(self) -> None:
        if uses_queued_provisioning(self.tpu_capacity) and not self.flex_start_max_run_seconds:
            raise ValueError("QueueProps.flex_start_max_run_seconds is required when tpu_capacity has flex-start")

    @property
    def places(self) -> tuple[Place, ...]:
        return tpu_places(self.tpu_capacity, self.tpu_zones or ("",))

    @property
    def tpu_vcpus(self) -> int:
        return self.tpu_hosts * self.tpu_host.vcpus

    @property
    def tpu_memory_gib(self) -> int:
        return self.tpu_hosts * self.tpu_host.memory_gib

    @property
    def cpu_vcpus(self) -> int:
        return self.cpu_nodes * self.cpu_machine.vcpus

    @property
    def cpu_memory_gib(self) -> int:
        return self.cpu_nodes * self.cpu_machine.memory_gib


def _quota(chips: int, vcpus: int, memory_gib: int) -> list[dict[str, Any]]:
    return [
        {"name": "cpu", "nominalQuota": str(vcpus)},
        {"name": "memory", "nominalQuota": f"{memory_gib}Gi"},
        {"name": TPU_RESOURCE, "nominalQuota": str(chips)},
    ]


def tpu_flavor_manifest(props: QueueProps, place: Place) -> dict[str, Any]:
    """The ResourceFlavor of one capacity mode's TPU pools in one zone, matched by the label the pools
    carry and, with zones, by the zone label GKE sets on every node (conventions.ZONE_NODE_LABEL).

    Kueue puts the admitted flavor's nodeLabels and tolerations on the pods, and on a flex-start
    ProvisioningRequest's pod template (kubernetes-sigs/kueue v0.17.1 pkg/controller/admissionchecks/provisioning/
    controller.go createPodTemplate; docs/provenance.md#a-flavors-labels-reach-the-admitted-pods). Merging
    refuses a pod that pins another value for one of these keys, so the train workers select only on
    accelerator and topology.
    """
    capacity = place.mode
    tolerations = [conventions.tpu_toleration()]
    zone = {conventions.ZONE_NODE_LABEL: place.zone} if place.zone else {}
    if place.rules.queued_provisioning:  # its nodes are tainted for the pods they were provisioned for
        tolerations.append({"key": QUEUED_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": place.flavor},
        "spec": {
            "nodeLabels": {
                **conventions.tpu_node_selector(props.tpu_accelerator, props.tpu_topology),
                conventions.CAPACITY_NODE_LABEL: capacity,
                **zone,
            },
            "tolerations": tolerations,
        },
    }


def flex_start_manifests(props: QueueProps) -> list[dict[str, Any]]:
    """The AdmissionCheck that holds a flex-start workload until GKE has provisioned its slice, and its
    ProvisioningRequestConfig (kueue v0.17.1 apis/kueue/v1beta2/provisioningrequestconfig_types.go).

    - managedResources google.com/tpu: the request carries only the pod sets that ask for TPU chips (the
      workers), not the Pathways head, which runs on the CPU pool; a ProvisioningRequest takes one pod set.
    - maxRunDurationSeconds: how long GKE keeps the provisioned nodes, the recipe's
      tpu.flex_start_max_run_hours (GKE's ProvisioningRequest parameter; Kueue copies the config's
      parameters into every request, controller.go syncOwnedProvisionRequest).
    - tpu-topology: the slice shape, as Cluster Toolkit's v6e queued-provisioning blueprint passes it
      (examples/gke-consumption-options/dws-flex-start-queued-provisioning/tpu-dws-queues.yaml.tftpl at
      cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a).
    - retryStrategy is left at Kueue's default: a request GKE fails releases the quota and is retried
      3 times, 60 s, 120 s, 240 s apart (at most 1800 s), then the workload is deactivated.
    """
    name = conventions.FLEX_START_ADMISSION_CHECK
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ProvisioningRequestConfig",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": QUEUED_PROVISIONING_CLASS,
                "managedResources": [TPU_RESOURCE],
                "parameters": {
                    "maxRunDurationSeconds": str(props.flex_start_max_run_seconds),
                    "tpu-topology": props.tpu_topology,
                },
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "spec": {
                "controllerName": PROVISIONING_REQUEST_CONTROLLER,
                "parameters": {"apiGroup": KUEUE_API.split("/")[0], "kind": "ProvisioningRequestConfig",
                               "name": name},
            },
        },
    ]


def queue_manifests(props: QueueProps) -> list[dict[str, Any]]:
    """ResourceFlavors, ClusterQueue and LocalQueue whose quota is the stack's own capacity.

    The CPU flavor comes first and has no TPU quota, so a CPU-only pod (the Pathways head, a
    conversion) is placed on the CPU pool and a pod asking for TPU chips falls through to the TPU
    flavors. CPU and memory are covered on every flavor: a missing resource makes Kueue refuse the
    workload (the "Pathways CPU quota missing" pain point).

    One TPU flavor per capacity mode and zone, in the recipe's order and then ZONE's
    (recipes/capacity/placement.py), each with the quota of all slices: "Kueue
    assigns the first flavor in the ClusterQueue's .spec.resourceGroups[*].flavors list that has enough
    unused nominalQuota" (kueue v0.17.1 site/content/en/docs/concepts/cluster_queue.md). So the fallback
    is driven by quota: a workload moves to the next mode when the first one's quota is taken, not when
    its capacity is out of stock (a spot stockout leaves the pods pending on the spot flavor). That fits
    a reservation first, whose quota is exactly what the reservation holds. flavorFungibility is stated
    as Kueue's defaults (MayStopSearch when borrowing; TryNextFlavor rather than preempting): with no
    cohort nothing borrows, and a flavor that would need preemption hands over to the next.
    """
    flavors = [tpu_flavor_manifest(props, place) for place in props.places]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", TPU_RESOURCE],
                "flavors": [
                    {"name": CPU_FLAVOR, "resources": _quota(0, props.cpu_vcpus, props.cpu_memory_gib)},
                    *({"name": flavor["metadata"]["name"],
                       "resources": _quota(props.tpu_chips, props.tpu_vcpus, props.tpu_memory_gib)}
                      for flavor in flavors),
                ],
            }
        ],
    }
    checks = []
    if uses_queued_provisioning(props.tpu_capacity):
        checks = flex_start_manifests(props)
        spec["admissionChecksStrategy"] = {"admissionChecks": [{
            "name": conventions.FLEX_START_ADMISSION_CHECK,
            # the other modes start at once
            "onFlavors": [place.flavor for place in props.places if place.rules.queued_provisioning],
        }]}
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": CPU_FLAVOR},
            # nodeTaints: Kueue gives this flavor only to a pod set that tolerates the pool's taint
            # (kueue v0.17.1 pkg/scheduler/flavorassigner/flavorassigner.go, FindMatchingUntoleratedTaint),
            # so a CPU pod without it is refused at admission instead of Pending on an admitted quota.
            "spec": {"nodeLabels": {conventions.NODE_POOL_LABEL: props.cpu_pool},
                     "nodeTaints": [dict(zip(("key", "value", "effect"), conventions.cpu_pool_taint()))]},
        },
        *flavors,
        *checks,
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": props.cluster_queue},
            "spec": spec,
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": props.local_queue, "namespace": props.namespace},
            "spec": {"clusterQueue": props.cluster_queue},
        },
    ]
