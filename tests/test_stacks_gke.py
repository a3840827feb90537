"""The GKE recipe stacks (qwen3-v6e32, gemma4-v6e64), read from the synthesized Terraform JSON."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from conftest import only, outputs, queue_manifests, resources, tpu_pools
from terraform_cli import terraform_outputs

from tpu_rl.infra.identity import NODE_ROLES
from tpu_rl.recipes import all_recipes, conventions, example_settings

GKE = ["qwen3-v6e32", "gemma4-v6e64"]


def pool_named(stack, name: str) -> dict:
    (pool,) = [pool for pool in resources(stack, "google_container_node_pool").values() if pool["name"] == name]
    return pool


def service_account_id(stack, role_suffix: str) -> str:
    """Logical id of the Google SA whose account id ends with role_suffix (-gke-np-sa, -gke-wl-sa)."""
    (logical_id,) = [k for k, sa in resources(stack, "google_service_account").items()
                     if sa["account_id"].endswith(role_suffix)]
    return logical_id


def quota(cluster_queue: dict, flavor: str) -> dict[str, str]:
    (group,) = cluster_queue["spec"]["resourceGroups"]
    (entry,) = [f for f in group["flavors"] if f["name"] == flavor]
    return {r["name"]: r["nominalQuota"] for r in entry["resources"]}


def test_qwen3_pool_has_8_hosts_on_4x8(stacks_json):
    (pool,) = tpu_pools(stacks_json["qwen3-v6e32"])
    assert pool["node_count"] == 8
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x8"}
    assert pool["node_config"]["machine_type"] == "ct6e-standard-4t"


def test_gemma4_pool_has_16_hosts_on_8x8(stacks_json):
    (pool,) = tpu_pools(stacks_json["gemma4-v6e64"])
    assert pool["node_count"] == 16
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "8x8"}
    assert pool["node_config"]["machine_type"] == "ct6e-standard-4t"


@pytest.mark.parametrize("stack", GKE)
def test_tpu_pools_bind_to_the_specific_reservation(stacks_json, stack):
    (pool,) = tpu_pools(stacks_json[stack])
    assert pool["node_config"]["reservation_affinity"] == {
        "consume_reservation_type": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [example_settings().reservation],
    }
    assert pool["node_config"]["spot"] is False


@pytest.mark.parametrize("stack", GKE)
def test_tpu_pools_are_tainted_and_use_the_gke_metadata_server(stacks_json, stack):
    (pool,) = tpu_pools(stacks_json[stack])
    config = pool["node_config"]
    assert config["taint"] == [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert config["workload_metadata_config"] == {"mode": "GKE_METADATA"}
    assert pool["node_locations"] == [example_settings().zone]


@pytest.mark.parametrize("stack", GKE)
def test_every_node_pool_runs_as_the_node_service_account_on_the_metadata_server(stacks_json, stack):
    node_sa = service_account_id(stacks_json[stack], "-gke-np-sa")
    for pool in resources(stacks_json[stack], "google_container_node_pool").values():
        assert pool["node_config"]["service_account"] == f"${{google_service_account.{node_sa}.email}}"
        assert pool["node_config"]["workload_metadata_config"] == {"mode": "GKE_METADATA"}


@pytest.mark.parametrize(("stack", "machine"), [("qwen3-v6e32", "n4-standard-64"), ("gemma4-v6e64", "c4d-standard-96")])
def test_cpu_pool_scales_from_zero_on_the_recipes_machine_type(stacks_json, stack, machine):
    pool = pool_named(stacks_json[stack], conventions.cpu_pool_name())
    assert pool["node_config"]["machine_type"] == machine
    assert pool["autoscaling"]["min_node_count"] == 0
    assert pool["initial_node_count"] == 0
    assert pool["node_config"]["disk_type"] == "hyperdisk-balanced"  # N4 and C4D take Hyperdisk only


@pytest.mark.parametrize("stack", GKE)
def test_cluster_is_regional_standard_with_private_nodes_and_workload_identity(stacks_json, stack):
    settings = example_settings()
    cluster = only(stacks_json[stack], "google_container_cluster")
    assert cluster["name"] == settings.cluster_name
    assert cluster["location"] == settings.region
    assert cluster["private_cluster_config"]["enable_private_nodes"] is True
    assert cluster["workload_identity_config"] == {"workload_pool": f"{settings.project}.svc.id.goog"}
    assert cluster["release_channel"] == {"channel": "REGULAR"}
    assert cluster["remove_default_node_pool"] is True
    assert cluster["networking_mode"] == "VPC_NATIVE"
    assert cluster["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
    assert cluster["deletion_protection"] is False  # `cdktf destroy` must be able to stop the spend


@pytest.mark.parametrize("stack", GKE)
def test_master_authorized_networks_are_the_settings_cidrs_and_never_everyone(stacks_json, stack):
    config = only(stacks_json[stack], "google_container_cluster")["master_authorized_networks_config"]
    cidrs = [block["cidr_block"] for block in config["cidr_blocks"]]
    assert cidrs == list(example_settings().authorized_cidr)
    assert "0.0.0.0/0" not in cidrs
    assert config["gcp_public_cidrs_access_enabled"] is False


@pytest.mark.parametrize("stack", GKE)
def test_small_system_pool_in_the_tpu_zone(stacks_json, stack):
    pool = pool_named(stacks_json[stack], "system-np")
    assert pool["autoscaling"] == {"min_node_count": 1, "max_node_count": 3}
    assert pool["node_config"]["machine_type"] == conventions.SYSTEM_POOL_MACHINE_TYPE  # what the cost estimate prices
    assert pool["node_locations"] == [example_settings().zone]


@pytest.mark.parametrize("stack", GKE)
def test_network_has_pod_and_service_ranges_and_nat(stacks_json, stack):
    stack_json = stacks_json[stack]
    subnet = only(stack_json, "google_compute_subnetwork")
    ranges = {r["range_name"]: r["ip_cidr_range"] for r in subnet["secondary_ip_range"]}
    assert ranges == {"pods": "10.4.0.0/14", "services": "10.0.32.0/20"}
    assert subnet["private_ip_google_access"] is True
    assert only(stack_json, "google_compute_network")["auto_create_subnetworks"] is False
    nat = only(stack_json, "google_compute_router_nat")
    assert nat["source_subnetwork_ip_ranges_to_nat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    router_id = next(iter(resources(stack_json, "google_compute_router")))
    assert nat["router"] == f"${{google_compute_router.{router_id}.name}}"
    internal = only(stack_json, "google_compute_firewall")
    assert internal["source_ranges"] == ["192.168.0.0/18", "10.4.0.0/14"]  # the VPC's own nodes and pods only
    assert internal["direction"] == "INGRESS"
    cluster = only(stack_json, "google_container_cluster")
    assert cluster["ip_allocation_policy"] == {
        "cluster_secondary_range_name": "pods",
        "services_secondary_range_name": "services",
    }


@pytest.mark.parametrize("stack", GKE)
def test_node_service_account_has_only_logging_monitoring_and_registry_roles(stacks_json, stack):
    roles = sorted(m["role"] for m in resources(stacks_json[stack], "google_project_iam_member").values())
    assert roles == sorted(NODE_ROLES)
    assert set(NODE_ROLES) == {
        "roles/logging.logWriter",
        "roles/monitoring.metricWriter",
        "roles/monitoring.viewer",
        "roles/stackdriver.resourceMetadata.writer",
        "roles/artifactregistry.reader",
    }


@pytest.mark.parametrize("stack", GKE)
def test_workload_sa_gets_storage_admin_on_the_bucket_only_and_no_secret_manager_role(stacks_json, stack):
    # Pods get the token from the Kubernetes Secret that `tpu-rl run` fills with the caller's own
    # credentials (scripts/pipeline/gke/submit.py); nothing in the cluster reads Secret Manager (issue 20, 6).
    settings = example_settings()
    stack_json = stacks_json[stack]
    wl = service_account_id(stack_json, "-gke-wl-sa")
    member = f"${{google_service_account.{wl}.member}}"  # "serviceAccount:<email>"
    bucket_grants = [g for g in resources(stack_json, "google_storage_bucket_iam_member").values()
                     if g["member"] == member]
    assert [(g["bucket"], g["role"]) for g in bucket_grants] == [(settings.gcs_bucket, "roles/storage.admin")]
    assert resources(stack_json, "google_secret_manager_secret_iam_member") == {}
    project_members = {m["member"] for m in resources(stack_json, "google_project_iam_member").values()}
    assert not any(wl in m for m in project_members)


@pytest.mark.parametrize("stack", GKE)
def test_cluster_carries_the_stack_labels_for_billing(stacks_json, stack):
    cluster = only(stacks_json[stack], "google_container_cluster")
    assert cluster["resource_labels"] == {"managed_by": "tpu-rl", "tpu_rl_stack": stack}


@pytest.mark.parametrize("stack", GKE)
def test_node_sa_reads_and_writes_objects_of_the_bucket_only_for_host_network_pods(stacks_json, stack):
    # The Pathways head and workers run with hostNetwork, where Workload Identity does not apply, so
    # they reach GCS as the node service account: objects of the artifacts bucket, and reading the
    # bucket's metadata (storage.buckets.get, which TensorFlow's GCS file system asks for at the bucket
    # root; docs/security.md), nothing that changes the bucket or its policy.
    settings = example_settings()
    stack_json = stacks_json[stack]
    np = service_account_id(stack_json, "-gke-np-sa")
    member = f"${{google_service_account.{np}.member}}"
    grants = [g for g in resources(stack_json, "google_storage_bucket_iam_member").values() if g["member"] == member]
    assert sorted((g["bucket"], g["role"]) for g in grants) == [
        (settings.gcs_bucket, "roles/storage.legacyBucketReader"), (settings.gcs_bucket, "roles/storage.objectAdmin")]


@pytest.mark.parametrize("stack", GKE)
def test_workload_identity_binds_the_jobs_and_the_drivers_kubernetes_service_accounts(stacks_json, stack):
    settings = example_settings()
    stack_json = stacks_json[stack]
    wl = service_account_id(stack_json, "-gke-wl-sa")
    bindings = resources(stack_json, "google_service_account_iam_member")
    pool = f"serviceAccount:{settings.project}.svc.id.goog[{conventions.NAMESPACE}"
    by_member = {binding["member"]: (logical_id, binding) for logical_id, binding in bindings.items()}
    assert set(by_member) == {f"{pool}/{conventions.WORKLOAD_KSA}]", f"{pool}/{conventions.DRIVER_KSA}]"}
    cluster_id = next(iter(resources(stack_json, "google_container_cluster")))
    for logical_id, binding in by_member.values():
        assert binding["role"] == "roles/iam.workloadIdentityUser"
        assert binding["service_account_id"] == f"${{google_service_account.{wl}.name}}"  # the bucket's account
        assert f"google_container_cluster.{cluster_id}" in binding["depends_on"]  # the identity pool exists first
    # The jobs' binding keeps the logical id it was deployed with (not replaced when the driver's is added).
    assert by_member[f"{pool}/{conventions.WORKLOAD_KSA}]"][0].startswith("workload-sa_workload-identity_")


@pytest.mark.parametrize("stack", GKE)
def test_jobset_and_kueue_are_installed_from_pinned_official_charts(stacks_json, stack):
    releases = {r["name"]: r for r in resources(stacks_json[stack], "helm_release").values()}
    assert releases["jobset"]["repository"] == "oci://registry.k8s.io/jobset/charts"
    assert releases["jobset"]["version"] == conventions.JOBSET_VERSION.removeprefix("v") == "0.12.0"
    assert releases["kueue"]["repository"] == "oci://registry.k8s.io/kueue/charts"
    assert releases["kueue"]["version"] == conventions.KUEUE_VERSION.removeprefix("v")
    kueue_id = next(k for k, r in resources(stacks_json[stack], "helm_release").items() if r["name"] == "kueue")
    assert releases["tpu-rl-queues"]["depends_on"] == [f"helm_release.{kueue_id}"]
    assert releases["tpu-rl-queues"]["chart"].startswith("assets/")


@pytest.mark.parametrize("stack", GKE)
def test_no_helm_release_shares_a_namespace_with_the_token_secret(stacks_json, stack):
    """Helm lists the Secrets of a release's namespace to read its records (helm/helm@02ad2b11
    pkg/storage/driver/secrets.go), and RBAC cannot narrow list to names (kubernetes/kubernetes#54079):
    a release beside the token Secret would make "may read the release" mean "may read the token"."""
    releases = {r["name"]: r for r in resources(stacks_json[stack], "helm_release").values()}
    assert {name: r["namespace"] for name, r in releases.items()} == {
        "jobset": "jobset-system", "kueue": "kueue-system", "tpu-rl-queues": "tpu-rl-queues"}
    assert releases["tpu-rl-queues"]["create_namespace"] is True
    assert conventions.NAMESPACE not in {r["namespace"] for r in releases.values()}
    # The objects the pipeline uses stay where the pipeline looks for them.
    objects = queue_manifests(stacks_json[stack])
    assert objects[f"LocalQueue/{conventions.LOCAL_QUEUE}"]["metadata"]["namespace"] == conventions.NAMESPACE
    assert objects[f"ServiceAccount/{conventions.WORKLOAD_KSA}"]["metadata"]["namespace"] == conventions.NAMESPACE


@pytest.mark.parametrize("stack", GKE)
def test_helm_reaches_the_new_cluster_without_a_token_in_state(stacks_json, stack):
    (helm,) = stacks_json[stack]["provider"]["helm"]
    cluster_id = next(iter(resources(stacks_json[stack], "google_container_cluster")))
    assert helm["kubernetes"]["host"] == f"https://${{google_container_cluster.{cluster_id}.endpoint}}"
    assert helm["kubernetes"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert "token" not in helm["kubernetes"]


def test_qwen3_queue_admits_32_chips_and_the_cpu_pool(stacks_json):
    objects = queue_manifests(stacks_json["qwen3-v6e32"])
    cluster_queue = objects[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]
    assert quota(cluster_queue, "tpu") == {"google.com/tpu": "32", "cpu": str(8 * 180), "memory": f"{8 * 720}Gi"}
    assert quota(cluster_queue, "cpu") == {"google.com/tpu": "0", "cpu": str(2 * 64), "memory": f"{2 * 256}Gi"}


def test_gemma4_queue_admits_64_chips_and_the_c4d_pool(stacks_json):
    cluster_queue = queue_manifests(stacks_json["gemma4-v6e64"])[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]
    assert quota(cluster_queue, "tpu")["google.com/tpu"] == "64"
    assert quota(cluster_queue, "cpu") == {"google.com/tpu": "0", "cpu": str(2 * 96), "memory": f"{2 * 372}Gi"}


@pytest.mark.parametrize("stack", GKE)
def test_cpu_flavor_comes_first_so_cpu_only_pods_land_on_the_cpu_pool(stacks_json, stack):
    objects = queue_manifests(stacks_json[stack])
    (group,) = objects[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == ["cpu", "tpu"]
    assert group["coveredResources"] == ["cpu", "memory", "google.com/tpu"]
    assert objects["ResourceFlavor/cpu"]["spec"]["nodeLabels"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    recipe = all_recipes()[stack]
    assert objects["ResourceFlavor/tpu"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": recipe.shape.topology,
        "tpu-rl/capacity": "reservation",  # the label the reservation's pools carry
        "topology.kubernetes.io/zone": "us-east5-b",  # the example's ZONE, which GKE puts on the nodes
    }


@pytest.mark.parametrize("stack", GKE)
def test_local_queue_and_the_workload_and_driver_ksas_live_in_the_jobs_namespace(stacks_json, stack):
    objects = queue_manifests(stacks_json[stack])
    local_queue = objects[f"LocalQueue/{conventions.LOCAL_QUEUE}"]
    assert local_queue["metadata"]["namespace"] == conventions.NAMESPACE
    assert local_queue["spec"] == {"clusterQueue": conventions.CLUSTER_QUEUE}
    wl = service_account_id(stacks_json[stack], "-gke-wl-sa")
    for name in (conventions.WORKLOAD_KSA, conventions.DRIVER_KSA):
        ksa = objects[f"ServiceAccount/{name}"]
        assert ksa["metadata"]["namespace"] == conventions.NAMESPACE
        assert ksa["metadata"]["annotations"] == {
            "iam.gke.io/gcp-service-account": f"${{google_service_account.{wl}.email}}"}


@pytest.mark.parametrize("stack", GKE)
def test_outputs_say_how_to_reach_the_cluster_and_the_queue(stacks_json, stack):
    settings = example_settings()
    got = outputs(stacks_json[stack])
    assert got["cluster_name"] == settings.cluster_name
    assert got["cluster_location"] == settings.region
    assert got["get_credentials_command"] == (
        f"gcloud container clusters get-credentials {settings.cluster_name} "
        f"--region {settings.region} --project {settings.project}"
    )
    assert got["bucket"] == f"gs://{settings.gcs_bucket}"
    assert got["local_queue"] == conventions.LOCAL_QUEUE


# --- A new recipe is data only ---------------------------------------------------------------------

def test_two_4x8_slices_become_two_pools_of_8_hosts(data_only_variants):
    pools = tpu_pools(data_only_variants["qwen3-2x4x8-spot"])
    assert sorted(p["name"] for p in pools) == ["tpu-np-spot-0", "tpu-np-spot-1"]
    assert all(p["autoscaling"]["max_node_count"] == 8 and p["placement_policy"]["tpu_topology"] == "4x8"
               for p in pools)
    cluster_queue = queue_manifests(data_only_variants["qwen3-2x4x8-spot"])[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]
    assert quota(cluster_queue, "tpu-spot")["google.com/tpu"] == "64"


def test_spot_capacity_uses_spot_nodes_and_no_reservation(data_only_variants):
    for pool in tpu_pools(data_only_variants["qwen3-2x4x8-spot"]):
        assert pool["node_config"]["spot"] is True
        assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}


def test_on_demand_capacity_uses_neither_spot_nor_a_reservation(data_only_variants):
    (pool,) = tpu_pools(data_only_variants["qwen3-ondemand"])
    assert pool["node_config"]["spot"] is False
    assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}


# --- Capacity modes: reservation as always, the others from zero only while a train step runs -------

# qwen3-v6e32: one 4x8 slice of ct6e-standard-4t, 4 chips each, so 8 hosts; recipes.toml gives it
# tpu.flex_start_max_run_hours = 24, so a flex-start slice lives at most 24 x 3600 = 86400 s.
QWEN_HOSTS = 8
QWEN_FLEX_START_SECONDS = "86400s"
# GKE's first version with flex-start TPU node pools (recipes.toml [tpu.v6e.flex_start], from the GKE
# flex-start concept page).
FLEX_START_MIN_GKE = "1.33.0-gke.1712000"


def autoscaled_from_zero(pool: dict) -> bool:
    """A pool of no host until pods ask, then the whole slice (GKE scales a multi-host slice atomically)."""
    return (pool["autoscaling"] == {"min_node_count": 0, "max_node_count": QWEN_HOSTS, "location_policy": "ANY"}
            and pool["initial_node_count"] == 0 and "node_count" not in pool)


@pytest.fixture(scope="module")
def flex_start_by_setting(tmp_path_factory):
    """The real recipe table synthesized with CAPACITY=flex-start,spot (the example's ZONE us-east5-b offers
    flex-start v6e)."""
    from dataclasses import replace

    from conftest import synthesize

    settings = replace(example_settings(), capacity=("flex-start", "spot"))
    return synthesize(tmp_path_factory.mktemp("capacity-setting"), settings=settings)


def test_reservation_pools_are_as_they_always_were(stacks_json):
    (pool,) = tpu_pools(stacks_json["qwen3-v6e32"])
    assert pool["name"] == "tpu-np-0"
    assert pool["node_count"] == QWEN_HOSTS  # every host, deploy to destroy
    assert "autoscaling" not in pool and "initial_node_count" not in pool
    assert pool["node_config"]["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"
    assert pool["node_config"]["spot"] is False
    assert "flex_start" not in pool["node_config"] and "max_run_duration" not in pool["node_config"]
    assert "queued_provisioning" not in pool
    assert pool["management"] == {"auto_repair": True, "auto_upgrade": True}
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x8"}
    # New: the label that the reservation's Kueue flavor (still named tpu) matches.
    assert pool["node_config"]["labels"] == {"tpu-rl/capacity": "reservation"}


def test_capacity_setting_replaces_the_recipes_reservation_with_flex_start_pools(flex_start_by_setting):
    pools = {pool["name"]: pool for pool in tpu_pools(flex_start_by_setting["qwen3-v6e32"])}
    assert sorted(pools) == ["tpu-np-flex-start-0", "tpu-np-spot-0"]  # no reservation pool is left
    pool = pools["tpu-np-flex-start-0"]
    assert autoscaled_from_zero(pool)
    config = pool["node_config"]
    assert (config["flex_start"], config["spot"]) == (True, False)
    assert config["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert config["labels"] == {"tpu-rl/capacity": "flex-start"}
    # Nodes only through a ProvisioningRequest, which Kueue files for the whole slice.
    assert pool["queued_provisioning"] == {"enabled": True}
    assert pool["management"] == {"auto_repair": False, "auto_upgrade": True}  # flex-start refuses auto-repair
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x8"}
    assert pool["node_locations"] == [example_settings().zone]


# What GKE returns for a queued-provisioning pool that was created without upgrade settings:
# terraform-google-modules/terraform-google-kubernetes-engine@f3417b125 (PR #2352, "support for SHORT_LIVED
# strategy"), test/integration/node_pool/testdata/TestNodePool.json, node pool "pool-04"
# ("queuedProvisioning": {"enabled": true}). Before that commit the module sent SURGE for it.
GKE_QUEUED_POOL_UPGRADE_SETTINGS = {"strategy": "SHORT_LIVED"}
# hashicorp/terraform-provider-google v6.50.0, google/services/container/resource_container_node_pool.go:279-285:
# upgrade_settings.strategy is `Default: "SURGE"` with `validation.StringInSlice([]string{"SURGE", "BLUE_GREEN"})`.
PROVIDER_6_50_UPGRADE_STRATEGIES = ("SURGE", "BLUE_GREEN")


def test_the_flex_start_pool_leaves_its_upgrade_strategy_to_gke_so_every_plan_converges(flex_start_by_setting):
    """GKE keeps SHORT_LIVED on a queued-provisioning pool, a strategy provider 6.50.0 cannot even write; any
    upgrade_settings block there (its strategy defaults to SURGE) differs from what the next refresh reads,
    so every plan would show a diff and every deploy send an update. Without the block, the provider's
    Optional+Computed attribute (resource_container_node_pool.go:255-259) keeps GKE's value."""
    assert GKE_QUEUED_POOL_UPGRADE_SETTINGS["strategy"] not in PROVIDER_6_50_UPGRADE_STRATEGIES  # no block can match
    pools = {pool["name"]: pool for pool in tpu_pools(flex_start_by_setting["qwen3-v6e32"])}
    flex = pools["tpu-np-flex-start-0"]
    assert flex["queued_provisioning"] == {"enabled": True} and flex["node_config"]["flex_start"] is True
    assert "upgrade_settings" not in flex
    # The spot pool of the same stack is no queued-provisioning pool: it keeps its in-place surge upgrades.
    assert pools["tpu-np-spot-0"]["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


def test_the_flex_start_slice_lives_as_long_as_its_provisioning_request_says(flex_start_by_setting):
    """Cluster Toolkit's v6e queued-provisioning blueprint (cluster-toolkit@bf7c3e1dc, PR #5218,
    examples/gke-consumption-options/dws-flex-start-queued-provisioning/gke-tpu-v6e/gke-tpu-v6e.yaml) sets no
    max_run_duration on its pool and puts provreq.kueue.x-k8s.io/maxRunDurationSeconds on its JobSets; xpk
    v1.13.1 (src/xpk/core/capacity.py) passes no --max-run-duration for flex-start. The run time is the
    request's maxRunDurationSeconds, which Kueue copies from the stack's ProvisioningRequestConfig."""
    pool = pool_named(flex_start_by_setting["qwen3-v6e32"], "tpu-np-flex-start-0")
    assert "max_run_duration" not in pool["node_config"]
    config = queue_manifests(flex_start_by_setting["qwen3-v6e32"])["ProvisioningRequestConfig/flex-start-slice"]
    assert config["spec"]["parameters"]["maxRunDurationSeconds"] == QWEN_FLEX_START_SECONDS.removesuffix("s")


@pytest.mark.parametrize(("variant", "name", "spot"), [
    ("qwen3-ondemand", "tpu-np-on-demand-0", False),
    ("qwen3-spot-od", "tpu-np-spot-0", True),
    ("qwen3-spot-od", "tpu-np-on-demand-0", False),
])
def test_spot_and_on_demand_pools_autoscale_from_zero_without_a_reservation(data_only_variants, variant, name, spot):
    pool = pool_named(data_only_variants[variant], name)
    assert autoscaled_from_zero(pool)
    assert pool["node_config"]["spot"] is spot
    assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert "flex_start" not in pool["node_config"] and "queued_provisioning" not in pool
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x8"}
    assert pool["management"]["auto_repair"] is True


def test_a_fallback_list_makes_one_pool_per_mode_and_keeps_the_reservation_pool_as_it_was(data_only_variants):
    pools = {pool["name"]: pool for pool in tpu_pools(data_only_variants["qwen3-resv-flex"])}
    assert sorted(pools) == ["tpu-np-0", "tpu-np-flex-start-0"]
    assert pools["tpu-np-0"]["node_count"] == QWEN_HOSTS and "autoscaling" not in pools["tpu-np-0"]
    assert autoscaled_from_zero(pools["tpu-np-flex-start-0"])


def test_a_fallback_list_gives_the_cluster_queue_one_tpu_flavor_per_mode_in_order(data_only_variants):
    expected = {"qwen3-resv-flex": ["cpu", "tpu", "tpu-flex-start"], "qwen3-spot-od": ["cpu", "tpu-spot", "tpu-on-demand"]}
    for variant, order in expected.items():
        objects = queue_manifests(data_only_variants[variant])
        cluster_queue = objects[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]
        (group,) = cluster_queue["spec"]["resourceGroups"]
        assert [flavor["name"] for flavor in group["flavors"]] == order
        for flavor in order[1:]:  # each with the quota of the whole slice
            assert quota(cluster_queue, flavor) == {"google.com/tpu": "32", "cpu": str(8 * 180), "memory": f"{8 * 720}Gi"}
        # Kueue v0.17.1's defaults, stated: a flavor that would need preemption hands over to the next.
        assert cluster_queue["spec"]["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch",
                                                              "whenCanPreempt": "TryNextFlavor"}


@pytest.mark.parametrize(("variant", "expected"), [
    ("qwen3-resv-flex", {"tpu": {"tpu-np-0"}, "tpu-flex-start": {"tpu-np-flex-start-0"}}),
    ("qwen3-spot-od", {"tpu-spot": {"tpu-np-spot-0"}, "tpu-on-demand": {"tpu-np-on-demand-0"}}),
    ("qwen3-2x4x8-spot", {"tpu-spot": {"tpu-np-spot-0", "tpu-np-spot-1"}}),
])
def test_each_tpu_flavor_selects_exactly_the_pools_of_its_mode(data_only_variants, variant, expected):
    stack = data_only_variants[variant]
    flavors = {key.split("/", 1)[1]: m for key, m in queue_manifests(stack).items()
               if key.startswith("ResourceFlavor/tpu")}
    selected = {}
    for name, flavor in flavors.items():
        wanted = flavor["spec"]["nodeLabels"]
        selected[name] = {pool["name"] for pool in tpu_pools(stack)
                          if all(pool["node_config"]["labels"].get(k) == v for k, v in wanted.items()
                                 if k == "tpu-rl/capacity")
                          and pool["placement_policy"]["tpu_topology"] == wanted["cloud.google.com/gke-tpu-topology"]}
    assert selected == expected


def test_flex_start_goes_through_a_provisioning_request_admission_check(data_only_variants):
    objects = queue_manifests(data_only_variants["qwen3-resv-flex"])
    cluster_queue = objects[f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]
    # Only the flex-start flavor waits for GKE to provision the slice; the reservation starts at once.
    assert cluster_queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "flex-start-slice", "onFlavors": ["tpu-flex-start"]}]}
    assert objects["AdmissionCheck/flex-start-slice"]["spec"] == {
        "controllerName": "kueue.x-k8s.io/provisioning-request",
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "flex-start-slice"},
    }
    assert objects["ProvisioningRequestConfig/flex-start-slice"]["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        # Only the TPU workers' pod set goes into the request, not the Pathways head on the CPU pool.
        "managedResources": ["google.com/tpu"],
        "parameters": {"maxRunDurationSeconds": "86400", "tpu-topology": "4x8"},
    }
    # Admitted pods tolerate the taint GKE puts on queued-provisioning nodes.
    tolerations = objects["ResourceFlavor/tpu-flex-start"]["spec"]["tolerations"]
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert "ResourceFlavor/tpu-flex-start" not in queue_manifests(data_only_variants["qwen3-spot-od"])
    assert "admissionChecksStrategy" not in queue_manifests(data_only_variants["qwen3-spot-od"])[
        f"ClusterQueue/{conventions.CLUSTER_QUEUE}"]["spec"]


