"""What a GKE recipe needs inside the cluster: JobSet, Kueue, its queues and the workload KSA.

Installed with the helm provider, so nothing needs the cluster at plan time: the provider connects
only when it applies (deferred configuration), after the cluster exists. JobSet and Kueue come from
their official OCI charts at pinned versions; the queues and the service account come from a
logic-free local chart fed with manifests rendered here (:func:`queue_manifests`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from cdktf import AssetType, Fn, ITerraformDependable, TerraformAsset
from cdktf_cdktf_provider_helm import provider as helm_provider
from cdktf_cdktf_provider_helm import release as helm_release
from constructs import Construct

from infra.gke_cluster import SYSTEM_POOL, GkeCluster
from recipes import conventions
from recipes.capacity_modes import CapacityMode
from recipes.catalog import MachineSize
from recipes.placement import Place, tpu_places

MANIFESTS_CHART = Path(__file__).parent / "charts" / "manifests"
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts"
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
TPU_RESOURCE = conventions.TPU_RESOURCE
CPU_FLAVOR = "cpu"
# Flex-start slices through a ProvisioningRequest (infra.tpu_pool says why): Kueue's admission check
# controller for it, and GKE's provisioning class for flex-start with queued provisioning, whose nodes
# carry the taint below (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest).
PROVISIONING_REQUEST_CONTROLLER = "kueue.x-k8s.io/provisioning-request"  # kueue v0.17.1 apis/kueue/v1beta2/provisioningrequestconfig_types.go
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"
# GKE's own credential plugin: the provider gets a fresh token per call, none lands in state.
GKE_AUTH_PLUGIN = "gke-gcloud-auth-plugin"

# The Kueue webhook race. Kueue's pod reports Ready only once its certificates are injected and its
# webhook server listens (kubernetes-sigs/kueue v0.17.1 cmd/kueue/main.go setupProbeEndpoints,
# pkg/util/cert/cert.go BootstrapCerts), so `wait` on its release covers those; what it does not cover is
# the EndpointSlice of the webhook Service catching up with the Ready pod (kueue PR #8220), during which
# creating a ResourceFlavor, ClusterQueue or LocalQueue fails with "no endpoints available for service"
# or "connection refused". Cluster Toolkit sleeps 60 s between the Kueue release and its queue objects
# (time_sleep.wait_for_webhook, modules/management/kubectl-apply/main.tf:243-267 at cluster-toolkit
# @1047080375afbb44da4b596be314634e7486af4a). The hashicorp/time provider has no binding installed here,
# so instead the queue release waits for the condition itself: a Helm pre-install/pre-upgrade hook pod
# that connects to the webhook Service until it answers a few times in a row. Helm creates the release's
# objects only after a hook pod has succeeded, and fails the release if it fails. It is a bare Pod in
# Kueue's namespace, so that creating it does not itself need the webhook it waits for: Kueue's webhook
# for batch Jobs covers every namespace, while its pod webhook leaves out kube-system and its own
# namespace (both failurePolicy Fail with the chart's default integrations; mjob.kb.io and mpod.kb.io in
# charts/kueue/templates/webhook/manifests.yaml and charts/kueue/values.yaml at v0.17.1).
KUEUE_RELEASE = "kueue"
# Service "<fullname>-webhook-service", port 443; fullname is the release name when it contains the chart
# name (kueue v0.17.1 charts/kueue/templates/webhook/service.yaml, _helpers.tpl, values.yaml).
KUEUE_WEBHOOK_PORT = 443
KUEUE_WEBHOOK_PROBE = "kueue-webhook-ready"
# docker-library/official-images@37079fb336f572a88700cf32e5e1f6be54a04e8f library/busybox: "Tags: 1.37.0,
# 1.37" (1.38 is tagged unstable). Its nc has -z and -w: docker-library/busybox builds `make defconfig`
# (latest-1/glibc/Dockerfile.builder), where NC_110_COMPAT defaults to y (busybox networking/nc.c).
WEBHOOK_PROBE_IMAGE = "docker.io/library/busybox:1.37.0"
WEBHOOK_PROBE_TRIES = 60  # 2-4 s apart: the release fails after about 2 to 4 minutes, inside Helm's 300 s
WEBHOOK_PROBE_IN_A_ROW = 3  # both the probe's node and the API server must have seen the endpoint

# The queue objects' release lives in a namespace of its own. Helm keeps each release's records as
# Secrets in the release's namespace and reads them by listing Secrets there (label owner=helm;
# helm/helm@02ad2b118731d012ea248e3ede800aa28fa71301 pkg/storage/driver/secrets.go, List and Query),
# and RBAC authorizes list for every name in a namespace (kubernetes/kubernetes#54079). So whoever may
# read a release (a full `terraform plan` refreshes it) may read every Secret beside it: the token
# Secret that `tpu-rl run` fills is in conventions.NAMESPACE, and no release may be. The objects keep
# their own metadata.namespace (the LocalQueue and the workload KSA stay in conventions.NAMESPACE).
QUEUES_RELEASE = "tpu-rl-queues"
QUEUES_RELEASE_NAMESPACE = QUEUES_RELEASE


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
    tpu_capacity: tuple[CapacityMode, ...] = ("reservation",)
    # The zones with TPU pools, in fallback order (ZONE): one flavor per mode and zone, matched also by the
    # zone label GKE puts on nodes (recipes/placement.py). Empty: one flavor per mode, matched by no zone.
    tpu_zones: tuple[str, ...] = ()
    flex_start_max_run_seconds: int | None = None  # the ProvisioningRequest's maxRunDurationSeconds

    def __post_init__(self) -> None:
        if "flex-start" in self.tpu_capacity and not self.flex_start_max_run_seconds:
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

    Kueue adds a flavor's nodeLabels to the nodeSelector and its tolerations to the pods it admits to it
    (kubernetes-sigs/kueue v0.17.1, site/content/en/docs/concepts/resource_flavor.md; for a JobSet,
    pkg/controller/jobs/jobset/jobset_controller.go RunWithPodSetsInfo), so an admitted worker lands on a
    pool of the chosen mode and zone. Merging refuses a pod that pins another value for one of these keys
    (pkg/podset/podset.go), which is why the train workers select only on accelerator and topology. A
    flex-start request is filed for that zone too: Kueue applies the admitted flavor's node selectors to
    the pod template of the ProvisioningRequest (pkg/controller/admissionchecks/provisioning/
    controller.go:362-368 at v0.17.1, "apply the admission node selectors to the Template").
    """
    capacity = place.mode
    tolerations = [conventions.tpu_toleration()]
    zone = {conventions.ZONE_NODE_LABEL: place.zone} if place.zone else {}
    if capacity == "flex-start":  # queued-provisioning nodes are tainted for the pods they were provisioned for
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
    (recipes/placement.py), each with the quota of all slices: "Kueue
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
    if "flex-start" in props.tpu_capacity:
        checks = flex_start_manifests(props)
        spec["admissionChecksStrategy"] = {"admissionChecks": [{
            "name": conventions.FLEX_START_ADMISSION_CHECK,
            # the other modes start at once
            "onFlavors": [place.flavor for place in props.places if place.mode == "flex-start"],
        }]}
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": CPU_FLAVOR},
            "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": props.cpu_pool}},
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


