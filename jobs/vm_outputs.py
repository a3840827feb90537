"""The end of the VM recipe's startup script (jobs/vm.py): every output of the run verified in the bucket, then
the TPU VM stops its own billing (VM_AFTER_RUN=stop, the default) or stays up (VM_AFTER_RUN=keep). Its bash is
jobs/vm_script/power.sh and after_run.sh; this module holds the values they read.

Decisions (docs/pipeline.md, "When the run ends", has the sources):
- The stop is the guest's own power-off (STOP_COMMAND), which Compute Engine allows from inside the guest and
  which leaves the instance TERMINATED. Automatic restart covers only terminations by Compute Engine, not by
  the user (Compute Engine API, Scheduling.automaticRestart), and "You can't restart TPU instances" (Compute
  Engine docs, compute/docs/instances/stop-start-instance, Limitations): the stopped VM stays TERMINATED, its
  TPU and VM charges end, its boot disk bills until `cdktf destroy`, and the next run is a new VM.
- Before it stops, the script checks in the bucket what `tpu-rl run` verifies of each step
  (scripts/cloud/gcs.py step_outputs: tests/test_jobs_vm_stop.py holds the two to the same objects); anything
  missing fails the phase `verifying` like a failed step, and the VM stays up.
- The stop record (paths.vm_stop) is written before the power-off, with the instance's id (the metadata
  server's instance/id, Compute Engine docs, compute/docs/metadata/predefined-metadata-keys). A TPU VM that
  stopped never boots again, so a boot that finds the run done is a NEW VM (deleted and deployed again) or a
  rerun by hand on the same one: a record of another instance (or one it cannot read) counts as absent, and
  that boot verifies and stops. A boot of the same instance that ran nothing stays up for a look, bounded
  like after a failure.
- A failed phase, or a cancel (`tpu-rl cancel`: whoever cancelled may have walked away), keeps the VM up for a
  look, bounded: the script schedules the power-off FAILURE_STAY_MINUTES later (`shutdown -h +N`: a time
  without ':' is minutes from now, systemd/systemd src/systemctl/systemctl-compat-shutdown.c
  parse_shutdown_time_spec), which `sudo shutdown -c` cancels and a reboot (to resume) drops: logind keeps the
  schedule in /run/systemd/shutdown/scheduled (SHUTDOWN_SCHEDULE_FILE, src/login/logind-dbus.c), and /run does
  not outlive a boot; a rerun by hand cancels it (`shutdown -c` at the script's start). logind refuses
  unprivileged logins NOLOGIN_MINUTES before the power-off (/run/nologin, src/login/logind-dbus.c
  nologin_timeout_usec), so the user has that much less. After a cancel a reboot runs no step until the cancel
  marker is deleted, and each such boot is bounded again.
"""

from __future__ import annotations

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm_preamble import Value
from tpu_rl.recipes import Recipe, Settings
from tpu_rl.recipes.conventions import HF_CONFIG, HF_SINGLE_WEIGHTS, HF_TOKENIZER_FILES, HF_WEIGHTS_INDEX, ORBAX_COMMIT_MARKER
from tpu_rl.recipes.settings.specs import BY_FIELD, VM_STAYS, VM_STOPS