def test_flex_start_creates_the_cluster_at_a_channel_version_checked_against_the_minimum(data_only_variants):
    cluster = only(data_only_variants["qwen3-flex"], "google_container_cluster")
    versions_id, versions = next(iter(data_only_variants["qwen3-flex"]["data"]["google_container_engine_versions"].items()))
    assert versions["location"] == example_settings().region  # the regional cluster's own versions
    assert cluster["min_master_version"] == (
        f"${{data.google_container_engine_versions.{versions_id}.release_channel_default_version.REGULAR}}")
    assert "min_master_version" in cluster["lifecycle"]["ignore_changes"]  # no upgrade when the default moves
    (check,) = versions["lifecycle"]["postcondition"]
    assert FLEX_START_MIN_GKE in check["error_message"]
    assert 'self.release_channel_default_version["REGULAR"]' in check["condition"]


def test_without_flex_start_the_cluster_version_is_left_to_gke(stacks_json, data_only_variants):
    for stack in (stacks_json["qwen3-v6e32"], data_only_variants["qwen3-spot-od"]):
        cluster = only(stack, "google_container_cluster")
        assert "min_master_version" not in cluster
        assert "google_container_engine_versions" not in stack.get("data", {})


def test_terraform_accepts_exactly_the_versions_from_the_flex_start_minimum_on(data_only_variants, tmp_path):
    versions = next(iter(data_only_variants["qwen3-flex"]["data"]["google_container_engine_versions"].values()))
    (check,) = versions["lifecycle"]["postcondition"]
    channel_default = 'self.release_channel_default_version["REGULAR"]'
    cases = {  # version -> whether flex-start TPU pools may be created on it (1.33.0-gke.1712000 or later)
        "1.33.0-gke.1712000": True, "1.33.0-gke.1711999": False, "1.33.0-gke.2000000": True,
        "1.32.9-gke.9999999": False, "1.33.1-gke.1": True, "1.34.0-gke.0": True, "2.0.0-gke.0": True,
        "1.35.1-gke.1396002": True, "0.99.0-gke.9999999": False,
    }
    planned = terraform_outputs(tmp_path, {
        f"v{index}": check["condition"].replace(channel_default, json.dumps(version))
        for index, version in enumerate(cases)
    })
    assert [planned[f"v{index}"] for index in range(len(cases))] == list(cases.values())


