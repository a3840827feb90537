# shellcheck shell=bash
# --- the Hugging Face token: from Secret Manager into this process's environment only
begin_phase "$TOKEN"
TOKEN_FIX="add a version with \`tpu-rl secret set\` (secret $HF_TOKEN_SECRET)"
set +x
# A bounded read (TOKEN_BOUND, jobs/vm_install.py says why); timed_out is bounded.sh's.
TOKEN_START="$(uptime_s)" TOKEN_CODE=0
HF_TOKEN="$(timeout -k "$KILL_AFTER_SECONDS" "$TOKEN_BOUND" gcloud secrets versions access latest --secret="$HF_TOKEN_SECRET" --project="$PROJECT")" || TOKEN_CODE=$?
if timed_out "$TOKEN_CODE" "$TOKEN_START" "$TOKEN_BOUND"; then
  log "$TOKEN: gcloud secrets versions access did not finish within its bound of $TOKEN_BOUND s (timeout, exit $TOKEN_CODE): reboot the VM to retry"
  exit "$TOKEN_CODE"
fi
if [[ $TOKEN_CODE -ne 0 ]]; then
  log "$TOKEN: cannot read the latest version of secret $HF_TOKEN_SECRET: $TOKEN_FIX, or grant the VM's service account roles/secretmanager.secretAccessor"
  exit 1
fi
export HF_TOKEN
if [[ -z "${HF_TOKEN}" ]]; then log "$TOKEN: secret $HF_TOKEN_SECRET is empty: $TOKEN_FIX"; exit 1; fi
