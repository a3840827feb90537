# shellcheck shell=bash
# run_step STEP: skip STEP when its marker (STEP_MARKERS) exists, else run its body (the function
# STEP_body, rendered below from jobs/maxtext.py), then write its marker and its log (STEP_LOGS).
run_step() {
  local step="$1"
  # The checks before a step are a phase of their own: a failed check is not blamed on the step before.
  begin_phase "$CHECKING-$step"
  if step_done "${STEP_MARKERS[$step]}"; then
    log "$step: already done (marker ${STEP_MARKERS[$step]}), skipping"
    return 0
  fi
  stop_if_cancelled
  begin_phase "$step"
  RAN=1
  log "$step: $STARTING"
  "${step}_body"
  log "$step: $DONE"
  # The marker first: a log that cannot be uploaded does not make a finished step a failed one.
  mark_done "${STEP_MARKERS[$step]}"
  put_step_log "${STEP_LOGS[$step]}" || log "$step: warning: its log did not reach ${STEP_LOGS[$step]} (the step is done)"
}
# The export's checkpoint, found at run time (the script is rendered before training ran): the newest with
# orbax's commit marker (newest_checkpoint), as `tpu-rl run` verifies; train_rl saves the step it reached.
find_export_step() {
  # A listing that fails GCS_TRIES times is not "no checkpoint": the export stops and says so.
  EXPORT_STEP="$(newest_checkpoint)" || {
    log "export: cannot list the checkpoints under $ACTOR_CHECKPOINTS (gcloud failed $GCS_TRIES times, above): reboot the VM to retry"; exit 1; }
  if [[ -z "$EXPORT_STEP" ]]; then log "export: no checkpoint with orbax's commit marker under $ACTOR_CHECKPOINTS"; exit 1; fi
  # tunix saves step 0 on close when no batch came at all: the untrained model, not worth exporting
  if [[ "$EXPORT_STEP" == 0 ]]; then log "export: only step 0 under $ACTOR_CHECKPOINTS: no batch reached training"; exit 1; fi
  log "export: checkpoint step ${EXPORT_STEP} (computed: at most $LAST_STEP)"
}
