"""The end of the VM recipe's startup script (jobs/vm.py): every output of the run verified in the bucket, then
the TPU VM stops its own billing (VM_AFTER_RUN=stop, the default) or stays up (VM_AFTER_RUN=keep).

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

import shlex

from tpu_rl.jobs.paths import ArtifactPaths
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


def stop_helpers(settings: Settings, paths: ArtifactPaths) -> str:
    """Shell functions for the header: newest_checkpoint, and power_after, which on_exit runs last (it needs
    jobs/vm.py's log, list_objects, RUN and ENDED)."""
    q = shlex.quote
    actor = paths.actor_checkpoints
    return f"""# --- after the run ({after_run_setting(settings)}): stop the VM once every output is verified (jobs/vm_outputs.py)
readonly AFTER_RUN={q(settings.vm_after_run)} STOP_RECORD={q(paths.vm_stop)}
readonly {OFF_AFTER_CANCEL}={off_after_cancel(settings)}
POWER_OFF="" POWER_OFF_LATER="" RAN="" INSTANCE_ID=""
# This instance's id, for the stop record; empty when the metadata server does not answer (the record then
# matches no boot, and a boot that finds the run done verifies and stops).
read_instance_id() {{
  INSTANCE_ID="$(curl -fsS --max-time 10 -H 'Metadata-Flavor: Google' {INSTANCE_ID_URL} 2>/dev/null)" || INSTANCE_ID=""
}}
# Once gcloud is ready: this instance's id, and a rerun by hand (no reboot) drops the power-off an earlier
# attempt scheduled (power_after; a reboot drops it anyway): this attempt decides anew.
begin_after_run() {{
  read_instance_id
  if [[ "$AFTER_RUN" == {VM_STOPS} ]]; then shutdown -c 2>/dev/null || true; fi
}}
# Whether this instance wrote the stop record (a TPU VM cannot be started again: another is a new VM).
stopped_here() {{
  local record
  [[ -n "$INSTANCE_ID" ]] && step_done "$STOP_RECORD" || return 1
  record="$(gcloud storage cat "$STOP_RECORD" 2>/dev/null)" || return 1
  [[ " $record " == *" instance=$INSTANCE_ID "* ]]
}}
# The newest training step with orbax's commit marker under {actor}: train_rl saves the step it reached.
# Prints nothing when there is none; exit 2 when the listing failed all its tries (list_objects).
newest_checkpoint() {{
  local committed
  committed="$(list_objects {q(actor + '*/' + ORBAX_COMMIT_MARKER)})" || return 2
  printf '%s' "$committed" | sed -nE 's#.*/([0-9]+)/{ORBAX_COMMIT_MARKER}$#\\1#p' | sort -n | tail -n 1
}}
# The last thing on_exit does: the stop this boot earned, or, after a failure or a cancel, a power-off
# {FAILURE_STAY_MINUTES} min later (whoever cancelled may have walked away). After a cancel a reboot alone runs no step.
power_after() {{
  [[ "$AFTER_RUN" == {VM_STOPS} ]] || return 0
  local why="${{POWER_OFF_LATER:-failed}}" minutes={FAILURE_STAY_MINUTES} resume="\\`sudo reboot\\` resumes the run"
  if [[ "$ENDED" == {CANCELLED} ]]; then why={CANCELLED} minutes="${OFF_AFTER_CANCEL}" resume="\\`gcloud storage rm $CANCEL_MARKER\\` and \\`sudo reboot\\` resume the run"; fi
  if [[ -n "$POWER_OFF" ]]; then
    {STOP_COMMAND} || log "{STOP_COMMAND} failed: the VM stays up and bills until it is stopped or destroyed"
  elif [[ -n "$POWER_OFF_LATER" || $1 -ne 0 || "$ENDED" == {CANCELLED} ]]; then
    log "the VM stays up {FAILURE_STAY_MINUTES} min for a look, then powers itself off: \\`sudo shutdown -c\\` on it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, $resume"
    shutdown -h "+$minutes" "tpu-rl: run $RUN $why; powering off" || log "could not schedule the power-off: the VM stays up"
  fi
}}"""


def after_run_phase(recipe: Recipe, settings: Settings, paths: ArtifactPaths) -> str:
    """The script's last part, after the steps: verify every output, then stop (or say why the VM stays up)."""
    q = shlex.quote
    hf = paths.hf_export
    deploy, destroy = f"npx cdktf deploy {recipe.name}", f"npx cdktf destroy {recipe.name}"
    stays = f"it bills at the {recipe.shape.accelerator_type} rate until \\`{destroy}\\`"
    named = " ".join(q(hf + name) for name in (HF_CONFIG, *HF_TOKENIZER_FILES))
    convert = " ".join(q(url) for url in output_objects(paths)["convert"])
    return f"""# --- the run is done: verify every output in the bucket, then stop the VM ({after_run_setting(settings)})
begin_phase "{DONE_PHASE}"
log "all steps done; the Hugging Face model is in {hf}"
# need URL...: each URL that does not exist (a trailing * matches any object under it) goes to MISSING.
MISSING=()
need() {{ local url; for url in "$@"; do step_done "$url" || MISSING+=("$url"); done; }}
verify_outputs() {{
  local step index
  need {convert}
  step="$(newest_checkpoint)" || {{ log "{VERIFYING}: cannot list the checkpoints (gcloud failed, above)"; exit 1; }}
  if [[ -z "$step" ]]; then MISSING+=({q(paths.actor_checkpoints)}"<step>/{ORBAX_COMMIT_MARKER}"); else need {q(paths.actor_checkpoints)}"$step/model_params/*"; fi
  need {named}
  if step_done {q(hf + HF_WEIGHTS_INDEX)}; then
    index="$(gcloud storage cat {q(hf + HF_WEIGHTS_INDEX)})" || {{ log "{VERIFYING}: cannot read {hf}{HF_WEIGHTS_INDEX}"; exit 1; }}
    for shard in $(printf '%s' "$index" | grep -oE '"[^"]+\\.safetensors"' | tr -d '"' | sort -u); do need {q(hf)}"$shard"; done
  else
    need {q(hf + HF_SINGLE_WEIGHTS)}
  fi
  if [[ ${{#MISSING[@]}} -gt 0 ]]; then
    log "{VERIFYING}: not in the bucket: ${{MISSING[*]}}: the VM does not stop itself"
    exit 1
  fi
}}
if [[ "$AFTER_RUN" != {VM_STOPS} ]]; then
  log "the VM stays up ({BY_FIELD['vm_after_run'].env}={VM_STAYS}): {stays}"
elif [[ -z "$RAN" ]] && stopped_here; then
  log "run $RUN was done and this VM stopped itself before; this rerun ran nothing"
  POWER_OFF_LATER="ran nothing"
else
  begin_phase {VERIFYING}
  verify_outputs
  printf 'attempt=%s at=%s instance=%s\\n' "$ATTEMPT" "$(date -u +%FT%TZ)" "${{INSTANCE_ID:-{UNKNOWN_INSTANCE}}}" | put "$STOP_RECORD"
  log "{STOPPED}: every output of run $RUN is verified in the bucket: the VM powers itself off ({STOP_COMMAND}) and bills only its boot disk from now; a new run: change the recipe, then \\`{deploy}\\` (it replaces the VM)"
  PHASE="{DONE_PHASE}" ENDED={STOPPED} POWER_OFF=1
fi"""