def controller_namespace(release: str) -> str:
    return f"{release}-system"


def kueue_webhook_host() -> str:
    return f"{KUEUE_RELEASE}-webhook-service.{controller_namespace(KUEUE_RELEASE)}.svc"


def webhook_probe_script(host: str, port: int) -> str:
    """POSIX sh for busybox: exit 0 once host:port accepted WEBHOOK_PROBE_IN_A_ROW connections in a row."""
    refusal = (f"the Kueue webhook {host}:{port} did not accept connections after $tries tries: "
               f"see kubectl -n {controller_namespace(KUEUE_RELEASE)} get pods,endpointslices")
    return f"""in_a_row=0
tries=0
while [ "$tries" -lt {WEBHOOK_PROBE_TRIES} ]; do
  tries=$((tries + 1))
  if nc -z -w 2 {host} {port}; then in_a_row=$((in_a_row + 1)); else in_a_row=0; fi
  if [ "$in_a_row" -ge {WEBHOOK_PROBE_IN_A_ROW} ]; then exit 0; fi
  sleep 2
done
echo "{refusal}" >&2
exit 1
"""


def kueue_webhook_probe_manifest() -> dict[str, Any]:
    """The hook pod that holds back the queue objects until Kueue's webhook Service answers."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": KUEUE_WEBHOOK_PROBE,
            "namespace": controller_namespace(KUEUE_RELEASE),
            "annotations": {
                "helm.sh/hook": "pre-install,pre-upgrade",
                # Gone once it succeeded; a failed one stays for `kubectl logs` until the next attempt.
                "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {"cloud.google.com/gke-nodepool": SYSTEM_POOL},  # where Kueue runs; never scales a pool up
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": WEBHOOK_PROBE_IMAGE,
                    "command": ["sh", "-c", webhook_probe_script(kueue_webhook_host(), KUEUE_WEBHOOK_PORT)],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                  "limits": {"cpu": "100m", "memory": "32Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


def workload_service_account_manifest(namespace: str, name: str, google_service_account: str) -> dict[str, Any]:
    """The Kubernetes SA the jobs run as, mapped to the workload Google SA by Workload Identity."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"iam.gke.io/gcp-service-account": google_service_account},
        },
    }


