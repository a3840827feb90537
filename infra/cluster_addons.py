"""What a GKE recipe needs inside the cluster: JobSet, Kueue, its queues, the workload KSA and the driver's
KSA with its Role.

Installed with the helm provider, so nothing needs the cluster at plan time: the provider connects
only when it applies (deferred configuration), after the cluster exists. JobSet and Kueue come from
their official OCI charts at pinned versions; the queues and the service account come from a
logic-free local chart fed with manifests rendered here (tpu_rl.infra.kueue_queues,
tpu_rl.infra.kueue_webhook_probe, tpu_rl.infra.driver_identity).
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

from tpu_rl.infra.driver_identity import driver_role_manifests
from tpu_rl.infra.gke_cluster import GkeCluster
from tpu_rl.infra.kueue_queues import QueueProps, queue_manifests
from tpu_rl.infra.kueue_webhook_probe import (
    KUEUE_RELEASE,
    controller_namespace,
    kueue_webhook_probe_manifest,
)
from tpu_rl.recipes import conventions
from tpu_rl.recipes.conventions import on_system_pool

MANIFESTS_CHART = Path(__file__).parent / "charts" / "manifests"
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts"
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts"
# GKE's own credential plugin: the provider gets a fresh token per call, none lands in state.
GKE_AUTH_PLUGIN = "gke-gcloud-auth-plugin"

# The queue objects' release has a namespace of its own: Helm reads a release by listing the Secrets of
# its namespace (helm/helm@02ad2b11 pkg/storage/driver/secrets.go), so no release may sit beside the token
# Secret in conventions.NAMESPACE (docs/provenance.md#helm-release-namespace).
QUEUES_RELEASE = conventions.QUEUES_RELEASE
QUEUES_RELEASE_NAMESPACE = QUEUES_RELEASE


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


# `cdktf destroy` must finish, or the cluster, its system pool and NAT keep billing. The helm provider
# uninstalls with the release's `wait` (hashicorp/terraform-provider-helm v3.1.1 helm/resource_helm_release.go,
# Delete), and Kueue's finalizers hold its queue objects, Workloads and so its CRDs while a run is
# admitted: the Kueue and queue releases uninstall without waiting (docs/stacks.md, "Deploy and destroy").
# Their hook pod is still waited for, up to this timeout, and now also covers Kueue's start.
QUEUES_RELEASE_TIMEOUT = 600


def kueue_values() -> dict[str, Any]:
    """Kueue's controller on the system pool, never on a CPU or TPU node it would keep from scaling down
    (controllerManager.nodeSelector in kubernetes-sigs/kueue v0.17.1 charts/kueue/values.yaml, used by
    templates/manager/manager.yaml)."""
    return {"controllerManager": {"nodeSelector": on_system_pool()}}


def jobset_values() -> dict[str, Any]:
    """JobSet's controller on the system pool (controller.nodeSelector in kubernetes-sigs/jobset v0.12.0
    charts/jobset/values.yaml, used by templates/controller/deployment.yaml)."""
    return {"controller": {"nodeSelector": on_system_pool()}}


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
    # The runs' driver: a KSA on the same Google SA (the bucket), with its own namespaced Role.
    driver_ksa: str
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
        # JobSets carry no finalizer (kubernetes-sigs/jobset v0.12.0), so waiting on its uninstall ends.
        self.jobset = self._official_chart("jobset", JOBSET_CHART, props.jobset_version, after,
                                           values=jobset_values(), wait=True)
        # No wait (see QUEUES_RELEASE_TIMEOUT): the queue release's hook waits for Kueue's webhook endpoint,
        # which Kueue's pod joins only once it is Ready (kueue_webhook_probe_manifest).
        self.kueue = self._official_chart(KUEUE_RELEASE, KUEUE_CHART, props.kueue_version, [*after, self.jobset],
                                          values=kueue_values(), wait=False)
        chart = TerraformAsset(self, "manifests-chart", path=str(MANIFESTS_CHART), type=AssetType.DIRECTORY)
        self.manifests = [
            # a hook: runs before the objects below are created, and again with each Kueue version
            kueue_webhook_probe_manifest(chart_version(props.kueue_version)),
            *queue_manifests(props.queues),
            workload_service_account_manifest(
                props.queues.namespace, props.workload_ksa, props.workload_google_service_account
            ),
            workload_service_account_manifest(
                props.queues.namespace, props.driver_ksa, props.workload_google_service_account
            ),
            *driver_role_manifests(props.queues.namespace, props.driver_ksa),
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
            wait=False,  # see QUEUES_RELEASE_TIMEOUT
            timeout=QUEUES_RELEASE_TIMEOUT,
            depends_on=[self.kueue],  # so destroyed before Kueue, while Kueue still answers its webhooks
        )

    def _official_chart(self, name: str, repository: str, tag: str, after: list, *, values: dict[str, Any],
                        wait: bool) -> helm_release.Release:
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
            values=[yaml.safe_dump(values, sort_keys=False)],
            wait=wait,
            depends_on=after or None,
        )
