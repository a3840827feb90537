"""A sandbox a user can keep: the peers the tests use (peers/fixtures.py start_peers: the fake Kubernetes API
with JobSet and Kueue, Compute, TPU and Secret Manager, the Hugging Face Hub, the GCS emulator), started once,
in which any `run`, `sweep`, `eval`, `cancel` and `down` a user types has a simulated outcome.

Nothing is scripted in advance under a run's name: every JobSet the driver (or `eval`) creates gets its plan
when it is created (KubeApi.unscripted), from its labels and the run.json its `run` wrote (unscripted_plan):
each step succeeds after a few polls and leaves its output in the bucket as its container would
(peers/step_outputs.py); train logs MaxText's step and evaluation lines and leaves curves
(peers/simulated_run.py). The stack's Terraform state names the sandbox's cluster (peers/tf_state.py), and
the sandbox's `npx` simulates `cdktf destroy` and `cdktf deploy` of it (peers/sandbox_daemon.py). The VM
recipe's stack is deployed too: its TPU VM, whose real startup script runs against stand-ins when a command
first reads the VM, and which goes and comes back with its stack's state (peers/sandbox_vm.py). Every
figure is synthetic. The CLI labels each command a simulation while TPU_RL_SANDBOX is set (scripts/cli/core.py).

start_sandbox is what `make sandbox` (peers/sandbox_daemon.py) and the tests (tests/test_sandbox.py) start.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from pathlib import Path

from tpu_rl.scripts.cli.core import SANDBOX_ENV
from tpu_rl.scripts.cloud.clients import SANDBOX_BIN
from peers.fixtures import REPO, SETTINGS, TOKEN, clean_environment, start_gcs_emulator, start_peers
from peers.jobset_plan import Plan

TICKS = 3  # polls of running before convert and export succeed
TRAIN_TICKS = 12  # train's: enough for its log to grow through its steps and evaluations
# Kueue admits one TPU workload at a time: one slice, as the recipes' ClusterQueue quota (a sweep queues).
SLICE_QUOTA = 1
STACK = "qwen3-v6e32"  # the deployed stack whose state `down` reads (start_peers' tf_state) and whose nodes bill
# A system-pool node's allocatable (an e2-standard-4 as GKE reports it, as tests/test_cli_sweep_nodes.py has it).
SYSTEM_NODE_ALLOCATABLE = {"cpu": "3920m", "memory": "13621Mi", "pods": "110"}

# The npx first on the sandbox's PATH: cdktf's destroy and deploy of a stack are simulated, anything else is
# the real npx (the rest of PATH).
SANDBOX_NPX = """#!/bin/sh
# The sandbox's npx (tests/peers/sandbox.py): `cdktf destroy|deploy STACK` simulated; the rest, npx's.
if [ "$1" = cdktf ] && { [ "$2" = destroy ] || [ "$2" = deploy ]; }; then
  PYTHONPATH=@PYTHONPATH@ exec @PYTHON@ -m peers.sandbox_daemon "$2" "$3"
fi
PATH=$(printf '%s' "$PATH" | tr ':' '\\n' | grep -vxF @BIN@ | paste -sd: -) exec npx "$@"
"""


def write_npx(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    npx = bin_dir / "npx"
    filled = {"@PYTHONPATH@": f"{REPO}{os.pathsep}{REPO / 'tests'}", "@PYTHON@": sys.executable, "@BIN@": str(bin_dir)}
    text = SANDBOX_NPX
    for placeholder, value in filled.items():
        text = text.replace(placeholder, shlex.quote(value))
    npx.write_text(text)
    npx.chmod(0o755)


def stack_state_text(env: dict[str, str], stack: str) -> str:
    """The Terraform state `cdktf deploy STACK` leaves for the sandbox's settings: a GKE stack's cluster, or
    a VM stack's TPU VM (peers/tf_state.py)."""
    from tpu_rl.recipes import get_recipe, load_settings
    from peers.tf_state import cluster_state, vm_state

    if get_recipe(stack).platform == "vm":
        return vm_state(env["PROJECT"], env["ZONE"], load_settings(env=env).vm_name)
    return cluster_state(env["PROJECT"], env["REGION"], env["CLUSTER_NAME"])


def recorded_specs(gcs_client, settings, recipe) -> list:
    """The runs of `recipe` the bucket holds a run.json of, as that record says they were started: the
    name, then the --set items (which decide the last step, hence where train leaves its parameters)."""
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from tpu_rl.recipes import UserError
    from tpu_rl.recipes.runs.spec import RunSpec

    bucket, prefix = split_gs_url(ArtifactPaths(RunSpec.of_catalog(recipe), settings).trained)
    specs = []
    for blob in gcs_client.list_blobs(bucket, prefix=prefix):
        if not blob.name.endswith("/run.json"):
            continue
        try:
            record = json.loads(blob.download_as_text())
            if record.get("recipe") == recipe.name and record.get("run"):
                sets = (record.get("overrides") or {}).get("set") or ()
                specs.append(RunSpec.in_bucket(recipe, record["run"]).with_sets(sets))
        except (ValueError, UserError):  # a record no run of today's code reads: its JobSets get the defaults
            continue
    return specs


