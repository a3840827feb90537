"""A GKE stack with ZONE=us-east5-b,us-east5-a (both offer v6e flex-start): TPU pools in each zone, one
Kueue flavor per mode and zone in fallback order, matched by the zone label GKE sets on nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import only, queue_manifests, resources, tpu_pools

from tpu_rl.recipes import example_settings

ZONES = ("us-east5-b", "us-east5-a")
ZONE_LABEL = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def zoned(tmp_path_factory):
    from conftest import synthesize

    settings = replace(example_settings(), zones=ZONES, capacity=("reservation", "flex-start", "spot"))
    return synthesize(tmp_path_factory.mktemp("zones"), settings=settings)["qwen3-v6e32"]


def test_each_mode_has_a_slice_pool_in_each_zone_and_the_reservation_only_in_the_first(zoned):
    pools = {pool["name"]: pool["node_locations"] for pool in tpu_pools(zoned)}
    assert pools == {
        "tpu-np-0": ["us-east5-b"],  # a reservation lives in one zone, the first of ZONE
        "tpu-np-flex-start-0": ["us-east5-b"], "tpu-np-flex-start-a-0": ["us-east5-a"],
        "tpu-np-spot-0": ["us-east5-b"], "tpu-np-spot-a-0": ["us-east5-a"],
    }


def test_the_cpu_and_system_pools_stay_in_the_first_zone_of_the_regional_cluster(zoned):
    assert only(zoned, "google_container_cluster")["location"] == "us-east5"
    others = {p["name"]: p["node_locations"] for p in resources(zoned, "google_container_node_pool").values()
              if not p["name"].startswith("tpu-np-")}
    assert others == {"cpu-np": ["us-east5-b"], "system-np": ["us-east5-b"]}


def test_kueue_tries_each_mode_in_each_zone_in_order_with_the_zone_label_of_the_nodes(zoned):
    objects = queue_manifests(zoned)
    (group,) = objects["ClusterQueue/tpu-rl"]["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == [
        "cpu", "tpu", "tpu-flex-start", "tpu-flex-start-a", "tpu-spot", "tpu-spot-a"]
    labels = {name: objects[f"ResourceFlavor/{name}"]["spec"]["nodeLabels"] for name in
              ("tpu", "tpu-flex-start", "tpu-flex-start-a", "tpu-spot-a")}
    assert {name: (lab["tpu-rl/capacity"], lab[ZONE_LABEL]) for name, lab in labels.items()} == {
        "tpu": ("reservation", "us-east5-b"), "tpu-flex-start": ("flex-start", "us-east5-b"),
        "tpu-flex-start-a": ("flex-start", "us-east5-a"), "tpu-spot-a": ("spot", "us-east5-a")}
    # Both zones' flex-start flavors wait for their ProvisioningRequest.
    assert objects["ClusterQueue/tpu-rl"]["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "flex-start-slice", "onFlavors": ["tpu-flex-start", "tpu-flex-start-a"]}]}


def test_each_zone_flavor_selects_exactly_its_zones_pools(zoned):
    objects = queue_manifests(zoned)
    pools = tpu_pools(zoned)
    for name in ("tpu-flex-start-a", "tpu-spot"):
        wanted = objects[f"ResourceFlavor/{name}"]["spec"]["nodeLabels"]
        selected = [p["name"] for p in pools if p["node_config"]["labels"]["tpu-rl/capacity"] == wanted["tpu-rl/capacity"]
                    and p["node_locations"] == [wanted[ZONE_LABEL]]]
        assert selected == [{"tpu-flex-start-a": "tpu-np-flex-start-a-0", "tpu-spot": "tpu-np-spot-0"}[name]]
