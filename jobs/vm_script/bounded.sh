# shellcheck shell=bash
# The clock and the bounds of every command that waits on the network (jobs/vm_install.py says why each bound).
# The clock of every bound: /proc/uptime's, monotonic since boot (bash's SECONDS follows the wall clock, which
# NTP may step).
uptime_s() { local up _; read -r up _ < /proc/uptime; echo "${up%.*}"; }
# A command under `timeout` that hit its bound: exit 124 (or 137 after the KILL) and the bound elapsed
# (coreutils timeout(1); a command killed otherwise, the OOM killer, has not used its bound up), by uptime_s.
timed_out() { [[ ( $1 -eq 124 || $1 -eq 137 ) && $(($(uptime_s) - $2)) -ge $3 ]]; }
# bounded NAME SECONDS COMMAND...: the attempt record names the command and its bound (what `tpu-rl run`
# shows), then COMMAND runs under `timeout`; on its bound the last line names both.
bounded() {
  local name="$1" seconds="$2" start code=0
  shift 2
  COMMAND_FIELDS=" command=$name bound=$seconds"
  # Best effort: the record only tells `tpu-rl run` which command runs; an upload that failed its tries
  # (logged by put) must not fail an install that can go on.
  record_attempt || true
  log "$PHASE: $name (at most $seconds s)"
  start="$(uptime_s)"
  timeout -k "$KILL_AFTER_SECONDS" "$seconds" "$@" || code=$?
  if timed_out "$code" "$start" "$seconds"; then
    log "$PHASE: $name did not finish within its bound of $seconds s (timeout, exit $code): reboot the VM to retry"
  fi
  return "$code"
}
# lock_retry TEXT COMMAND...: COMMAND, run again every LOCK_RETRY_SECONDS while it fails with TEXT in its
# output (another process holds a lock it does not wait for), until LOCK_WAIT_SECONDS have passed.
lock_retry() {
  local text="$1" start out code
  shift
  start="$(uptime_s)"
  out="$(mktemp)"
  while :; do
    "$@" 2>&1 | tee "$out"
    code="${PIPESTATUS[0]}"
    if [[ $code -eq 0 ]] || ! grep -qF -- "$text" "$out" || (($(uptime_s) - start >= LOCK_WAIT_SECONDS)); then
      rm -f "$out"
      return "$code"
    fi
    echo "$1: another process holds the lock (exit $code); trying again in $LOCK_RETRY_SECONDS s, for at most $LOCK_WAIT_SECONDS s in all"
    sleep "$LOCK_RETRY_SECONDS"
  done
}
# `bounded` runs lock_retry through bash -c, so one bound covers every try: the child needs it and its values.
export -f uptime_s lock_retry
export LOCK_WAIT_SECONDS LOCK_RETRY_SECONDS
