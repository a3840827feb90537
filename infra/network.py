"""A private VPC for one recipe: subnet (optionally with GKE secondary ranges), Cloud Router and NAT.

Nodes and VMs get no external IPs; NAT gives them egress to registries and Hugging Face.
"""

from __future__ import annotations

from dataclasses import dataclass

from constructs import Construct

from tpu_rl.infra.google import compute_firewall, compute_network, compute_router, compute_router_nat, compute_subnetwork

# Google's IAP TCP forwarding range: the only source `gcloud compute ssh --tunnel-through-iap` uses.
IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"


@dataclass(frozen=True)
class SecondaryRanges:
    """Alias ranges a VPC-native GKE cluster takes its pod and service IPs from."""

    pods_cidr: str = "10.4.0.0/14"
    services_cidr: str = "10.0.32.0/20"
    pods_name: str = "pods"
    services_name: str = "services"


@dataclass(frozen=True)
class NetworkProps:
    name: str  # prefix of every resource name
    region: str
    subnet_cidr: str = "192.168.0.0/18"
    secondary_ranges: SecondaryRanges | None = None  # set for GKE
    allow_iap_ssh: bool = False  # opens tcp:22 from the IAP range only, for VMs without external IPs
    # Node-to-node and pod traffic inside the VPC only: multi-host TPU slices and Pathways talk over
    # hostNetwork on many ports (29000-29006, 8471, 8080, megascale DCN).
    allow_internal: bool = False


class Network(Construct):
    def __init__(self, scope: Construct, id: str, props: NetworkProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.network = compute_network.ComputeNetwork(
            self, "vpc", name=f"{props.name}-net", auto_create_subnetworks=False, routing_mode="REGIONAL"
        )
        ranges = props.secondary_ranges
        self.subnetwork = compute_subnetwork.ComputeSubnetwork(
            self,
            "subnet",
            name=f"{props.name}-sub",
            region=props.region,
            network=self.network.id,
            ip_cidr_range=props.subnet_cidr,
            private_ip_google_access=True,  # reach Google APIs without external IPs
            secondary_ip_range=[
                compute_subnetwork.ComputeSubnetworkSecondaryIpRange(
                    range_name=ranges.pods_name, ip_cidr_range=ranges.pods_cidr
                ),
                compute_subnetwork.ComputeSubnetworkSecondaryIpRange(
                    range_name=ranges.services_name, ip_cidr_range=ranges.services_cidr
                ),
            ]
            if ranges
            else None,
        )
        self.router = compute_router.ComputeRouter(
            self, "router", name=f"{props.name}-router", region=props.region, network=self.network.id
        )
        self.nat = compute_router_nat.ComputeRouterNat(
            self,
            "nat",
            name=f"{props.name}-nat",
            region=props.region,
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=compute_router_nat.ComputeRouterNatLogConfig(enable=True, filter="ERRORS_ONLY"),
        )
        if props.allow_internal:
            pods = [ranges.pods_cidr] if ranges else []
            self._ingress("internal", [props.subnet_cidr, *pods], ("tcp", None), ("udp", None), ("icmp", None))
        if props.allow_iap_ssh:
            self._ingress("iap-ssh", [IAP_TCP_FORWARDING_RANGE], ("tcp", ["22"]))

    def _ingress(self, suffix: str, source_ranges: list[str], *allow: tuple[str, list[str] | None]) -> None:
        compute_firewall.ComputeFirewall(
            self,
            suffix,
            name=f"{self.props.name}-{suffix}",
            network=self.network.id,
            direction="INGRESS",
            source_ranges=source_ranges,
            allow=[compute_firewall.ComputeFirewallAllow(protocol=protocol, ports=ports) for protocol, ports in allow],
        )