def release_namespaces() -> tuple[str, ...]:
    """Where the add-ons' Helm releases (and so their release Secrets) live: the only namespaces in which
    a plan identity may be granted Secret reads (docs/plan-review.md)."""
    return (controller_namespace("jobset"), controller_namespace(KUEUE_RELEASE), QUEUES_RELEASE_NAMESPACE)


def chart_version(tag: str) -> str:
    """OCI chart versions are the release tags without the leading v."""
    return tag.removeprefix("v")


@dataclass(frozen=True)
class ClusterAddonsProps:
    cluster: GkeCluster
    jobset_version: str  # release tag, e.g. v0.12.0
    kueue_version: str
    queues: QueueProps
    workload_ksa: str
    workload_google_service_account: str  # email
    # The controllers run on the system pool; installing them waits for it.
    depends_on: Sequence[ITerraformDependable] = ()


class ClusterAddons(Construct):
    def __init__(self, scope: Construct, id: str, props: ClusterAddonsProps) -> None:
        super().__init__(scope, id)
        self.provider = helm_provider.HelmProvider(
            self,
            "helm",
            kubernetes=helm_provider.HelmProviderKubernetes(
                host=f"https://{props.cluster.endpoint}",
                cluster_ca_certificate=Fn.base64decode(props.cluster.ca_certificate),
                exec=helm_provider.HelmProviderKubernetesExec(
                    api_version="client.authentication.k8s.io/v1beta1", command=GKE_AUTH_PLUGIN
                ),
            ),
        )
        after = list(props.depends_on)
        self.jobset = self._official_chart("jobset", JOBSET_CHART, props.jobset_version, after)
        # wait=True on both: the controllers are Ready before anything uses them; the queue release then
        # waits for Kueue's webhook endpoint itself (kueue_webhook_probe_manifest).
        self.kueue = self._official_chart(KUEUE_RELEASE, KUEUE_CHART, props.kueue_version, [*after, self.jobset])
        chart = TerraformAsset(self, "manifests-chart", path=str(MANIFESTS_CHART), type=AssetType.DIRECTORY)
        self.manifests = [
            kueue_webhook_probe_manifest(),  # a hook: runs before the objects below are created
            *queue_manifests(props.queues),
            workload_service_account_manifest(
                props.queues.namespace, props.workload_ksa, props.workload_google_service_account
            ),
        ]
        self.queues = helm_release.Release(
            self,
            "queues",
            provider=self.provider,
            name=QUEUES_RELEASE,
            chart=chart.path,
            namespace=QUEUES_RELEASE_NAMESPACE,  # not the workloads' (see QUEUES_RELEASE)
            create_namespace=True,
            values=[yaml.safe_dump({"manifests": self.manifests}, sort_keys=False, width=10_000)],
            depends_on=[self.kueue],
        )

    def _official_chart(self, name: str, repository: str, tag: str, after: list) -> helm_release.Release:
        """A controller from its project's OCI chart, pinned, in its own <name>-system namespace."""
        return helm_release.Release(
            self,
            name,
            provider=self.provider,
            name=name,
            repository=repository,
            chart=name,
            version=chart_version(tag),
            namespace=controller_namespace(name),
            create_namespace=True,
            wait=True,
            depends_on=after or None,
        )
