"""A VM recipe stack: one TPU VM with its own service account, private network and NAT."""

from __future__ import annotations

from constructs import Construct

from tpu_rl.infra.identity import LOG_WRITER, WorkloadServiceAccount, WorkloadServiceAccountProps
from tpu_rl.infra.network import Network, NetworkProps
from tpu_rl.infra.tpu_vm import TpuVm, TpuVmProps
from tpu_rl.jobs import render_startup_script
from tpu_rl.jobs.vm import ssh_command
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.settings.load import Settings
from tpu_rl.stacks.base import TpuRlStack


class VmRecipeStack(TpuRlStack):
    def __init__(self, scope: Construct, recipe: Recipe, settings: Settings, blocked: str | None = None) -> None:
        super().__init__(scope, recipe.name, settings, blocked)  # checked for this recipe by build_app
        shape = recipe.shape
        prefix = f"{settings.cluster_name}-vm"
        network = Network(self, "network", NetworkProps(name=prefix, region=settings.region, allow_iap_ssh=True))
        identity = WorkloadServiceAccount(
            self,
            "vm-sa",
            WorkloadServiceAccountProps(
                project=settings.project,
                account_id=f"{settings.cluster_name}-tpu-vm-sa",
                bucket=settings.gcs_bucket,
                token_secret=settings.hf_token_secret,
                display_name="tpu-rl TPU VM",
                # The guest agent sends every line of the startup script to Cloud Logging as this account.
                project_roles=(LOG_WRITER,),
            ),
        )
        TpuVm(
            self,
            "tpu-vm",
            TpuVmProps(
                name=settings.vm_name,
                zone=settings.zone,  # a VM lives in one zone: the first of ZONE (the others are GKE's fallback)
                machine_type=shape.machine_type,
                disk_type=recipe.tpu_host.disk_type,
                network=network,
                service_account=identity.email,
                startup_script=render_startup_script(RunSpec.of_catalog(recipe), settings),
                capacity=recipe.capacity[0],  # a VM takes exactly one mode (checked where the recipe loads)
                reservation=settings.reservation,
                depends_on=identity.grants,
            ),
        )
        where = f"--zone={settings.zone} --project={settings.project}"
        self.output("vm_name", settings.vm_name, "TPU VM")
        self.output("vm_zone", settings.zone, "TPU VM zone (the first of ZONE)")
        self.output("ssh_command", ssh_command(settings),
                    "SSH through IAP (the VM has no external IP)")
        self.output("serial_output_command", f"gcloud compute instances get-serial-port-output {settings.vm_name} "
                    f"{where}", "Startup script progress without SSH")
        self.output("bucket", settings.bucket_url, "Artifacts bucket (owned by the artifacts stack)")
        self.output("vm_service_account", identity.email, "The VM's Google SA (bucket, token secret, log writes)")
