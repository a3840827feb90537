# shellcheck shell=bash
# --- cancel: `tpu-rl cancel` writes CANCEL_MARKER; delete it and reboot the VM to go on
ENDED=""
stop_if_cancelled() {
  if step_done "$CANCEL_MARKER"; then
    log "$CANCELLED: marker $CANCEL_MARKER exists; delete it and reboot the VM to go on"
    ENDED="$CANCELLED"
    exit 0
  fi
}
# The watchers below end with this script (checked each round, and killed by on_exit), their sleep with them,
# so nothing keeps the console pipe open.
# The script lives: not a zombie, as a script SIGKILLed stays until the guest agent reaps it, maybe waiting on
# a watcher's output. proc(5): the state follows the parenthesised name in /proc/PID/stat (Z zombie, X dead).
script_alive() {
  local state
  state="$(sed -E 's/.*\) (.).*/\1/' "/proc/$$/stat" 2>/dev/null)" && [[ -n "$state" && "$state" != [ZX] ]]
}
# A nap the TERM trap can cut short (a foreground command would delay the trap until it ended).
nap() { "$@" >/dev/null 2>&1 & NAP=$!; wait "$NAP" || true; }
beat() {
  printf 'attempt=%s at=%s log=%s\n' "$ATTEMPT" "$(date -u +%FT%TZ)" "$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)" \
    | timeout -k 5 "$HEARTBEAT_UPLOAD_SECONDS" gcloud storage cp - "$HEARTBEAT"
}
# Rewrites the heartbeat record each round: a killed script shows as a heartbeat that stopped.
watch_heartbeat() {
  NAP=""
  trap 'kill "$NAP" 2>/dev/null; exit 0' TERM
  while script_alive; do
    nap beat
    nap sleep "$HEARTBEAT_SECONDS"
  done
}
# Polls the marker while the steps run; stops MaxText when it appears.
watch_cancel() {
  NAP=""
  trap 'kill "$NAP" 2>/dev/null; exit 0' TERM
  while script_alive; do
    nap sleep "$CANCEL_POLL_SECONDS"
    if object_exists "$CANCEL_MARKER"; then
      log "$CANCELLED: marker $CANCEL_MARKER exists; stopping the running step (SIGTERM to MaxText)"
      pkill -TERM -P "$$" -f "$MAXTEXT_PROCESS" || true
      return 0
    fi
  done
}
