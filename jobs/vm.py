"""The startup script of a VM recipe (seed 002): install MaxText, then convert -> RL -> export on one TPU VM.

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
  (jobs/vm_install.py gcloud_wait); past it, the boot ends with one console line and no record.
"""

from __future__ import annotations

import re
import shlex

from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.patches import render_patch, resolve_patches
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm_install import (APT_LOCK, APT_TRIES, INSTALL, INSTALL_DIR, RETRY_ENV, RETRY_SECONDS,  # noqa: F401
                             SYSTEM_PACKAGES, TOKEN, UPTIME_S, UV_VERSION, gcloud_wait, install_phase, token_phase)
from tpu_rl.jobs.vm_outputs import CANCELLED, after_run_phase, stop_helpers
from tpu_rl.recipes import STEPS, Recipe, Settings, UserError
from tpu_rl.recipes.runs.spec import RunSpec

LOG_FILE = "/var/log/tpu-rl.log"
# The script's PATH: uv's (/root/.local/bin), the snaps' (gcloud), then root's standard PATH (why: the header).
SCRIPT_PATH = "/root/.local/bin:/snap/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The script's progress lines, "tpu-rl: <UTC time> <step>: starting|done", are written by log() and
# _step() below and read back from the serial console by scripts/pipeline/vm/run.py with PROGRESS_LINE: one
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
# A bucket check (`gcloud storage ls`) that fails for another reason than "no such object" is retried this
# many times, RETRY_SECONDS * try apart, before the script stops: a transient error at boot must not rerun
# a finished step. gcloud's own words for a missing object (googlecloudsdk/command_lib/storage/tasks/ls/
# cloud_list_task.py, CloudListTask.execute: InvalidUrlError, printed as "ERROR: (gcloud.storage.ls) ...").
GCS_NO_MATCH = "One or more URLs matched no objects"
GCS_TRIES = 5
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


def _exports(values: dict[str, str]) -> str:
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in values.items())


