"""The startup script of a VM recipe (seed 002): install MaxText, then convert -> RL -> export on one TPU VM.

The script is bash in jobs/vm_script/*.sh, each part read whole; render_startup_script puts the run's values
above them, once, as readonly variables (jobs/vm_preamble.py), and the step bodies (MaxText's commands,
jobs/maxtext.py) below steps.sh as one function a step.

Decisions:
- Every step reads and writes the bucket paths from ArtifactPaths directly, not /dev/shm as the seed
  does. /dev/shm is lost on a reboot or a maintenance event; the bucket is what `tpu-rl` verifies and
  what lets a rebooted VM resume. The Hugging Face export therefore lands in the bucket without a copy.
- A finished step writes its marker (paths.progress_marker: convert's with the shared conversion, train's
  and export's under the run); at boot, steps whose marker exists are skipped, so the script resumes after
  a reboot, and a run whose conversion exists does not convert again. Markers are written only after the
  step succeeded. The script runs one run: the recipe's, as rendered.
- The token is read from Secret Manager at run time into HF_TOKEN of this process (tracing off, never
  echoed, never an argument). MaxText falls back to HF_TOKEN when hf_access_token is not given.
- The install goes to /opt/tpu-rl (the boot disk, so it survives reboots) and is skipped when done.
- `tpu-rl cancel` writes paths.cancel_marker instead of stopping the VM (a stopped TPU VM cannot be started
  again). The script checks it before each step, and a background watcher polls it while a step runs and
  sends SIGTERM to MaxText when it appears; the step then ends without its marker, so everything it wrote
  is kept and a later boot without the cancel marker resumes there (train from its last checkpoint). With
  VM_AFTER_RUN=stop the script then powers the VM off, bounded as after a failure (jobs/vm_outputs.py).
- Step state lives in the bucket, not on the console (getSerialPortOutput returns only the last 1 MB):
  each boot is an attempt (logged first, ATTEMPT_LINE) with a record of the phase it is in
  (paths.vm_attempt); any phase that fails (install, token, a step) writes paths.vm_failure with the
  attempt, phase, exit code and log tail, and a step's whole log goes to paths.step_log when it ends.
  Every line the script logs names its run.
- Every record goes through gcloud, which may be a snap that snapd has not mounted yet at first boot: each
  boot sets its exit trap and logs its attempt line, then waits for gcloud within a bound
  (jobs/vm_script/records.sh wait_for_gcloud); past it, the boot ends with one console line and no record.
"""

from __future__ import annotations

import re

from tpu_rl.jobs.maxtext import maxtext_commands
from tpu_rl.jobs.patches import render_patch, resolve_patches
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm_install import install_values, token_values
from tpu_rl.jobs.vm_outputs import CANCELLED, after_run_values
from tpu_rl.jobs.vm_preamble import Knob, Value, part, preamble
from tpu_rl.recipes import STEPS, Recipe, Settings, UserError
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.platforms import StepRunner

