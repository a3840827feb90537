"""A stack's Terraform state as `npx cdktf deploy` leaves it, for `tpu-rl down` (which reads whose cluster it
holds): state format version 4 (hashicorp/terraform v1.9.8 internal/states/statefile/version4.go:
stateV4 with resources, each resourceStateV4 with mode, type, name, provider and instances, each
instanceObjectStateV4 with schema_version and attributes), the cluster's attributes as hashicorp/google
6.50.0 stores a google_container_cluster (id projects/<project>/locations/<location>/clusters/<name>);
only the fields `down` reads, and a few beside them."""

from __future__ import annotations

import json


def cluster_state(project: str, location: str, name: str) -> str:
    return json.dumps({"version": 4, "terraform_version": "1.11.4", "serial": 12, "lineage": "0f6c1d2e",
                       "outputs": {}, "resources": [{
                           "mode": "managed", "type": "google_container_cluster", "name": "gke_cluster_1A2B3C",
                           "provider": 'provider["registry.terraform.io/hashicorp/google"]',
                           "instances": [{"schema_version": 2, "attributes": {
                               "id": f"projects/{project}/locations/{location}/clusters/{name}",
                               "name": name, "project": project, "location": location}}]}]})


def put_state(gcs_client, env: dict[str, str], stack: str, project: str | None = None) -> None:
    """The stack's state in a bucket of its own, TF_STATE_BUCKET (set in `env`), holding the settings'
    cluster, or that cluster in another `project`."""
    from peers.fixtures import make_bucket

    env["TF_STATE_BUCKET"] = f"{env['GCS_BUCKET']}-tf-state"
    bucket = make_bucket(gcs_client, env["TF_STATE_BUCKET"], env["REGION"])
    bucket.blob(f"tpu-rl/{stack}/default.tfstate").upload_from_string(
        cluster_state(project or env["PROJECT"], env["REGION"], env["CLUSTER_NAME"]))
