"""A single TPU VM: one provisioning model in one zone, its startup script runs every step on the TPU host."""

from __future__ import annotations

from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode
from tpu_rl.recipes.platforms.facts import CpuStepsHost, PlatformFacts, Stack, StepRunner, TpuHosts, TrainMode
from tpu_rl.recipes.settings.where import BUCKET, CLUSTER, DEPLOY, VM as WHERE_VM, fields

VM = PlatformFacts(
    label="TPU VM",
    # One VM with one provisioning model: no flex-start node pool and no queue to fall back in.
    capacity=tuple(mode.value for mode in CapacityMode if MODE_RULES[mode].vm_provisioning_model),
    max_capacity_modes=1, tpu_zones=1,  # one TPU VM, in the first zone of ZONE
    tpu_hosts=TpuHosts.DEPLOY_TO_DESTROY, cpu_steps_on=CpuStepsHost.TPU_HOST, cpu_machine_runs=(),
    # `down` checks a cluster first, which its stack has not: destroy ends it.
    stack=Stack.TPU_VM, stop_command="npx cdktf destroy {recipe}",
    train_modes=(TrainMode.JAX,), max_slices=1, steps_run_as=StepRunner.STARTUP_SCRIPT,
    user_file_kinds=(),  # its startup script trains the recipe as recipes.toml defines it
    needs={
        "synth": fields(DEPLOY, ("reservation",)),
        "recipes": (),
        "render": fields(WHERE_VM, BUCKET),  # what the script names
        "preflight": fields(("project", "region", "zone"), BUCKET, ("reservation",)),
        "secret set": ("project",),
        "run": fields(WHERE_VM, ("region",), BUCKET),
        "sweep": (),  # refused before any setting is read (recipes/runs/sweeps.py check_sweepable)
        "eval": fields(CLUSTER, ("zone",), BUCKET),  # refused before any setting is read (vm/platform.py)
        "cancel": fields(WHERE_VM, BUCKET),
        "status": fields(WHERE_VM, BUCKET),
        "runs": fields(WHERE_VM, BUCKET),  # the instance: what the stack bills with no run (views.py vm_idle)
        "logs": fields(WHERE_VM, BUCKET),  # a step's log is in the bucket once it ended
        "metrics": BUCKET,
        "down": (),  # refused before any setting is read
        "check-rewards": (),
        "fit": (),
        "plan-review": (),
    },
    refused=("eval", "sweep"),
)
