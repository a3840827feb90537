"""A stack's Terraform state as `npx cdktf deploy` leaves it, for `tpu-rl down` (which reads whose cluster it
holds): state format version 4 (hashicorp/terraform v1.9.8 internal/states/statefile/version4.go:
stateV4 with resources, each resourceStateV4 with mode, type, name, provider and instances, each
instanceObjectStateV4 with schema_version and attributes), the cluster's attributes as hashicorp/google
6.50.0 stores a google_container_cluster (id projects/<project>/locations/<location>/clusters/<name>);
only the fields `down` reads, and a few beside them. What a destroy that failed after deleting the cluster
leaves (leftover_state): the network, the Cloud NAT and a node service account, with the ids hashicorp/google
documents for them (website/docs/r/compute_network, compute_router_nat, google_service_account, "Attributes
Reference": projects/{{project}}/global/networks/{{name}}, {{project}}/{{region}}/{{router}}/{{name}},
projects/{{project}}/serviceAccounts/{{email}})."""

from __future__ import annotations

import json


PROVIDER = 'provider["registry.terraform.io/hashicorp/google"]'


def _state(resources: list[dict]) -> str:
    return json.dumps({"version": 4, "terraform_version": "1.11.4", "serial": 12, "lineage": "0f6c1d2e",
                       "outputs": {}, "resources": resources})


def _resource(kind: str, name: str, attributes: dict, schema_version: int = 0) -> dict:
    return {"mode": "managed", "type": kind, "name": name, "provider": PROVIDER,
            "instances": [{"schema_version": schema_version, "attributes": attributes}]}


HELM = 'provider["registry.terraform.io/hashicorp/helm"]'


def cluster_state(project: str, location: str, name: str, releases: dict[str, tuple[bool, int]] | None = None) -> str:
    """The cluster, and `releases` by name as (wait, timeout): helm_release instances as helm provider 3.1.1
    stores them (id the release name; wait and timeout among its attributes, helm/resource_helm_release.go)."""
    helm = [{"mode": "managed", "type": "helm_release", "name": f"{release.replace('-', '_')}_5F6A7B",
             "provider": HELM, "instances": [{"schema_version": 1, "attributes": {
                 "id": release, "name": release, "namespace": f"{release}-system", "wait": wait,
                 "timeout": timeout, "status": "deployed"}}]}
            for release, (wait, timeout) in (releases or {}).items()]
    return _state([_resource("google_container_cluster", "gke_cluster_1A2B3C", {
        "id": f"projects/{project}/locations/{location}/clusters/{name}",
        "name": name, "project": project, "location": location}, schema_version=2), *helm])


def vm_state(project: str, zone: str, name: str) -> str:
    """The VM stack's TPU VM, a google_compute_instance as hashicorp/google 6.50.0 stores it (schema version 6,
    google/services/compute/resource_compute_instance.go SchemaVersion; id projects/{{project}}/zones/
    {{zone}}/instances/{{name}}, website/docs/r/compute_instance "Attributes Reference")."""
    return _state([_resource("google_compute_instance", "tpu_vm_instance_2B3C4D", {
        "id": f"projects/{project}/zones/{zone}/instances/{name}", "name": name, "project": project,
        "zone": zone, "current_status": "RUNNING"}, schema_version=6)])


def leftover_state(project: str, region: str, cluster: str, network_project: str | None = None) -> str:
    """The state of a destroy that stopped after the cluster: its network (in `network_project`, when told),
    router NAT and node service account, named as stacks/gke.py and infra/network.py name them after the
    cluster, each carrying its project, and no cluster."""
    network, account = f"{cluster}-net", f"{cluster}-gke-np-sa@{project}.iam.gserviceaccount.com"
    return _state([
        _resource("google_compute_network", "network_vpc_4D5E6F", {
            "id": f"projects/{network_project or project}/global/networks/{network}", "name": network,
            "project": network_project or project}),
        _resource("google_compute_router_nat", "network_nat_7A8B9C", {
            "id": f"{project}/{region}/{cluster}-router/{cluster}-nat", "name": f"{cluster}-nat",
            "project": project, "region": region, "router": f"{cluster}-router"}),
        _resource("google_service_account", "node_identity_account_1D2E3F", {
            "id": f"projects/{project}/serviceAccounts/{account}", "email": account, "project": project,
            "account_id": f"{cluster}-gke-np-sa"})])


def put_state(gcs_client, env: dict[str, str], stack: str, kind: str = "own") -> None:
    """The stack's state in a bucket of its own, TF_STATE_BUCKET (set in `env`): `own` holds the settings'
    cluster, `other` that cluster in another project, `leftover-other` what a failed destroy left with the
    network in another project."""
    from peers.fixtures import make_bucket

    env["TF_STATE_BUCKET"] = f"{env['GCS_BUCKET']}-tf-state"
    bucket = make_bucket(gcs_client, env["TF_STATE_BUCKET"], env["REGION"])
    text = {"own": lambda: cluster_state(env["PROJECT"], env["REGION"], env["CLUSTER_NAME"]),
            "other": lambda: cluster_state("someone-else", env["REGION"], env["CLUSTER_NAME"]),
            "leftover-other": lambda: leftover_state(env["PROJECT"], env["REGION"], env["CLUSTER_NAME"],
                                                     "someone-else")}[kind]()
    bucket.blob(f"tpu-rl/{stack}/default.tfstate").upload_from_string(text)
