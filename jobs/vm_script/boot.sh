# shellcheck shell=bash
# A step stopped by the watcher fails; with the marker there, that is the cancel, not a crash: exit 0.
# Any other failure, of any phase, leaves the failure record `tpu-rl run` reads (and the step's log).
CANCEL_WATCHER="" HEARTBEAT_WATCHER="" GCLOUD_READY=""
on_exit() {
  local code=$?
  if [[ -z "$GCLOUD_READY" ]]; then power_after "$code"; exit "$code"; fi  # no bucket without gcloud (wait_for_gcloud said so)
  kill "$CANCEL_WATCHER" "$HEARTBEAT_WATCHER" 2>/dev/null || true
  wait "$CANCEL_WATCHER" "$HEARTBEAT_WATCHER" 2>/dev/null || true
  if [[ $code -ne 0 ]] && object_exists "$CANCEL_MARKER"; then
    log "$PHASE: $CANCELLED (marker $CANCEL_MARKER); its outputs so far are kept"
    ENDED="$CANCELLED" code=0
  fi
  # The failure record (and the step's log) before the end record: a `run` that reads the end first would
  # report a bare "attempt ended (exit-N)", without the phase and the log's last lines.
  if [[ $code -ne 0 ]]; then
    log "$PHASE: $FAILED (exit $code)"
    flush_log
    { printf 'attempt=%s phase=%s exit=%s at=%s\n' "$ATTEMPT" "$PHASE" "$code" "$(date -u +%FT%TZ)"
      phase_log | tail -n "$FAILURE_TAIL_LINES"; } | put "$FAILURE_RECORD" || log "could not write $FAILURE_RECORD"
    if [[ -n "${STEP_LOGS[$PHASE]:-}" ]]; then put_step_log "${STEP_LOGS[$PHASE]}" || true; fi
  fi
  # How this attempt ended, in its attempt record: `tpu-rl run` then waits for a new attempt, not on this one.
  record_attempt "${ENDED:-exit-$code}" || true
  power_after "$code"
  exit "$code"
}
# The trap first, so whatever fails below leaves its record; then gcloud, which every record needs.
trap on_exit EXIT
log "attempt $ATTEMPT: $BOOT"
wait_for_gcloud || exit 1
GCLOUD_READY=1
begin_after_run
# Before anything else in the bucket this boot is the attempt, and the last attempt's failure record is
# superseded: a `tpu-rl run` that reads the bucket before this boot's first console line must not stop with it.
begin_phase "$BOOT"
printf 'superseded_by=%s at=%s\n' "$ATTEMPT" "$(date -u +%FT%TZ)" | put "$FAILURE_RECORD"
watch_cancel &
CANCEL_WATCHER=$!
watch_heartbeat &
HEARTBEAT_WATCHER=$!
readonly CANCEL_WATCHER HEARTBEAT_WATCHER
