"""A GKE recipe stack: network, cluster, TPU pools (per capacity mode and slice), the CPU pool, identities,
add-ons."""

from __future__ import annotations

from constructs import Construct

from tpu_rl.infra.cluster_addons import ClusterAddons, ClusterAddonsProps
from tpu_rl.infra.cpu_pool import CpuPool, CpuPoolProps
from tpu_rl.infra.gke_cluster import GkeCluster, GkeClusterProps
from tpu_rl.infra.identity import (
    KubernetesServiceAccountRef,
    NodeServiceAccount,
    NodeServiceAccountProps,
    WorkloadServiceAccount,
    WorkloadServiceAccountProps,
)
from tpu_rl.infra.kueue_queues import QueueProps
from tpu_rl.infra.network import Network, NetworkProps, SecondaryRanges
from tpu_rl.infra.tpu_pool import TpuSlicePool, TpuSlicePoolProps, flex_start_seconds
from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import uses_queued_provisioning
from tpu_rl.recipes.capacity.placement import tpu_places
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.settings.load import Settings
from tpu_rl.stacks.base import TpuRlStack


class GkeRecipeStack(TpuRlStack):
    def __init__(self, scope: Construct, recipe: Recipe, settings: Settings, blocked: str | None = None) -> None:
        super().__init__(scope, recipe.name, settings, blocked)  # checked for this recipe by build_app
        shape = recipe.shape
        name = settings.cluster_name
        # Facts of the generation's flex-start offer, when the recipe (or CAPACITY) uses flex-start.
        flex_start = recipe.tpu_facts.flex_start if uses_queued_provisioning(recipe.capacity) else None
        network = Network(
            self, "network", NetworkProps(name=name, region=settings.region, secondary_ranges=SecondaryRanges(),
                                          allow_internal=True)
        )
        nodes = NodeServiceAccount(self, "node-sa", NodeServiceAccountProps(project=settings.project,
                                                                             account_id=f"{name}-gke-np-sa",
                                                                             bucket=settings.gcs_bucket))
        cluster = GkeCluster(
            self,
            "gke",
            GkeClusterProps(
                name=name,
                project=settings.project,
                region=settings.region,
                zone=settings.zone,
                network=network,
                node_service_account=nodes.email,
                authorized_cidrs=settings.authorized_cidr,
                system_machine_type=conventions.SYSTEM_POOL_MACHINE_TYPE,
                system_min_nodes=conventions.SYSTEM_POOL_NODES,
                # Also given by the provider's default labels; stated on the cluster so that the plan
                # and the security scan show them where billing looks.
                labels=self.labels,
                # GKE creates flex-start TPU node pools only from this version on (recipes.toml,
                # [tpu.<generation>.flex_start]); checked at plan time, see GkeCluster.
                min_master_version=flex_start.min_gke_version if flex_start else None,
            ),
        )
        cpu_machine_type, cpu_machine = recipe.cpu_pool_machine
        cpu_pool = CpuPool(
            self,
            "cpu-pool",
            CpuPoolProps(
                name=conventions.cpu_pool_name(),
                cluster=cluster,
                machine_type=cpu_machine_type,
                disk_type=cpu_machine.disk_type,
                node_service_account=nodes.email,
                taint=conventions.cpu_pool_taint(),
            ),
        )
        # One pool per capacity mode, zone and slice; Kueue picks the mode and zone (a ResourceFlavor each,
        # in this order). The first zone's pools keep their construct ids and names (recipes/capacity/placement.py).
        for place in tpu_places(recipe.capacity, settings.zones):
            capacity = place.mode
            for index in range(shape.slices):
                TpuSlicePool(
                    self,
                    place.construct_id(index),
                    TpuSlicePoolProps(
                        name=place.pool_name(index),
                        zone=place.zone,
                        cluster=cluster,
                        machine_type=shape.machine_type,
                        disk_type=recipe.tpu_host.disk_type,
                        topology=shape.topology,
                        hosts=shape.hosts_per_slice,
                        node_service_account=nodes.email,
                        capacity=capacity,
                        reservation=settings.reservation,
                    ),
                )
        workload = WorkloadServiceAccount(
            self,
            "workload-sa",
            WorkloadServiceAccountProps(
                project=settings.project,
                account_id=f"{name}-gke-wl-sa",
                bucket=settings.gcs_bucket,
                token_secret=None,  # pods read the token from the Kubernetes Secret `run` fills
                # the jobs' pods, and the runs' driver (it reaches the bucket; no other Google role)
                kubernetes_service_accounts=tuple(KubernetesServiceAccountRef(conventions.NAMESPACE, ksa)
                                                  for ksa in (conventions.WORKLOAD_KSA, conventions.DRIVER_KSA)),
                binding_depends_on=[cluster.cluster],
            ),
        )
        ClusterAddons(
            self,
            "addons",
            ClusterAddonsProps(
                cluster=cluster,
                jobset_version=conventions.JOBSET_VERSION,
                kueue_version=conventions.KUEUE_VERSION,
                queues=QueueProps(
                    cluster_queue=conventions.CLUSTER_QUEUE,
                    local_queue=conventions.LOCAL_QUEUE,
                    namespace=conventions.NAMESPACE,
                    tpu_accelerator=shape.gke_accelerator,
                    tpu_topology=shape.topology,
                    tpu_chips=shape.total_chips,
                    tpu_hosts=shape.total_hosts,
                    tpu_host=recipe.tpu_host,
                    cpu_pool=cpu_pool.props.name,
                    cpu_nodes=cpu_pool.props.max_nodes,
                    cpu_machine=cpu_machine,
                    tpu_capacity=recipe.capacity,
                    tpu_zones=settings.zones,
                    flex_start_max_run_seconds=flex_start_seconds(recipe.flex_start_max_run_hours)
                    if flex_start and recipe.flex_start_max_run_hours is not None else None,
                ),
                workload_ksa=conventions.WORKLOAD_KSA,
                workload_google_service_account=workload.email,
                driver_ksa=conventions.DRIVER_KSA,
                depends_on=[cluster.system_pool],
            ),
        )
        self.output("cluster_name", name, "GKE cluster")
        self.output("cluster_location", settings.region, "GKE cluster region")
        self.output("get_credentials_command",
                    conventions.get_credentials_command(name, settings.region, settings.project),
                    "Point kubectl at the cluster")
        self.output("bucket", settings.bucket_url, "Artifacts bucket (owned by the artifacts stack)")
        self.output("local_queue", conventions.LOCAL_QUEUE, f"Kueue LocalQueue in namespace {conventions.NAMESPACE}")
        self.output("workload_service_account", workload.email, f"Google SA of the KSA {conventions.WORKLOAD_KSA}")
