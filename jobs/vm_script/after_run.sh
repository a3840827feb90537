# shellcheck shell=bash
# --- the run is done: verify every output in the bucket, then stop the VM (AFTER_RUN)
begin_phase "$DONE_PHASE"
log "all steps done; the Hugging Face model is in $HF_EXPORT"
# need URL...: each URL that does not exist (a trailing * matches any object under it) goes to MISSING.
MISSING=()
need() { local url; for url in "$@"; do step_done "$url" || MISSING+=("$url"); done; }
verify_outputs() {
  local step index
  need "${CONVERT_OUTPUTS[@]}"
  step="$(newest_checkpoint)" || { log "$VERIFYING: cannot list the checkpoints (gcloud failed, above)"; exit 1; }
  if [[ -z "$step" ]]; then MISSING+=("$ACTOR_CHECKPOINTS<step>/$ORBAX_COMMIT_MARKER"); else need "$ACTOR_CHECKPOINTS$step/model_params/*"; fi
  need "${HF_NAMED_FILES[@]}"
  if step_done "$HF_EXPORT$HF_WEIGHTS_INDEX"; then
    index="$(gcloud storage cat "$HF_EXPORT$HF_WEIGHTS_INDEX")" || { log "$VERIFYING: cannot read $HF_EXPORT$HF_WEIGHTS_INDEX"; exit 1; }
    for shard in $(printf '%s' "$index" | grep -oE '"[^"]+\.safetensors"' | tr -d '"' | sort -u); do need "$HF_EXPORT$shard"; done
  else
    need "$HF_EXPORT$HF_SINGLE_WEIGHTS"
  fi
  if [[ ${#MISSING[@]} -gt 0 ]]; then
    log "$VERIFYING: not in the bucket: ${MISSING[*]}: the VM does not stop itself"
    exit 1
  fi
}
if [[ "$AFTER_RUN" != "$VM_STOPS" ]]; then
  log "the VM stays up ($AFTER_RUN_ENV=$VM_STAYS): it bills at the $ACCELERATOR_TYPE rate until \`$DESTROY_COMMAND\`"
elif [[ -z "$RAN" ]] && stopped_here; then
  log "run $RUN was done and this VM stopped itself before; this rerun ran nothing"
  POWER_OFF_LATER="ran nothing"
else
  begin_phase "$VERIFYING"
  verify_outputs
  printf 'attempt=%s at=%s instance=%s\n' "$ATTEMPT" "$(date -u +%FT%TZ)" "${INSTANCE_ID:-$UNKNOWN_INSTANCE}" | put "$STOP_RECORD"
  log "$STOPPED: every output of run $RUN is verified in the bucket: the VM powers itself off (${STOP_COMMAND[*]}) and bills only its boot disk from now; a new run: change the recipe, then \`$DEPLOY_COMMAND\` (it replaces the VM)"
  PHASE="$DONE_PHASE" ENDED="$STOPPED" POWER_OFF=1
fi