def _header(recipe: Recipe, settings: Settings, paths: ArtifactPaths) -> str:
    q = shlex.quote
    step_logs = "\n".join(f"      {step}) put_step_log {q(paths.step_log(step))} || true ;;" for step in STEPS)
    return f"""#!/bin/bash
# tpu-rl startup script for recipe '{recipe.name}', run {paths.run_name} (generated by `tpu-rl render`; edit
# recipes.toml instead). Runs at every boot: installs MaxText {recipe.maxtext_version} once, then runs the
# steps whose progress marker is missing.
set -euo pipefail
# Keep a log on disk and still let the guest agent copy the output to the serial console. -p: a reader that
# goes away (both agents stop reading at a line over bufio.Scanner's 64 KiB) does not kill tee with SIGPIPE,
# nor then this script: tee writes on to the file alone (GNU coreutils tee, -p = --output-error=warn-nopipe).
exec > >(tee -p -a {LOG_FILE}) 2>&1
export HOME=/root
# Root's standard PATH (with uv's and the snaps' directories): dpkg refuses to run when ldconfig or
# start-stop-daemon (in /usr/sbin, /sbin) is not on it (guillemj/dpkg 1.21.1 src/help.c checkpath, from
# src/packages.c: "root's PATH should usually contain /usr/local/sbin, /usr/sbin and /sbin").
export PATH="{SCRIPT_PATH}"

readonly VENV={INSTALL_DIR}/venv
readonly RUN={q(paths.run_name)}
readonly LOG_FILE={LOG_FILE}
# One attempt per boot: the records below name it, so an earlier boot's failure does not end this one.
ATTEMPT="$(date -u +%Y%m%dT%H%M%SZ)-$$"
readonly ATTEMPT
readonly ATTEMPT_RECORD={q(paths.vm_attempt)} FAILURE_RECORD={q(paths.vm_failure)} HEARTBEAT={q(paths.vm_heartbeat)}
PHASE="{BOOT}"
PHASE_START=0
LAST_LINE=""
log() {{ LAST_LINE="{LOG_TAG} $(date -u +%FT%TZ) $RUN $*"; echo "$LAST_LINE"; }}
{UPTIME_S}
{gcloud_wait(BOOT)}
# tee writes the log file a moment after the console: wait (at most 5 s) until the last line is there.
flush_log() {{
  for _ in $(seq 50); do
    if tail -n 5 "$LOG_FILE" 2>/dev/null | grep -qF -- "$LAST_LINE"; then return 0; fi
    sleep 0.1
  done
}}
phase_log() {{ tail -c +"$((PHASE_START + 1))" "$LOG_FILE"; }}
# An upload is retried like a check: a transient error must not fail a phase that did its work.
put() {{
  local try err body
  body="$(mktemp)"
  cat > "$body"
  for try in $(seq {GCS_TRIES}); do
    if err="$(gcloud storage cp - "$1" < "$body" 2>&1 >/dev/null)"; then rm -f "$body"; return 0; fi
    log "gcloud storage cp $1 failed (try $try of {GCS_TRIES}): ${{err##*$'\n'}}"
    sleep "$((${{{RETRY_ENV}:-{RETRY_SECONDS}}} * try))"
  done
  rm -f "$body"
  return 1
}}
# The URLs matching $1 (a wildcard, or one object), one a line; none when nothing matches ({GCS_NO_MATCH!r}).
# Exit 2 when gcloud failed otherwise, {GCS_TRIES} times (its lines go to stderr: stdout is the listing).
list_objects() {{
  local try err listed
  for try in $(seq {GCS_TRIES}); do
    err="$(mktemp)"
    if listed="$(gcloud storage ls "$1" 2>"$err")" || grep -qF -- "{GCS_NO_MATCH}" "$err"; then
      rm -f "$err"
      if [[ -n "$listed" ]]; then printf '%s\\n' "$listed"; fi
      return 0
    fi
    log "gcloud storage ls $1 failed (try $try of {GCS_TRIES}): $(tail -n 1 "$err")" >&2
    rm -f "$err"
    sleep "$((${{{RETRY_ENV}:-{RETRY_SECONDS}}} * try))"
  done
  return 2
}}
# 0: the object exists, 1: it does not, 2: gcloud failed otherwise, {GCS_TRIES} times.
object_exists() {{
  local listed
  listed="$(list_objects "$1")" || return 2
  [[ -n "$listed" ]]
}}
step_done() {{
  local found=0
  object_exists "$1" || found=$?
  if [[ $found -eq 2 ]]; then log "cannot tell whether $1 exists: stopping rather than rerun a finished step"; exit 1; fi
  return "$found"
}}
mark_done() {{ date -u +%FT%TZ | put "$1"; }}
# The attempt record: this boot's attempt, the phase it is in (what `tpu-rl status` shows), the install's
# bounded command (COMMAND_FIELDS, jobs/vm_install.py bounded) and, at the end, how the attempt ended.
COMMAND_FIELDS=""
record_attempt() {{
  printf 'attempt=%s phase=%s at=%s%s%s\\n' "$ATTEMPT" "$PHASE" "$(date -u +%FT%TZ)" "$COMMAND_FIELDS" \\
    "${{1:+ ended=$1}}" | put "$ATTEMPT_RECORD"
}}
begin_phase() {{
  PHASE="$1" COMMAND_FIELDS=""
  PHASE_START="$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)"
  record_attempt
}}
# A step's whole log goes to the bucket when it ends: the console keeps only its last 1 MB.
put_step_log() {{ flush_log; phase_log | put "$1"; }}

# --- cancel: `tpu-rl cancel` writes this marker; delete it and reboot the VM to go on
readonly CANCEL_MARKER={q(paths.cancel_marker)}
ENDED=""
stop_if_cancelled() {{
  if step_done "$CANCEL_MARKER"; then
    log "{CANCELLED}: marker $CANCEL_MARKER exists; delete it and reboot the VM to go on"
    ENDED={CANCELLED}
    exit 0
  fi
}}
# Polls the marker while the steps run; stops MaxText when it appears. Each round first rewrites the
# heartbeat. It ends with this script (checked each round, and killed by on_exit), its sleep with it, so
# nothing keeps the console pipe open.
# The script lives: its process exists and is not a zombie (a script killed at once, SIGKILL, stays one until
# the guest agent reaps it, which may wait for the output this watcher holds open). The state is the field
# after the parenthesised name in /proc/PID/stat (proc(5): Z zombie, X dead).
script_alive() {{
  local state
  state="$(sed -E 's/.*\\) (.).*/\\1/' "/proc/$$/stat" 2>/dev/null)" && [[ -n "$state" && "$state" != [ZX] ]]
}}
# A nap the TERM trap can cut short (a foreground command would delay the trap until it ended).
nap() {{ "$@" >/dev/null 2>&1 & NAP=$!; wait "$NAP" || true; }}
beat() {{
  printf 'attempt=%s at=%s log=%s\\n' "$ATTEMPT" "$(date -u +%FT%TZ)" "$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)" \\
    | timeout -k 5 {HEARTBEAT_UPLOAD_SECONDS} gcloud storage cp - "$HEARTBEAT"
}}
watch_heartbeat() {{
  NAP=""
  trap 'kill "$NAP" 2>/dev/null; exit 0' TERM
  while script_alive; do
    nap beat
    nap sleep "${{{CANCEL_POLL_ENV}:-{HEARTBEAT_SECONDS}}}"
  done
}}
watch_cancel() {{
  NAP=""
  trap 'kill "$NAP" 2>/dev/null; exit 0' TERM
  while script_alive; do
    nap sleep "${{{CANCEL_POLL_ENV}:-{CANCEL_POLL_SECONDS}}}"
    if object_exists "$CANCEL_MARKER"; then
      log "{CANCELLED}: marker $CANCEL_MARKER exists; stopping the running step (SIGTERM to MaxText)"
      pkill -TERM -P "$$" -f '{MAXTEXT_PROCESS}' || true
      return 0
    fi
  done
}}
{stop_helpers(settings, paths)}
# A step stopped by the watcher fails; with the marker there, that is the cancel, not a crash: exit 0.
# Any other failure, of any phase, leaves the failure record `tpu-rl run` reads (and the step's log).
CANCEL_WATCHER="" HEARTBEAT_WATCHER="" GCLOUD_READY=""
on_exit() {{
  local code=$?
  if [[ -z "$GCLOUD_READY" ]]; then power_after "$code"; exit "$code"; fi  # no bucket without gcloud (wait_for_gcloud said so)
  kill "$CANCEL_WATCHER" "$HEARTBEAT_WATCHER" 2>/dev/null || true
  wait "$CANCEL_WATCHER" "$HEARTBEAT_WATCHER" 2>/dev/null || true
  if [[ $code -ne 0 ]] && object_exists "$CANCEL_MARKER"; then
    log "$PHASE: {CANCELLED} (marker $CANCEL_MARKER); its outputs so far are kept"
    ENDED={CANCELLED} code=0
  fi
  # The failure record (and the step's log) before the end record: a `run` that reads the end first would
  # report a bare "attempt ended (exit-N)", without the phase and the log's last lines.
  if [[ $code -ne 0 ]]; then
    log "$PHASE: {FAILED} (exit $code)"
    flush_log
    {{ printf 'attempt=%s phase=%s exit=%s at=%s\\n' "$ATTEMPT" "$PHASE" "$code" "$(date -u +%FT%TZ)"
      phase_log | tail -n {FAILURE_TAIL_LINES}; }} | put "$FAILURE_RECORD" || log "could not write $FAILURE_RECORD"
    case "$PHASE" in
{step_logs}
    esac
  fi
  # How this attempt ended, in its attempt record: `tpu-rl run` then waits for a new attempt, not on this one.
  record_attempt "${{ENDED:-exit-$code}}" || true
  power_after "$code"
  exit "$code"
}}
# The trap first, so whatever fails below leaves its record; then gcloud, which every record needs.
trap on_exit EXIT
log "attempt $ATTEMPT: {BOOT}"
wait_for_gcloud || exit 1
GCLOUD_READY=1
begin_after_run
# Before anything else in the bucket this boot is the attempt, and the last attempt's failure record is
# superseded: a `tpu-rl run` that reads the bucket before this boot's first console line must not stop with it.
begin_phase "{BOOT}"
printf 'superseded_by=%s at=%s\\n' "$ATTEMPT" "$(date -u +%FT%TZ)" | put "$FAILURE_RECORD"
watch_cancel &
CANCEL_WATCHER=$!
watch_heartbeat &
HEARTBEAT_WATCHER=$!
readonly CANCEL_WATCHER HEARTBEAT_WATCHER"""