# systemd's shutdown(8): "-h  Equivalent to --poweroff, unless --halt is specified" (systemd/systemd
# man/shutdown.xml); the power-off reaches Compute Engine as the guest's own stop.
STOP_COMMAND = "shutdown -h now"
# How long a VM whose run failed stays up for a look before it powers itself off: about the v6e-8 hour that
# a new VM's install costs again, so a failure at night bills at most that much idle time.
FAILURE_STAY_MINUTES = 60
# logind writes /run/nologin 5 min before a scheduled shutdown (systemd/systemd src/login/logind-dbus.c
# nologin_timeout_usec, "Issue /run/nologin five minutes before shutdown"): an SSH login must come before.
NOLOGIN_MINUTES = 5
KEEP_UP_WITHIN_MINUTES = FAILURE_STAY_MINUTES - NOLOGIN_MINUTES
UNKNOWN_INSTANCE = "unknown"  # the stop record's instance when the metadata server did not answer
# The metadata server's id of this instance (Compute Engine docs, compute/docs/metadata/predefined-metadata-keys,
# instance/id; the header is required, compute/docs/metadata/querying-metadata): bounded, like every call.
INSTANCE_ID_URL = "http://metadata.google.internal/computeMetadata/v1/instance/id"
STOPPED = "stopped"  # the attempt record's `ended=` of a boot that stopped the VM (scripts/pipeline/vm/state.py)
CANCELLED = "cancelled"  # its `ended=` (and a step's state) after `tpu-rl cancel`
VERIFYING = "verifying"  # the phase that checks every output before the stop
DONE_PHASE = "done"
# The script's own word on what it does after a cancel (minutes to its power-off, or NEVER): `tpu-rl cancel`
# and `status` read it from the VM's script, which may differ from the one the local settings render.
OFF_AFTER_CANCEL = "POWER_OFF_AFTER_CANCEL_MINUTES"
NEVER = "never"


def after_run_setting(settings: Settings) -> str:
    return f"{BY_FIELD['vm_after_run'].env}={settings.vm_after_run}"


def off_after_cancel(settings: Settings) -> str:
    """What power_after does after a cancel: a power-off FAILURE_STAY_MINUTES later, or NEVER (keep)."""
    return str(FAILURE_STAY_MINUTES) if settings.vm_after_run == VM_STOPS else NEVER


def output_objects(paths: ArtifactPaths) -> dict[str, tuple[str, ...]]:
    """What the script checks of each step, as gs:// URLs: a URL ending in `*` stands for any object under
    it. Train's checkpoint and export's weights are found at run time (verify_outputs)."""
    step_dir = paths.converted_items.rstrip("/").rpartition("/")[0] + "/"
    return {"convert": (f"{paths.converted_items}*", f"{step_dir}{ORBAX_COMMIT_MARKER}"),
            "train": (f"{paths.actor_checkpoints}<newest step with {ORBAX_COMMIT_MARKER}>/model_params/*",),
            "export": tuple(f"{paths.hf_export}{name}" for name in (HF_CONFIG, *HF_TOKENIZER_FILES))
            + (f"{paths.hf_export}{HF_WEIGHTS_INDEX} and each shard it names, or {HF_SINGLE_WEIGHTS}",)}


def after_run_values(recipe: Recipe, settings: Settings, paths: ArtifactPaths) -> dict[str, Value]:
    """The values power.sh and after_run.sh read."""
    hf = paths.hf_export
    return {
        "AFTER_RUN": settings.vm_after_run, "STOP_RECORD": paths.vm_stop,
        OFF_AFTER_CANCEL: off_after_cancel(settings),
        "AFTER_RUN_ENV": BY_FIELD["vm_after_run"].env, "VM_STOPS": VM_STOPS, "VM_STAYS": VM_STAYS,
        "INSTANCE_ID_URL": INSTANCE_ID_URL, "UNKNOWN_INSTANCE": UNKNOWN_INSTANCE,
        "STOP_COMMAND": tuple(STOP_COMMAND.split()),
        "FAILURE_STAY_MINUTES": FAILURE_STAY_MINUTES, "KEEP_UP_WITHIN_MINUTES": KEEP_UP_WITHIN_MINUTES,
        "DONE_PHASE": DONE_PHASE, "VERIFYING": VERIFYING, "STOPPED": STOPPED,
        "ORBAX_COMMIT_MARKER": ORBAX_COMMIT_MARKER, "CONVERT_OUTPUTS": output_objects(paths)["convert"],
        "HF_EXPORT": hf, "HF_NAMED_FILES": tuple(hf + name for name in (HF_CONFIG, *HF_TOKENIZER_FILES)),
        "HF_WEIGHTS_INDEX": HF_WEIGHTS_INDEX, "HF_SINGLE_WEIGHTS": HF_SINGLE_WEIGHTS,
        "ACCELERATOR_TYPE": recipe.shape.accelerator_type,
        "DEPLOY_COMMAND": f"npx cdktf deploy {recipe.name}", "DESTROY_COMMAND": f"npx cdktf destroy {recipe.name}",
    }
