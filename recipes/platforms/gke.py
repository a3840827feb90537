"""GKE: a cluster with TPU node pools and a CPU pool, a JobSet per step, Kueue in front of the slices."""

from __future__ import annotations

from tpu_rl.recipes.capacity.modes import CAPACITY_MODES
from tpu_rl.recipes.platforms.facts import CpuStepsHost, PlatformFacts, Stack, StepRunner, TpuHosts, TrainMode
from tpu_rl.recipes.settings.where import BUCKET, CLUSTER, DEPLOY, fields

_RUN = fields(CLUSTER, ("zone",), BUCKET)  # ZONE: where a step waiting for Kueue may get its slice (gke/admission.py)

GKE = PlatformFacts(
    label="GKE", capacity=CAPACITY_MODES,
    max_capacity_modes=len(CAPACITY_MODES),  # a TPU node pool per mode: a capacity list falls back through them
    tpu_zones=None,  # TPU node pools in every zone of ZONE (recipes/capacity/placement.py)
    tpu_hosts=TpuHosts.WHILE_TRAINING, cpu_steps_on=CpuStepsHost.CPU_POOL,
    cpu_machine_runs=("the Pathways head", "convert", "export"),  # the CPU pool of recipes.toml's cpu_machine_type
    stack=Stack.CLUSTER, stop_command="tpu-rl down {recipe}",  # down checks the cluster first (gke/down.py)
    train_modes=(TrainMode.JAX, TrainMode.PATHWAYS), max_slices=None, steps_run_as=StepRunner.JOBSETS,
    user_file_kinds=("rewards", "data-processor"),  # a ConfigMap mounted into the train step
    needs={
        "synth": fields(DEPLOY, ("reservation", "authorized_cidr")),
        "recipes": (),
        "render": ("gcs_bucket",),  # what the manifests name
        # Capacity, quota, bucket and token; the cluster's version for flex-start.
        "preflight": fields(CLUSTER, ("zone",), BUCKET, ("reservation",)),
        "secret set": ("project",),
        "run": _RUN,  # the bucket's region (run writes checkpoints there), the zones it waits for capacity in
        "sweep": _RUN,  # as `run`: each run of the sweep is one
        "eval": _RUN,
        "cancel": fields(CLUSTER, BUCKET),
        "status": _RUN,
        "runs": fields(CLUSTER, BUCKET),  # the cluster too: what it bills with no run (gke/billing.py)
        "logs": CLUSTER,
        "metrics": BUCKET,
        # `npx cdktf destroy RECIPE` synthesizes every stack: what synth needs, checked before anything goes.
        "down": fields(DEPLOY, ("reservation", "authorized_cidr")),
        "check-rewards": (),
        "fit": (),  # the plan is compiled on this machine; paths and names never change what a chip holds
        "plan-review": (),  # both sides use the example settings (scripts/plan_review/worktrees.py)
    },
)
