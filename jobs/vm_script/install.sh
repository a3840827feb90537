# shellcheck shell=bash
# --- install (once per boot disk): uv, Python, MaxText (seed 002); the marker is written last
begin_phase "$INSTALL"
# The image's own apt jobs (apt-daily, unattended-upgrades) may hold the locks at first boot: wait for them
# (lock_retry), and retry a failed update (its mirrors) a few times; each try has its bound.
apt_update() {
  local try code=0
  for try in $(seq "$APT_TRIES"); do
    if bounded apt-get-update "${INSTALL_BOUNDS[apt-get-update]}" bash -c 'lock_retry "$@"' lock_retry "$APT_LOCKED" apt-get update -q; then return 0; else code=$?; fi
    [[ $try -lt $APT_TRIES ]] || break
    log "$INSTALL: apt-get update failed (exit $code, try $try of $APT_TRIES), retrying"
    sleep "$((GCS_RETRY_SECONDS * try))"
  done
  return "$code"
}
if [[ ! -f "$INSTALL_MARKER" ]]; then
  log "installing $MAXTEXT_PIP"
  export DEBIAN_FRONTEND=noninteractive
  apt_update
  # An apt-get killed mid-dpkg (a bound, a reboot) left dpkg interrupted: finish that first. `dpkg --audit` reads
  # without the lock and prints only packages in a bad state (guillemj/dpkg 1.21.1 src/enquiry.c audit).
  if [[ -n "$(dpkg --audit || echo "dpkg --audit failed")" ]]; then
    bounded dpkg-configure "${INSTALL_BOUNDS[dpkg-configure]}" bash -c 'lock_retry "$@"' lock_retry "$DPKG_LOCKED" dpkg --force-confdef --force-confold --configure -a
  fi
  bounded apt-get-install "${INSTALL_BOUNDS[apt-get-install]}" apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_SECONDS" install -y -q "${SYSTEM_PACKAGES[@]}"
  # shellcheck disable=SC2016  # "$1" is bash -c's own: the URL after it
  bounded uv-installer "${INSTALL_BOUNDS[uv-installer]}" bash -c 'set -o pipefail; curl -LsSf "$1" | sh' uv-installer "$UV_INSTALLER_URL"
  mkdir -p "$INSTALL_DIR"
  bounded uv-python-install "${INSTALL_BOUNDS[uv-python-install]}" uv python install "$PYTHON_VERSION"
  # Made anew (--clear): a uv-venv stopped half-way may lack the pip that install_tpu_post_train_extra_deps runs
  # first, and a stopped `uv pip install` leaves half a venv. uv's cache keeps it cheap.
  bounded uv-venv "${INSTALL_BOUNDS[uv-venv]}" uv venv --clear --python "$PYTHON_VERSION" --seed "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
if [[ ! -f "$INSTALL_MARKER" ]]; then
  # The extra pins torch==2.11.0+cpu, which only uv resolves (PyTorch CPU index); lowest = the tested set.
  UV_TORCH_BACKEND=cpu bounded uv-pip-install-maxtext "${INSTALL_BOUNDS[uv-pip-install-maxtext]}" uv pip install "$MAXTEXT_PIP" --resolution=lowest
  bounded install_tpu_post_train_extra_deps "${INSTALL_BOUNDS[install_tpu_post_train_extra_deps]}" install_tpu_post_train_extra_deps
  touch "$INSTALL_MARKER"
fi