def spec_of_jobset(gcs_client, settings, manifest: dict):
    """The run a JobSet belongs to: the recorded run whose JobSet of that step has its name (convert's is
    shared by the runs of one conversion); an `eval`'s scratch run, which has no record, by its run label."""
    from tpu_rl.jobs.k8s import RECIPE_LABEL, RUN_LABEL, STEP_LABEL, jobset_name
    from tpu_rl.recipes import get_recipe
    from tpu_rl.recipes.runs.spec import RunSpec

    labels = manifest["metadata"].get("labels") or {}
    recipe, step, name = get_recipe(labels[RECIPE_LABEL]), labels[STEP_LABEL], manifest["metadata"]["name"]
    for spec in recorded_specs(gcs_client, settings, recipe):
        if jobset_name(spec, step) == name:
            return spec
    return RunSpec.in_bucket(recipe, labels[RUN_LABEL]) if RUN_LABEL in labels else RunSpec.of_catalog(recipe)


def unscripted_plan(gcs_client, ticks: int = TICKS, train_ticks: int = TRAIN_TICKS):
    """KubeApi.unscripted for the sandbox: each step of any run succeeds and writes its output; train logs
    its steps and evaluations as it runs (so `eval`, which reads the first evaluation, works too)."""
    from tpu_rl.jobs.k8s import STEP_LABEL
    from peers.settings import peer_settings
    from peers.simulated_run import put_curves, train_log_reads
    from peers.step_outputs import put_step_output

    def plan(manifest: dict) -> Plan:
        spec = spec_of_jobset(gcs_client, peer_settings(), manifest)
        step = manifest["metadata"]["labels"][STEP_LABEL]

        def finish() -> None:
            put_step_output(gcs_client, spec, step)
            if step == "train":
                put_curves(gcs_client, spec)

        if step != "train":
            return Plan(ticks=ticks, on_success=finish)
        return Plan(ticks=train_ticks, on_success=finish,
                    log_reads=train_log_reads(spec.recipe.train_steps, max(1, train_ticks - 3)))

    return plan


class Sandbox:
    """The peers, started once, answering any run with a simulated outcome; `env` points the real entry
    points at them (and names the sandbox, SANDBOX_ENV, so the CLI labels its output). A context manager:
    the peers stop on exit."""

    def __init__(self, home: Path, poll_seconds: str = "1") -> None:
        from peers.simulated_run import put_idle_cluster_nodes
        from peers.sandbox_vm import SandboxVm
        from tpu_rl.recipes import all_recipes, conventions, get_recipe

        # The emulator logs each 404 as an error; `run` reading a run.json that does not exist yet is no error.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
        self.home, self.bin_dir = home, home / SANDBOX_BIN
        write_npx(self.bin_dir)
        self.gcs_emulator = start_gcs_emulator()
        env = clean_environment(home)
        self.env = {**env, "PATH": f"{self.bin_dir}{os.pathsep}{env['PATH']}", **SETTINGS,
                    "TPU_RL_POLL_SECONDS": poll_seconds, SANDBOX_ENV: str(home)}
        try:
            self.peers = start_peers({"tf_state": "own", "recipe": STACK}, self.env, home, TOKEN, self.gcs_emulator)
        except BaseException:
            self.gcs_emulator[0].stop()
            raise
        kube = self.peers.kube
        kube.unscripted = unscripted_plan(self.peers.gcs_client)
        kube.slice_quota = SLICE_QUOTA
        put_idle_cluster_nodes(kube, get_recipe(STACK))  # what `runs` and `down` price once a run has ended
        for node in kube.nodes.values():  # what `sweep` reads of the system pool's room for its drivers
            if node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == conventions.SYSTEM_POOL_NAME:
                node["status"]["allocatable"] = dict(SYSTEM_NODE_ALLOCATABLE)
        # each VM recipe's stack deployed: its state, and its TPU VM, whose startup script runs when the VM is
        # first read (peers/sandbox_vm.py)
        self.vms = []
        for recipe in all_recipes().values():
            if recipe.platform == "vm":
                state = self.peers.gcs_client.bucket(self.env["TF_STATE_BUCKET"])
                state.blob(conventions.remote_state_object(recipe.name)).upload_from_string(
                    stack_state_text(self.env, recipe.name))
                self.vms.append(SandboxVm(self.peers.google, self.peers.gcs_client, self.env, recipe.name,
                                          home / recipe.name))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for vm in self.vms:
            vm.stop()
        self.peers.stop()
        self.gcs_emulator[0].stop()


def start_sandbox(home: Path, poll_seconds: str = "1") -> Sandbox:
    """The sandbox, its files (kubeconfig, the driver's home) under `home`."""
    home.mkdir(parents=True, exist_ok=True)
    return Sandbox(home, poll_seconds)
