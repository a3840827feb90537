# shellcheck shell=bash
# The startup script's log and its records in the bucket; the run's values are the readonly variables above.

# A log on disk, and the output to the guest agent, which copies it to the console. -p: a reader gone (at a line
# over bufio.Scanner's 64 KiB) kills neither tee nor this script (GNU coreutils tee, --output-error=warn-nopipe).
exec > >(tee -p -a "$LOG_FILE") 2>&1
export HOME=/root
# Root's standard PATH: dpkg refuses to run when ldconfig or start-stop-daemon (in /usr/sbin, /sbin) is not on
# it (guillemj/dpkg 1.21.1 src/help.c checkpath).
export PATH="$SCRIPT_PATH"

# One attempt per boot: the records below name it, so an earlier boot's failure does not end this one.
ATTEMPT="$(date -u +%Y%m%dT%H%M%SZ)-$$"
readonly ATTEMPT
PHASE="$BOOT"
PHASE_START=0
LAST_LINE=""
log() { LAST_LINE="$LOG_TAG $(date -u +%FT%TZ) $RUN $*"; echo "$LAST_LINE"; }
# gcloud may be a snap that snapd still mounts (first boot): wait for snapd's seeding, then for gcloud on
# PATH (an executable: -x), at most GCLOUD_WAIT_SECONDS in all. Without gcloud no record can reach the bucket.
gcloud_on_path() { local found; found="$(command -v gcloud)" && [[ -x "$found" ]]; }
wait_for_gcloud() {
  local start
  start="$(uptime_s)"
  gcloud_on_path && return 0
  log "$BOOT: gcloud is not on PATH yet: waiting for snapd's seeding (snap wait system seed.loaded) and gcloud, at most $GCLOUD_WAIT_SECONDS s"
  if command -v snap >/dev/null 2>&1; then timeout -k 5 "$GCLOUD_WAIT_SECONDS" snap wait system seed.loaded || true; fi
  until gcloud_on_path; do
    if (($(uptime_s) - start >= GCLOUD_WAIT_SECONDS)); then
      log "$BOOT: gcloud is not on PATH after $GCLOUD_WAIT_SECONDS s: no record of this attempt can reach the bucket without it; reboot the VM to retry, or see docs/troubleshooting.md"
      return 1
    fi
    sleep 1
  done
}
# tee writes the log file a moment after the console: wait (at most 5 s) until the last line is there.
flush_log() {
  for _ in $(seq 50); do
    if tail -n 5 "$LOG_FILE" 2>/dev/null | grep -qF -- "$LAST_LINE"; then return 0; fi
    sleep 0.1
  done
}
phase_log() { tail -c +"$((PHASE_START + 1))" "$LOG_FILE"; }
# An upload is retried like a check: a transient error must not fail a phase that did its work.
put() {
  local try err body
  body="$(mktemp)"
  cat > "$body"
  for try in $(seq "$GCS_TRIES"); do
    if err="$(gcloud storage cp - "$1" < "$body" 2>&1 >/dev/null)"; then rm -f "$body"; return 0; fi
    log "gcloud storage cp $1 failed (try $try of $GCS_TRIES): ${err##*$'\n'}"
    sleep "$((GCS_RETRY_SECONDS * try))"
  done
  rm -f "$body"
  return 1
}
# The URLs matching $1 (a wildcard, or one object), one a line; none when nothing matches (GCS_NO_MATCH).
# Exit 2 when gcloud failed otherwise, GCS_TRIES times (its lines go to stderr: stdout is the listing).
list_objects() {
  local try err listed
  for try in $(seq "$GCS_TRIES"); do
    err="$(mktemp)"
    if listed="$(gcloud storage ls "$1" 2>"$err")" || grep -qF -- "$GCS_NO_MATCH" "$err"; then
      rm -f "$err"
      if [[ -n "$listed" ]]; then printf '%s\n' "$listed"; fi
      return 0
    fi
    log "gcloud storage ls $1 failed (try $try of $GCS_TRIES): $(tail -n 1 "$err")" >&2
    rm -f "$err"
    sleep "$((GCS_RETRY_SECONDS * try))"
  done
  return 2
}
# 0: the object exists, 1: it does not, 2: gcloud failed otherwise, GCS_TRIES times.
object_exists() {
  local listed
  listed="$(list_objects "$1")" || return 2
  [[ -n "$listed" ]]
}
step_done() {
  local found=0
  object_exists "$1" || found=$?
  if [[ $found -eq 2 ]]; then log "cannot tell whether $1 exists: stopping rather than rerun a finished step"; exit 1; fi
  return "$found"
}
mark_done() { date -u +%FT%TZ | put "$1"; }
# The attempt record: this boot's attempt, the phase it is in (what `tpu-rl status` shows), the install's
# bounded command (COMMAND_FIELDS, bounded in bounded.sh) and, at the end, how the attempt ended.
COMMAND_FIELDS=""
record_attempt() {
  printf 'attempt=%s phase=%s at=%s%s%s\n' "$ATTEMPT" "$PHASE" "$(date -u +%FT%TZ)" "$COMMAND_FIELDS" \
    "${1:+ ended=$1}" | put "$ATTEMPT_RECORD"
}
begin_phase() {
  PHASE="$1" COMMAND_FIELDS=""
  PHASE_START="$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)"
  record_attempt
}
# A step's whole log goes to the bucket when it ends: the console keeps only its last 1 MB.
put_step_log() { flush_log; phase_log | put "$1"; }