LOG_FILE = "/var/log/tpu-rl.log"
# The script's PATH: uv's (/root/.local/bin), the snaps' (gcloud), then root's standard PATH (why: records.sh).
SCRIPT_PATH = "/root/.local/bin:/snap/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The script's progress lines, "tpu-rl: <UTC time> <step>: starting|done", are written by log() and run_step
# (jobs/vm_script/) and read back from the serial console by scripts/pipeline/vm/run.py with PROGRESS_LINE: one
# definition for both sides. The guest agent copies each output line to the console behind its own
# prefix ("startup-script: ", GoogleCloudPlatform/guest-agent google_metadata_script_runner/main.go
# runCmd), so the pattern is searched, not anchored at the line start.
LOG_TAG = "tpu-rl:"
STARTING, DONE, FAILED, BOOT = "starting", "done", "failed", "boot"
# The phase of the checks before a step (its marker, the cancel marker): "checking-<step>" (no space: the
# records are space-separated key=value fields).
CHECKING = "checking"
# How often the watcher looks for the cancel marker; the environment variable is a knob for tests (the
# guest agent does not set it).
CANCEL_POLL_SECONDS = 30
CANCEL_POLL_ENV = "TPU_RL_CANCEL_POLL_SECONDS"
# The same watcher rewrites the heartbeat record (paths.vm_heartbeat) in its own loop, each upload bounded:
# the newer guest agent's lines may not reach the console (GoogleCloudPlatform/google-guest-agent
# internal/logger/logger_linux.go at 16b9b3bf), so a killed script shows only as a heartbeat that
# stopped, which `run` judges by its own clock (docs/provenance.md#vm-heartbeat).
HEARTBEAT_SECONDS = CANCEL_POLL_SECONDS
HEARTBEAT_UPLOAD_SECONDS = 60
HEARTBEAT_STALE_SECONDS = 600
# A bucket check (`gcloud storage ls`) that fails for another reason than "no such object" is retried
# (VM_SCRIPT_RETRIES.bucket). gcloud's own words for a missing object (googlecloudsdk/command_lib/storage/tasks/
# ls/cloud_list_task.py, CloudListTask.execute: InvalidUrlError, printed as "ERROR: (gcloud.storage.ls) ...").
GCS_NO_MATCH = "One or more URLs matched no objects"
# How many lines of the failed phase's log go into the failure record (the whole step log goes beside it).
FAILURE_TAIL_LINES = 40
# The steps' processes, as maxtext_commands runs them (`python3 -m maxtext.<module>`, children of the
# script itself): what the watcher stops, and only the script's own (pkill -P).
MAXTEXT_PROCESS = "python3 -m maxtext[.]"
# Every line the script logs names its run, so a console that still shows another run's lines (an earlier
# recipe's script) is not read as this run's: "tpu-rl: <UTC time> <run> <what>".
_HEAD = rf"{re.escape(LOG_TAG)} \S+ (?P<run>\S+) "
PROGRESS_LINE = re.compile(
    _HEAD + rf"(?P<step>{'|'.join(STEPS)}): (?P<event>{STARTING}|{DONE})[ \t\r]*$", re.MULTILINE)
# The first line of every boot: which attempt the lines after it belong to.
ATTEMPT_LINE = re.compile(_HEAD + rf"attempt (?P<attempt>\S+): {BOOT}[ \t\r]*$", re.MULTILINE)
# The script's run name as the rendered script sets it (read back from the instance's metadata).
RUN_ASSIGNMENT = re.compile(r"^readonly RUN=(?P<run>\S+)$", re.MULTILINE)


def ssh_command(settings: Settings) -> str:
    """SSH to the TPU VM: through IAP, as the VM has no external IP (infra/tpu_vm.py, infra/network.py)."""
    return f"gcloud compute ssh {settings.vm_name} --zone={settings.zone} --project={settings.project} --tunnel-through-iap"


def tpu_env(recipe: Recipe) -> dict[str, str]:
    """The TPU_* runtime environment of seed 002, derived from the shape (single-host only)."""
    shape = recipe.shape
    if shape.total_hosts != 1:
        raise UserError(
            f"recipe '{recipe.name}': a VM recipe runs on one TPU VM, but {shape.topology} on "
            f"{shape.machine_type} needs {shape.total_hosts} hosts; use platform 'gke' for multi-host slices"
        )
    return {
        "TPU_ACCELERATOR_TYPE": shape.accelerator_type,
        "TPU_WORKER_ID": "0",
        "TPU_SKIP_MDS_QUERY": "1",
        "TPU_WORKER_HOSTNAMES": "localhost",
        "TPU_TOPOLOGY": shape.topology,
        "TPU_CHIPS_PER_HOST_BOUNDS": shape.chips_per_host_bounds,
        "TPU_HOST_BOUNDS": "1,1,1",
    }


def _tpu_environment(recipe: Recipe, patch_env: dict[str, str]) -> dict[str, str]:
    """What the steps run with on the VM: the TPU runtime's variables, the recipe's rl.env, the patches'
    settings; a name set twice is refused, as a GKE container refuses it (jobs/k8s.py env_list), not one
    silently overriding the other (an rl.env TPU_TOPOLOGY would change the slice JAX sees)."""
    merged = dict(tpu_env(recipe))
    # The steps' own process compiles, and libtpu reads its flags from LIBTPU_INIT_ARGS.
    compiler = {"LIBTPU_INIT_ARGS": " ".join(recipe.rl.xla_flags)} if recipe.rl.xla_flags else {}
    for group in (compiler, recipe.rl.env, patch_env):
        for name, value in group.items():
            if name in merged:
                raise UserError(f"environment variable {name} is set twice on the TPU VM; tpu-rl sets it already, "
                                "so remove it from rl.env in recipes.toml")
            merged[name] = value
    return merged


