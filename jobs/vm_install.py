"""The startup script's phases before the steps (jobs/vm.py): the install of MaxText (once per boot disk) and
the Hugging Face token, read from Secret Manager into the script's environment only."""

from __future__ import annotations

import shlex

from recipes import Recipe, Settings
from recipes.conventions import HF_TOKEN_ENV

INSTALL_DIR = "/opt/tpu-rl"
# uv's installer is pinned; its version only matters for the install, not for what gets installed.
UV_VERSION = "0.13.9"
SYSTEM_PACKAGES = ("build-essential", "cmake", "ninja-build")  # as seed 002
# The script's phases before the steps, in the attempt record and the failure record (paths.vm_attempt,
# paths.vm_failure): a phase that fails there leaves the same record as a step that fails.
INSTALL, TOKEN = "install", "token"
RETRY_SECONDS = 10
RETRY_ENV = "TPU_RL_GCS_RETRY_SECONDS"
# apt waits this long for the dpkg lock instead of failing at once (apt-get(8) / apt.conf(5):
# DPkg::Lock::Timeout, seconds), and `apt-get update` is tried this many times.
APT_LOCK = "-o DPkg::Lock::Timeout=600"
APT_TRIES = 3


def install_phase(recipe: Recipe) -> str:
    release = recipe.maxtext
    marker = f"{INSTALL_DIR}/.installed-{recipe.maxtext_version}"
    # Two blocks around the activation, so the MaxText install runs inside the venv as in seed 002;
    # the marker is written last, so an interrupted install is redone at the next boot. Seed 002's
    # `apt upgrade -y --fix-missing` is left out (jobs/seed_differences.py).
    return f"""# --- install (once per boot disk): uv, Python {release.python}, {release.pip} (seed 002)
begin_phase {INSTALL}
# The image's own apt jobs (unattended-upgrades) may hold the lock at first boot: wait for it, and retry
# a failed update (its mirrors) a few times.
apt_update() {{
  local try code=0
  for try in $(seq {APT_TRIES}); do
    if apt-get {APT_LOCK} update -q; then return 0; else code=$?; fi
    [[ $try -lt {APT_TRIES} ]] || break
    log "{INSTALL}: apt-get update failed (exit $code, try $try of {APT_TRIES}), retrying"
    sleep "$((${{{RETRY_ENV}:-{RETRY_SECONDS}}} * try))"
  done
  return "$code"
}}
if [[ ! -f {marker} ]]; then
  log "installing {release.pip}"
  export DEBIAN_FRONTEND=noninteractive
  apt_update
  apt-get {APT_LOCK} install -y -q {' '.join(SYSTEM_PACKAGES)}
  curl -LsSf https://astral.sh/uv/{UV_VERSION}/install.sh | sh
  mkdir -p {INSTALL_DIR}
  uv python install {release.python}
  [[ -x "$VENV/bin/python" ]] || uv venv --python {release.python} --seed "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
if [[ ! -f {marker} ]]; then
  # The extra pins torch==2.11.0+cpu, which only uv resolves (PyTorch CPU index); lowest = the tested set.
  UV_TORCH_BACKEND=cpu uv pip install {shlex.quote(release.pip)} --resolution=lowest
  install_tpu_post_train_extra_deps
  touch {marker}
fi"""


def token_phase(settings: Settings) -> str:
    q = shlex.quote
    fix = f"add a version with \\`tpu-rl secret set\\` (secret {settings.hf_token_secret})"
    return f"""# --- the Hugging Face token: from Secret Manager into this process's environment only
begin_phase {TOKEN}
set +x
if ! {HF_TOKEN_ENV}="$(gcloud secrets versions access latest --secret={q(settings.hf_token_secret)} --project={q(settings.project)})"; then
  log "{TOKEN}: cannot read the latest version of secret {settings.hf_token_secret}: {fix}, or grant the VM's service account roles/secretmanager.secretAccessor"
  exit 1
fi
export {HF_TOKEN_ENV}
if [[ -z "${{{HF_TOKEN_ENV}}}" ]]; then log "{TOKEN}: secret {settings.hf_token_secret} is empty: {fix}"; exit 1; fi"""