def _step(step: str, body: str, marker: str, log_url: str) -> str:
    # The body is not indented: the patch heredocs need their terminator at column 0.
    q = shlex.quote
    # The checks before a step are a phase of their own: a failed check is not blamed on the step before.
    return f"""# --- step {step}
begin_phase "{CHECKING}-{step}"
if step_done {q(marker)}; then
  log "{step}: already done (marker {marker}), skipping"
else
  stop_if_cancelled
  begin_phase {step}
  RAN=1
  log "{step}: {STARTING}"
{body}
  log "{step}: {DONE}"
  # The marker first: a log that cannot be uploaded does not make a finished step a failed one.
  mark_done {q(marker)}
  put_step_log {q(log_url)} || log "{step}: warning: its log did not reach {log_url} (the step is done)"
fi"""


EXPORT_STEP_VAR = "EXPORT_STEP"


def _export_body(recipe: Recipe, paths: ArtifactPaths, export: MaxTextCommand) -> str:
    """Export the newest training step with orbax's commit marker, found at run time (the script is
    rendered at deploy time, before training ran): train_rl may stop below the computed step
    (scripts/cloud/gcs.py TrainedCheckpoint has the evidence), and `tpu-rl run` verifies the same step."""
    actor = paths.actor_checkpoints
    params = f"{actor}${{{EXPORT_STEP_VAR}}}/model_params/"
    return f"""# the newest finished checkpoint (newest_checkpoint): train_rl saves the step it reached, at most {recipe.last_step}
# (a listing that fails {GCS_TRIES} times is not "no checkpoint": the export stops and says so)
{EXPORT_STEP_VAR}="$(newest_checkpoint)" || {{
  log "export: cannot list the checkpoints under {actor} (gcloud failed {GCS_TRIES} times, above): reboot the VM to retry"; exit 1; }}
if [[ -z "${EXPORT_STEP_VAR}" ]]; then log "export: no checkpoint with orbax's commit marker under {actor}"; exit 1; fi
# tunix saves step 0 on close when no batch came at all: the untrained model, not worth exporting
if [[ "${EXPORT_STEP_VAR}" == 0 ]]; then log "export: only step 0 under {actor}: no batch reached training"; exit 1; fi
log "export: checkpoint step ${{{EXPORT_STEP_VAR}}} (computed: at most {recipe.last_step})"
{export.shell(expand={"load_parameters_path": params})}"""


def render_startup_script(spec: RunSpec, settings: Settings) -> str:
    recipe = spec.recipe
    if recipe.platform_rules.jobsets:
        raise UserError(
            f"recipe '{recipe.name}' runs on GKE; render its JobSets with render_manifests (`tpu-rl render` does)"
        )
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
    bodies = {
        "convert": commands["convert"].shell(),
        "train": "\n\n".join(train_steps),
        "export": _export_body(recipe, paths, commands["export"]),
    }
    parts = [
        _header(recipe, settings, paths),
        install_phase(recipe),
        "# --- TPU runtime environment of a single-host slice (seed 002)\n"
        + _exports({**tpu_env(recipe), **resolved.env})
        + '\nTPU_NAME="$(hostname)"\nexport TPU_NAME',
        token_phase(settings),
        *(_step(step, bodies[step], paths.progress_marker(step), paths.step_log(step)) for step in STEPS),
        after_run_phase(recipe, settings, paths),
    ]
    return "\n\n".join(parts) + "\n"