def _values(recipe: Recipe, paths: ArtifactPaths, env: dict[str, str]) -> dict[str, Value]:
    """The run's values the records, the cancel, the boot and the steps read (records.sh, cancel.sh, boot.sh,
    steps.sh)."""
    return {
        "RUN": paths.run_name, "LOG_FILE": LOG_FILE, "SCRIPT_PATH": SCRIPT_PATH, "LOG_TAG": LOG_TAG,
        "ATTEMPT_RECORD": paths.vm_attempt, "FAILURE_RECORD": paths.vm_failure, "HEARTBEAT": paths.vm_heartbeat,
        "CANCEL_MARKER": paths.cancel_marker,
        "STEP_MARKERS": {step: paths.progress_marker(step) for step in STEPS},
        "STEP_LOGS": {step: paths.step_log(step) for step in STEPS},
        "ACTOR_CHECKPOINTS": paths.actor_checkpoints, "LAST_STEP": recipe.last_step,
        "TPU_ENV": _tpu_environment(recipe, env),
        "BOOT": BOOT, "CHECKING": CHECKING, "STARTING": STARTING, "DONE": DONE, "FAILED": FAILED,
        "CANCELLED": CANCELLED,
        "GCLOUD_WAIT_SECONDS": Knob.of(VM_SCRIPT_RETRIES.gcloud_wait),
        "GCS_TRIES": VM_SCRIPT_RETRIES.bucket.tries, "GCS_RETRY_SECONDS": Knob.of(VM_SCRIPT_RETRIES.bucket.pause),
        "GCS_NO_MATCH": GCS_NO_MATCH,
        "FAILURE_TAIL_LINES": FAILURE_TAIL_LINES,
        "CANCEL_POLL_SECONDS": Knob(CANCEL_POLL_ENV, CANCEL_POLL_SECONDS),
        "HEARTBEAT_SECONDS": Knob(CANCEL_POLL_ENV, HEARTBEAT_SECONDS),
        "HEARTBEAT_UPLOAD_SECONDS": HEARTBEAT_UPLOAD_SECONDS,
        "MAXTEXT_PROCESS": MAXTEXT_PROCESS,
    }


def _head(recipe: Recipe, paths: ArtifactPaths) -> str:
    return f"""#!/bin/bash
# tpu-rl startup script for recipe '{recipe.name}', run {paths.run_name} (generated by `tpu-rl render`; edit
# recipes.toml instead). Runs at every boot: installs MaxText {recipe.maxtext_version} once, then runs the
# steps whose progress marker is missing.
set -euo pipefail
# The run's values, read by name by every part below (jobs/vm_script/*.sh, as jobs/vm.py renders them).
"""


EXPORT_STEP_VAR = "EXPORT_STEP"  # set by steps.sh find_export_step


def _step(step: str, body: str) -> str:
    # The body is not indented: the patch heredocs need their terminator at column 0.
    return f"# --- step {step}\n{step}_body() {{\n{body}\n}}\nrun_step {step}"


def render_startup_script(spec: RunSpec, settings: Settings) -> str:
    recipe = spec.recipe
    if recipe.platform_facts.steps_run_as != StepRunner.STARTUP_SCRIPT:
        raise UserError(f"recipe '{recipe.name}' runs its steps as {recipe.platform_facts.steps_run_as}, not a "
                        "startup script; render them with render_steps (`tpu-rl render` does)")
    paths = ArtifactPaths(spec, settings)
    commands = maxtext_commands(recipe, paths)
    resolved = resolve_patches(recipe)
    for patch in resolved.apply:
        if patch.path:
            raise UserError(
                f"recipe '{recipe.name}': patch '{patch.name}' targets the container path {patch.path}; "
                "on a VM only module patches apply (set `module` instead of `path`)"
            )
    train_steps = [render_patch(patch) for patch in resolved.apply] + [commands["train"].shell()]
    params = f"{paths.actor_checkpoints}${{{EXPORT_STEP_VAR}}}/model_params/"
    bodies = {
        "convert": commands["convert"].shell(),
        "train": "\n\n".join(train_steps),
        "export": "find_export_step\n" + commands["export"].shell(expand={"load_parameters_path": params}),
    }
    values = {**_values(recipe, paths, resolved.env), **install_values(recipe), **token_values(settings),
              **after_run_values(recipe, settings, paths)}
    parts = [
        _head(recipe, paths) + preamble(values),
        *(part(name) for name in ("records", "bounded", "cancel", "power", "boot", "install", "tpu_env", "token",
                                  "steps")),
        *(_step(step, bodies[step]) for step in STEPS),
        part("after_run"),
    ]
    return "\n\n".join(parts) + "\n"
