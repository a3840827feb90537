"""The control plane is never open to the internet in effect: one rule, applied where AUTHORIZED_CIDR
enters (every command) and again in the GKE cluster construct, so no stack accepts what the setting
refuses."""

from __future__ import annotations

import pytest

from infra.gke_cluster import GkeClusterProps
from recipes import UserError, load_settings

BASE = {"PROJECT": "acme-rl-research", "REGION": "us-east5", "ZONE": "us-east5-b", "CLUSTER_NAME": "acme-rl",
        "GCS_BUCKET": "acme-rl-artifacts", "RESERVATION": "acme-v6e"}


def props(cidrs: list[str]) -> GkeClusterProps:
    return GkeClusterProps(name="acme-rl", project="acme-rl-research", region="us-east5", zone="us-east5-b",
                           network=None, node_service_account="nodes@acme-rl-research.iam.gserviceaccount.com",
                           authorized_cidrs=cidrs, system_machine_type="e2-standard-4", system_min_nodes=1)


@pytest.mark.parametrize("cidrs", [["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["8.0.0.0/8"], [],
                                   ["203.0.113.7/24"]])
def test_the_cluster_construct_refuses_what_the_setting_refuses(cidrs):
    with pytest.raises(ValueError, match="GkeClusterProps.authorized_cidrs"):
        props(cidrs)


def test_private_ranges_and_small_public_blocks_are_accepted():
    assert props(["10.0.0.0/8", "192.168.0.0/16", "203.0.113.7/32", "198.51.100.0/24"]).authorized_cidrs


def test_many_public_blocks_that_are_each_allowed_are_refused_together():
    # Two /16s: 2 x 65,536 = 131,072 public addresses, more than one /16's 65,536.
    cidrs = "34.0.0.0/16,35.0.0.0/16"
    with pytest.raises(UserError, match=r"^AUTHORIZED_CIDR '34\.0\.0\.0/16,35\.0\.0\.0/16' admits 131,072 public "
                                        r"addresses in all, which is public in effect"):
        load_settings({**BASE, "AUTHORIZED_CIDR": cidrs})
    assert load_settings({**BASE, "AUTHORIZED_CIDR": "34.0.0.0/16"}).authorized_cidr == ("34.0.0.0/16",)
