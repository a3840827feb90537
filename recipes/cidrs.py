"""AUTHORIZED_CIDR's rules: which blocks may reach a GKE control plane's public endpoint (refused: too
wide, or address space no client connects from), and the warning when every block is private. One rule
for the setting (recipes/setting_checks.py) and for tpu_rl.infra.gke_cluster.GkeClusterProps."""

from __future__ import annotations

import ipaddress
from typing import Sequence

# The control plane's public endpoint: public blocks admitting more than a /16 (65,536 addresses), one
# block or all together, open it to much of the internet. Private ranges (RFC 1918) are not reachable
# from outside, so any size is kept.
MIN_PUBLIC_CIDR_PREFIX = 16
MAX_PUBLIC_ADDRESSES = 2 ** (32 - MIN_PUBLIC_CIDR_PREFIX)


# Blocks no client can connect from, so the control plane would refuse everyone and deploy would fail
# only after its 15-25 minutes: loopback, "this network" (0.0.0.0/8, unspecified), link-local, multicast
# and reserved (240.0.0.0/4, broadcast). The names are the attributes of Python's ipaddress, which reads
# them from the IANA special-purpose registry (RFC 6890).
_UNREACHABLE = (("is_loopback", "loopback"), ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                ("is_reserved", "reserved"))
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
# Address space that never leaves a private network (RFC 1918).
_PRIVATE = tuple(ipaddress.ip_network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def _unreachable(network: ipaddress.IPv4Network) -> str | None:
    if network.subnet_of(_THIS_NETWORK):
        return "'this network' (0.0.0.0/8)"
    return next((name for attribute, name in _UNREACHABLE if getattr(network, attribute)), None)


def is_private_block(network: ipaddress.IPv4Network) -> bool:
    return any(network.subnet_of(block) for block in _PRIVATE)


def authorized_cidrs_problem(items: Sequence[str]) -> str | None:
    """What is wrong with a list of control-plane CIDRs, or None. One rule for AUTHORIZED_CIDR and for
    tpu_rl.infra.gke_cluster.GkeClusterProps, so no construct accepts what the setting refuses."""
    if not items:
        return "lists no CIDR block: name your own egress address, e.g. 203.0.113.7/32"
    public = 0
    for item in items:
        try:
            network = ipaddress.ip_network(item, strict=True)
        except ValueError:
            return f"'{item}' is not a CIDR block like 203.0.113.7/32 (host bits must be zero)"
        if network.version != 4:
            return f"'{item}' is IPv6; GKE master authorized networks take IPv4 CIDR blocks"
        unreachable = _unreachable(network)
        if unreachable:
            return (f"'{item}' is {unreachable} address space, from which no client can reach the control plane: "
                    "list your own egress address, e.g. 203.0.113.7/32 (`curl -s ifconfig.me` shows it)")
        if network.is_private:
            continue
        if network.prefixlen < MIN_PUBLIC_CIDR_PREFIX:
            return (f"'{item}' admits {network.num_addresses:,} public addresses, which is public in effect: list "
                    f"your own egress address, e.g. 203.0.113.7/32 (public blocks wider than "
                    f"/{MIN_PUBLIC_CIDR_PREFIX} are refused)")
        public += network.num_addresses
    if public > MAX_PUBLIC_ADDRESSES:
        return (f"'{','.join(items)}' admits {public:,} public addresses in all, which is public in effect: list "
                f"your own egress addresses (at most {MAX_PUBLIC_ADDRESSES:,} public addresses together)")
    return None


def authorized_cidrs_warning(items: Sequence[str]) -> str | None:
    """A warning, not a refusal: when every block is private address space, only a machine inside the VPC
    (or connected to it) reaches the public endpoint's allowlist, so `cdktf deploy` must run from there."""
    if items and all(is_private_block(ipaddress.ip_network(item)) for item in items):
        return (f"warning: AUTHORIZED_CIDR '{','.join(items)}' lists only private address space: kubectl, helm "
                "and `tpu-rl run` then reach the control plane only from a machine inside the VPC (or connected "
                "to it); add your public egress address, e.g. 203.0.113.7/32, to work from elsewhere")
    return None
