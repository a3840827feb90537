"""The control plane is never open to the internet in effect: one rule, applied where AUTHORIZED_CIDR
enters (every command) and again in the GKE cluster construct, so no stack accepts what the setting
refuses."""

from __future__ import annotations

import pytest

from tpu_rl.infra.gke_cluster import GkeClusterProps
from tpu_rl.recipes import UserError, get_recipe, load_settings

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


@pytest.mark.parametrize("cidrs", [["127.0.0.1/32"], ["0.0.0.0/32"], ["169.254.0.0/16"], ["224.0.0.0/24"],
                                   ["203.0.113.7/32", "240.0.0.0/4"]])
def test_blocks_no_client_can_connect_from_are_refused_by_setting_and_construct(cidrs):
    # 127/8 loopback, 0/8 "this network", 169.254/16 link-local, 224/4 multicast, 240/4 reserved (RFC 6890):
    # a control plane that admits only these admits no one, and deploy would fail 15-25 minutes in.
    with pytest.raises(UserError, match=r"address space, from which no client can reach the control plane"):
        load_settings({**BASE, "AUTHORIZED_CIDR": ",".join(cidrs)})
    with pytest.raises(ValueError, match="GkeClusterProps.authorized_cidrs"):
        props(cidrs)


def test_only_private_blocks_are_accepted_with_a_warning_that_deploy_needs_a_machine_in_the_vpc():
    private = load_settings({**BASE, "AUTHORIZED_CIDR": "10.0.0.0/8,192.168.0.0/16"})
    [warning] = private.warnings
    assert warning.startswith("warning: AUTHORIZED_CIDR '10.0.0.0/8,192.168.0.0/16' lists only private address "
                              "space: kubectl, helm and `tpu-rl run` then reach the control plane only from a "
                              "machine inside the VPC")
    assert load_settings({**BASE, "AUTHORIZED_CIDR": "10.0.0.0/8,203.0.113.7/32"}).warnings == ()


def test_the_cli_prints_the_settings_warning_on_stderr_and_goes_on(monkeypatch, capsys):
    from tpu_rl.scripts.cli.core import cloud_settings

    for key, value in {**BASE, "AUTHORIZED_CIDR": "172.16.0.0/12"}.items():
        monkeypatch.setenv(key, value)
    assert cloud_settings("preflight", get_recipe("qwen3-v6e32").platform).authorized_cidr == ("172.16.0.0/12",)
    assert capsys.readouterr().err.startswith("warning: AUTHORIZED_CIDR '172.16.0.0/12' lists only private")
