# shellcheck shell=bash
# --- after the run (AFTER_RUN): stop the VM once every output is verified (jobs/vm_outputs.py says why)
POWER_OFF="" POWER_OFF_LATER="" RAN="" INSTANCE_ID=""
# This instance's id, for the stop record; empty when the metadata server does not answer (the record then
# matches no boot, and a boot that finds the run done verifies and stops).
read_instance_id() {
  INSTANCE_ID="$(curl -fsS --max-time 10 -H 'Metadata-Flavor: Google' "$INSTANCE_ID_URL" 2>/dev/null)" || INSTANCE_ID=""
}
# Once gcloud is ready: this instance's id, and a rerun by hand (no reboot) drops the power-off an earlier
# attempt scheduled (power_after; a reboot drops it anyway): this attempt decides anew.
begin_after_run() {
  read_instance_id
  if [[ "$AFTER_RUN" == "$VM_STOPS" ]]; then shutdown -c 2>/dev/null || true; fi
}
# Whether this instance wrote the stop record (a TPU VM cannot be started again: another is a new VM).
stopped_here() {
  local record
  [[ -n "$INSTANCE_ID" ]] && step_done "$STOP_RECORD" || return 1
  record="$(gcloud storage cat "$STOP_RECORD" 2>/dev/null)" || return 1
  [[ " $record " == *" instance=$INSTANCE_ID "* ]]
}
# The newest training step with orbax's commit marker under ACTOR_CHECKPOINTS: train_rl saves the step it reached.
# Prints nothing when there is none; exit 2 when the listing failed all its tries (list_objects).
newest_checkpoint() {
  local committed
  committed="$(list_objects "${ACTOR_CHECKPOINTS}*/$ORBAX_COMMIT_MARKER")" || return 2
  printf '%s' "$committed" | sed -nE "s#.*/([0-9]+)/$ORBAX_COMMIT_MARKER\$#\\1#p" | sort -n | tail -n 1
}
# The last thing on_exit does: the stop this boot earned, or, after a failure or a cancel, a power-off
# FAILURE_STAY_MINUTES later (whoever cancelled may have walked away). After a cancel a reboot alone runs no step.
power_after() {
  [[ "$AFTER_RUN" == "$VM_STOPS" ]] || return 0
  local why="${POWER_OFF_LATER:-failed}" minutes="$FAILURE_STAY_MINUTES" resume="\`sudo reboot\` resumes the run"
  if [[ "$ENDED" == "$CANCELLED" ]]; then why="$CANCELLED" minutes="$POWER_OFF_AFTER_CANCEL_MINUTES" resume="\`gcloud storage rm $CANCEL_MARKER\` and \`sudo reboot\` resume the run"; fi
  if [[ -n "$POWER_OFF" ]]; then
    "${STOP_COMMAND[@]}" || log "${STOP_COMMAND[*]} failed: the VM stays up and bills until it is stopped or destroyed"
  elif [[ -n "$POWER_OFF_LATER" || $1 -ne 0 || "$ENDED" == "$CANCELLED" ]]; then
    log "the VM stays up $FAILURE_STAY_MINUTES min for a look, then powers itself off: \`sudo shutdown -c\` on it within $KEEP_UP_WITHIN_MINUTES min keeps it up, $resume"
    shutdown -h "+$minutes" "tpu-rl: run $RUN $why; powering off" || log "could not schedule the power-off: the VM stays up"
  fi
}
