"""A single Cloud TPU VM (ct6e-standard-8t) as a Compute Engine instance, as seed 002 creates it.

The GA provider has no google_tpu_v2_vm; v6e single-host VMs are plain instances on the accelerator
image. No external IP: egress goes through the network's NAT and SSH through IAP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cdktf import ITerraformDependable
from constructs import Construct

from tpu_rl.infra.capacity import RESERVATION_KEY, check_reservation
from tpu_rl.infra.google import compute_instance
from tpu_rl.infra.identity import CLOUD_PLATFORM_SCOPE
from tpu_rl.infra.network import Network
from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode

ACCELERATOR_IMAGE = "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"


@dataclass(frozen=True)
class TpuVmProps:
    name: str
    zone: str
    machine_type: str
    disk_type: str
    network: Network
    service_account: str  # email
    startup_script: str
    capacity: CapacityMode
    reservation: str | None = None
    image: str = ACCELERATOR_IMAGE
    boot_disk_gb: int = 200
    labels: dict[str, str] = field(default_factory=dict)
    # The startup script runs at once: the account's grants must exist before the VM does.
    depends_on: Sequence[ITerraformDependable] = ()

    def __post_init__(self) -> None:
        check_reservation("TpuVmProps", self.capacity, self.reservation)


def scheduling(props: TpuVmProps) -> compute_instance.ComputeInstanceScheduling:
    rules = MODE_RULES[props.capacity]
    return compute_instance.ComputeInstanceScheduling(
        on_host_maintenance="TERMINATE",  # TPU hosts cannot live-migrate
        provisioning_model=rules.vm_provisioning_model,
        # A reservation-bound or spot VM is deleted, not stopped, when its capacity goes away: a
        # stopped TPU VM would keep its disk billing and could not restart anyway.
        instance_termination_action="DELETE" if rules.vm_deleted_when_reclaimed else None,
        preemptible=rules.spot or None,
        automatic_restart=False if rules.spot else None,
    )


def reservation_affinity(props: TpuVmProps) -> compute_instance.ComputeInstanceReservationAffinity:
    bound = check_reservation("TpuVmProps", props.capacity, props.reservation)
    if bound is not None:
        return compute_instance.ComputeInstanceReservationAffinity(
            type="SPECIFIC_RESERVATION",
            specific_reservation=compute_instance.ComputeInstanceReservationAffinitySpecificReservation(
                key=RESERVATION_KEY, values=[bound]
            ),
        )
    return compute_instance.ComputeInstanceReservationAffinity(type="NO_RESERVATION")


class TpuVm(Construct):
    def __init__(self, scope: Construct, id: str, props: TpuVmProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.instance = compute_instance.ComputeInstance(
            self,
            "instance",
            name=props.name,
            zone=props.zone,
            machine_type=props.machine_type,
            boot_disk=compute_instance.ComputeInstanceBootDisk(
                initialize_params=compute_instance.ComputeInstanceBootDiskInitializeParams(
                    image=props.image, size=props.boot_disk_gb, type=props.disk_type
                ),
                auto_delete=True,
            ),
            network_interface=[
                compute_instance.ComputeInstanceNetworkInterface(subnetwork=props.network.subnetwork.id)
            ],  # no access_config: no external IP
            scheduling=scheduling(props),
            reservation_affinity=reservation_affinity(props),
            service_account=compute_instance.ComputeInstanceServiceAccount(
                email=props.service_account, scopes=[CLOUD_PLATFORM_SCOPE]
            ),
            shielded_instance_config=compute_instance.ComputeInstanceShieldedInstanceConfig(
                enable_integrity_monitoring=True, enable_vtpm=True
            ),
            # metadata_startup_script, not metadata["startup-script"]: hashicorp/google 6.50.0 replaces the
            # instance when it changes (resource_compute_instance.go, customdiff.ForceNewIf on it, except the
            # graceful switch from the same metadata value), while the `metadata` map is updated in place, and
            # a startup script runs only at boot. So a changed recipe gets a new VM that runs it, and the plan
            # shows the replacement; `tpu-rl run` refuses a VM whose script differs (scripts/pipeline/vm/run.py).
            metadata_startup_script=props.startup_script,
            metadata={
                "enable-oslogin": "TRUE",
                "block-project-ssh-keys": "TRUE",
            },
            labels=props.labels or None,
            # No desired_status: the VM powers itself off after its run (jobs/vm_outputs.py), and hashicorp/google
            # 6.50.0 then only reads its TERMINATED into current_status (resource_compute_instance.go Read sets
            # desired_status only when configured; Update starts only for desired_status RUNNING), so `deploy`
            # after the stop plans no change and `destroy` deletes it like a running one (docs/pipeline.md).
            deletion_protection=False,
            depends_on=list(props.depends_on) or None,
        )