# --- Cluster behaviour over days: upgrades and the Kueue webhook ------------------------------------

@pytest.mark.parametrize("stack", GKE)
def test_cluster_blocks_minor_and_node_upgrades_from_its_creation(stacks_json, stack):
    cluster = only(stacks_json[stack], "google_container_cluster")
    policy = cluster["maintenance_policy"]
    (exclusion,) = policy["maintenance_exclusion"]
    assert exclusion["exclusion_options"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES"}
    # Evaluated by Terraform at the first plan, so the synthesized JSON stays the same on every synth ...
    assert exclusion["start_time"] == "${plantimestamp()}"
    assert exclusion["end_time"] == '${timeadd(plantimestamp(), "2160h")}'
    # ... and kept from creation on, instead of moving with every later plan.
    assert "maintenance_policy[0].maintenance_exclusion" in cluster["lifecycle"]["ignore_changes"]
    assert policy["daily_maintenance_window"] == {"start_time": "09:00"}  # provider 6.50.0 wants a window


def test_terraform_turns_the_exclusion_into_a_90_day_window_of_rfc3339_dates(stacks_json, tmp_path):
    (exclusion,) = only(stacks_json["qwen3-v6e32"], "google_container_cluster")["maintenance_policy"][
        "maintenance_exclusion"]
    planned = terraform_outputs(tmp_path, {"start": exclusion["start_time"], "end": exclusion["end_time"]})
    start, end = (datetime.strptime(planned[name], "%Y-%m-%dT%H:%M:%S%z") for name in ("start", "end"))
    assert planned["end"].endswith("Z") and end - start == timedelta(days=90)
    assert abs(datetime.now(timezone.utc) - start) < timedelta(hours=1)  # the day of the (first) plan


@pytest.mark.parametrize("stack", GKE)
def test_tpu_pools_upgrade_in_place_without_a_surge_host_from_the_reservation(stacks_json, stack):
    for pool in tpu_pools(stacks_json[stack]):
        assert pool["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}
        assert pool["management"] == {"auto_repair": True, "auto_upgrade": True}  # REGULAR channel requires it


@pytest.mark.parametrize("stack", GKE)
def test_queue_objects_wait_for_the_kueue_webhook_endpoint_in_the_same_deploy(stacks_json, stack):
    releases = resources(stacks_json[stack], "helm_release")
    kueue_id, kueue = next((k, r) for k, r in releases.items() if r["name"] == "kueue")
    queues = next(r for r in releases.values() if r["name"] == "tpu-rl-queues")
    # Kueue's release does not wait (destroy must not wait on its finalizers): the hook below covers its start.
    assert queues["depends_on"] == [f"helm_release.{kueue_id}"] and kueue["wait"] is False
    (values,) = queues["values"]
    (probe,) = [m for m in yaml.safe_load(values)["manifests"] if m["kind"] == "Pod"]
    # A Helm hook: the release creates its queue objects only after this pod has succeeded.
    assert probe["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    # Kueue's webhook Service for a release named kueue (charts/kueue/templates/webhook/service.yaml, v0.17.1).
    webhook = "kueue-webhook-service.kueue-system.svc 443"
    assert webhook == f"{kueue['name']}-webhook-service.{kueue['namespace']}.svc 443"
    assert probe["metadata"]["namespace"] == kueue["namespace"]  # outside the Kueue webhooks it waits for
    (container,) = probe["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"] and f"nc -z -w 2 {webhook}" in container["command"][2]
    assert probe["spec"]["restartPolicy"] == "Never"
    assert probe["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system-np"}
