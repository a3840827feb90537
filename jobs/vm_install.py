"""The startup script's phases before the steps (jobs/vm.py): the install of MaxText (once per boot disk) and
the Hugging Face token, read from Secret Manager into the script's environment only.

Every command of the install that waits on the network (and the token read) runs under coreutils `timeout`
with a bound of its own (INSTALL_BOUNDS): a hung download, mirror or resolver would otherwise keep the v6e-8
billed and `tpu-rl run` waiting, since the heartbeat beats on and the stall rule only looks at steps. A bound
that fires fails the phase like any failing command (exit 124, or 137 after the KILL), with a last line naming
the command and its bound; the marker is written last, so a reboot redoes the install. Each try of the
apt-get update loop has its own bound, so the commands take at most INSTALL_TOTAL_SECONDS; the record uploads
between them are bounded only by gcloud's own retries, so `run` also bounds the phase as a whole
(scripts/pipeline/vm/phase_watch.py). `run` shows which command runs and its bound (the attempt record's
`command=` and `bound=`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import timedelta

from tpu_rl.recipes import Recipe, Settings
from tpu_rl.recipes.conventions import HF_TOKEN_ENV

INSTALL_DIR = "/opt/tpu-rl"
# uv's installer is pinned; its version only matters for the install, not for what gets installed.
UV_VERSION = "0.13.9"
SYSTEM_PACKAGES = ("build-essential", "cmake", "ninja-build")  # as seed 002
# The script's phases before the steps, in the attempt record and the failure record (paths.vm_attempt,
# paths.vm_failure): a phase that fails there leaves the same record as a step that fails.
INSTALL, TOKEN = "install", "token"
RETRY_SECONDS = 10
RETRY_ENV = "TPU_RL_GCS_RETRY_SECONDS"
# apt-get install waits this long for the dpkg lock (Debian/apt 2.4.13 debSystem::Lock, DPkg::Lock::Timeout);
# `apt-get update` and dpkg never wait, so they are retried every LOCK_RETRY_SECONDS for as long
# (lock_retry; docs/provenance.md#apt-and-dpkg-locks).
APT_LOCK_SECONDS = 600
APT_LOCK = f"-o DPkg::Lock::Timeout={APT_LOCK_SECONDS}"
LOCK_RETRY_SECONDS = 10
# Knobs for tests (the guest agent sets neither): the lock wait and the pause between its tries, in seconds.
LOCK_WAIT_ENV, LOCK_RETRY_ENV = "TPU_RL_LOCK_WAIT_SECONDS", "TPU_RL_LOCK_RETRY_SECONDS"
# What each prints when another process holds the lock (the sources above).
APT_LOCKED, DPKG_LOCKED = "Could not get lock", "was locked by another process"
APT_TRIES = 3


@dataclass(frozen=True)
class Bound:
    seconds: int
    why: str


# How long each command may take before `timeout` stops it (TERM, then KILL KILL_AFTER_SECONDS later). Seed
# 002 states no duration for its install, and none was measured here: each bound is about 2x a generous
# estimate of a healthy run (the download sizes below are estimates too, except MaxText's), so a slow mirror
# is not cut off, while a hung one ends within the hour instead of never.
INSTALL_BOUNDS = {
    "apt-get-update": Bound(APT_LOCK_SECONDS + 300, f"the lists lock wait ({APT_LOCK_SECONDS // 60} min, retried), then the package lists"),
    # A KILLed apt-get leaves dpkg interrupted, and every later `apt-get install` refuses to run until
    # `dpkg --configure -a` ran; a reboot does not clear it. It configures what was unpacked: no download. It
    # runs only when `dpkg --audit` reports a package in a bad state.
    "dpkg-configure": Bound(APT_LOCK_SECONDS + 300, f"only if `dpkg --audit` reports: the dpkg lock wait ({APT_LOCK_SECONDS // 60} min, "
                                                    "retried), then the packages an interrupted dpkg left"),
    "apt-get-install": Bound(APT_LOCK_SECONDS + 600, "the dpkg lock wait, then build-essential, cmake, ninja-build"),
    "uv-installer": Bound(300, "astral.sh's installer and the uv binary"),
    "uv-python-install": Bound(600, "one python-build-standalone archive"),
    "uv-venv": Bound(300, "a venv seeded with pip"),
    # maxtext[tpu-post-train] 0.2.3 requires jax, jaxlib, libtpu, tensorflow and torch==2.11.0+cpu (the wheel's
    # METADATA, Requires-Dist of that extra); the same set for CPU fills 5.6 GB of site-packages here
    # (.venv-maxtext-0.2.3).
    "uv-pip-install-maxtext": Bound(2400, "jax, libtpu, tensorflow, torch (CPU): GBs of wheels"),
    # At MaxText 0.2.3 (dependencies/scripts/install_post_train_extra_deps.py, the wheel's own copy) this is
    # `pip install uv`, then `uv pip install -r dependencies/extra_deps/post_train_github_deps.txt --no-deps
    # --no-build-isolation` with VLLM_TARGET_DEVICE=tpu: tunix and tpu-inference as GitHub archives and vLLM
    # from git (a clone of the vllm repository at a commit, then a source build for TPU), then the MaxText vLLM
    # adapter. It captures the output of both, so it prints nothing until it ends.
    "install_tpu_post_train_extra_deps": Bound(3600, "tunix, tpu-inference and a git clone and source build of vLLM; it prints nothing "
                                               "until it ends"),
}
TOKEN_BOUND = Bound(120, "one Secret Manager request (gcloud retries a transient error on its own)")
# The TERM's grace before `timeout` sends KILL (`timeout -k`); the environment variable is a knob for tests.
KILL_AFTER_SECONDS = 30
KILL_AFTER_ENV = "TPU_RL_KILL_AFTER_SECONDS"
# A knob for tests (the guest agent does not set it): one number of seconds replacing every bound above.
INSTALL_TIMEOUT_ENV = "TPU_RL_INSTALL_TIMEOUT_SECONDS"
# The install's worst case: every bound (apt-get update once per try, with the waits between the tries), each
# with its KILL grace. `run` shows each command's bound as it starts.
INSTALL_TOTAL_SECONDS = (
    sum(bound.seconds + KILL_AFTER_SECONDS for bound in INSTALL_BOUNDS.values())
    + (APT_TRIES - 1) * (INSTALL_BOUNDS["apt-get-update"].seconds + KILL_AFTER_SECONDS)
    + RETRY_SECONDS * sum(range(1, APT_TRIES)))


# gcloud is a snap on the TPU VM images, which snapd mounts in the background at first boot, and the startup
# unit does not wait for it (GoogleCloudPlatform/guest-agent issue 84: the new agent's unit dropped
# After=snapd.seeded.service; marin-community/marin PR 5885 waits with `snap wait system seed.loaded`). The
# script waits this long for snapd's seeding and then for gcloud on PATH before its first record; less than
# HEARTBEAT_STALE_SECONDS (jobs/vm.py), so `run` reads the script's own line before it calls the VM silent.
GCLOUD_WAIT_SECONDS = 300
GCLOUD_WAIT_ENV = "TPU_RL_GCLOUD_WAIT_SECONDS"  # a knob for tests (the guest agent does not set it)
# The clock of every bound: /proc/uptime's, monotonic since boot (bash's SECONDS follows the wall clock, which
# NTP may step).
UPTIME_S = 'uptime_s() { local up _; read -r up _ < /proc/uptime; echo "${up%.*}"; }'


def gcloud_wait(phase: str) -> str:
    """The shell function `wait_for_gcloud`: 0 once gcloud is on PATH, 1 (with the line saying so) when
    GCLOUD_WAIT_SECONDS passed without it. It needs UPTIME_S and jobs/vm.py's log."""
    bound = f"${{{GCLOUD_WAIT_ENV}:-{GCLOUD_WAIT_SECONDS}}}"
    return f"""# gcloud may be a snap that snapd still mounts (first boot): wait for snapd's seeding, then for gcloud on
# PATH (an executable: -x), at most {GCLOUD_WAIT_SECONDS} s in all. Without gcloud no record can reach the bucket.
gcloud_on_path() {{ local found; found="$(command -v gcloud)" && [[ -x "$found" ]]; }}
wait_for_gcloud() {{
  local start
  start="$(uptime_s)"
  gcloud_on_path && return 0
  log "{phase}: gcloud is not on PATH yet: waiting for snapd's seeding (snap wait system seed.loaded) and gcloud, at most {bound} s"
  if command -v snap >/dev/null 2>&1; then timeout -k 5 "{bound}" snap wait system seed.loaded || true; fi
  until gcloud_on_path; do
    if (($(uptime_s) - start >= {bound})); then
      log "{phase}: gcloud is not on PATH after {bound} s: no record of this attempt can reach the bucket without it; reboot the VM to retry, or see docs/troubleshooting.md"
      return 1
    fi
    sleep 1
  done
}}"""


def bounds_table() -> str:
    """docs/pipeline.md's table of the bounds (tests/test_jobs_vm_script.py checks the page holds it)."""
    rows = [f"| `{name}`{f' (each of {APT_TRIES} tries)' if name == 'apt-get-update' else ''} | "
            f"{timedelta(seconds=bound.seconds)} | {bound.why} |" for name, bound in INSTALL_BOUNDS.items()]
    return "\n".join(["| command | bound | what it waits for |", "| --- | --- | --- |", *rows])


def _bound(name: str) -> str:
    return f"${{{INSTALL_TIMEOUT_ENV}:-{INSTALL_BOUNDS[name].seconds}}}"


def bounded_helpers() -> str:
    """The shell functions the bounded commands use: `timed_out` and `bounded` (needs UPTIME_S, log and jobs/vm.py's
    record_attempt)."""
    return f"""# A command under `timeout` that hit its bound: exit 124 (or 137 after the KILL) and the bound elapsed
# (coreutils timeout(1); a command killed otherwise, the OOM killer, has not used its bound up), by uptime_s.
timed_out() {{ [[ ( $1 -eq 124 || $1 -eq 137 ) && $(($(uptime_s) - $2)) -ge $3 ]]; }}
# bounded NAME SECONDS COMMAND...: the attempt record names the command and its bound (what `tpu-rl run`
# shows), then COMMAND runs under `timeout`; on its bound the last line names both.
bounded() {{
  local name="$1" seconds="$2" start code=0
  shift 2
  COMMAND_FIELDS=" command=$name bound=$seconds"
  # Best effort: the record only tells `tpu-rl run` which command runs; an upload that failed its tries
  # (logged by put) must not fail an install that can go on.
  record_attempt || true
  log "$PHASE: $name (at most $seconds s)"
  start="$(uptime_s)"
  timeout -k "${{{KILL_AFTER_ENV}:-{KILL_AFTER_SECONDS}}}" "$seconds" "$@" || code=$?
  if timed_out "$code" "$start" "$seconds"; then
    log "$PHASE: $name did not finish within its bound of $seconds s (timeout, exit $code): reboot the VM to retry"
  fi
  return "$code"
}}
# lock_retry TEXT COMMAND...: COMMAND, run again every {LOCK_RETRY_SECONDS} s while it fails with TEXT in its output
# (another process holds a lock it does not wait for), until {APT_LOCK_SECONDS} s have passed since the first try.
# `bounded` runs it through bash -c, so one bound covers every try.
lock_retry() {{
  local text="$1" start out code
  shift
  start="$(uptime_s)"
  out="$(mktemp)"
  while :; do
    "$@" 2>&1 | tee "$out"
    code="${{PIPESTATUS[0]}}"
    if [[ $code -eq 0 ]] || ! grep -qF -- "$text" "$out" || (($(uptime_s) - start >= ${{{LOCK_WAIT_ENV}:-{APT_LOCK_SECONDS}}})); then
      rm -f "$out"
      return "$code"
    fi
    echo "$1: another process holds the lock (exit $code); trying again in ${{{LOCK_RETRY_ENV}:-{LOCK_RETRY_SECONDS}}} s, for at most ${{{LOCK_WAIT_ENV}:-{APT_LOCK_SECONDS}}} s in all"
    sleep "${{{LOCK_RETRY_ENV}:-{LOCK_RETRY_SECONDS}}}"
  done
}}
export -f uptime_s lock_retry"""


# bash -c's command for `bounded NAME SECONDS {LOCK_RETRY} TEXT COMMAND...` (lock_retry).
LOCK_RETRY = "bash -c 'lock_retry \"$@\"' lock_retry"


def install_phase(recipe: Recipe) -> str:
    release = recipe.maxtext
    marker = f"{INSTALL_DIR}/.installed-{recipe.maxtext_version}"
    b = _bound
    # Two blocks around the activation, so the MaxText install runs inside the venv as in seed 002;
    # the marker is written last, so an interrupted install is redone at the next boot. Seed 002's
    # `apt upgrade -y --fix-missing` is left out (tests/seed_differences.py).
    return f"""# --- install (once per boot disk): uv, Python {release.python}, {release.pip} (seed 002)
begin_phase {INSTALL}
{bounded_helpers()}
# The image's own apt jobs (apt-daily, unattended-upgrades) may hold the locks at first boot: wait for them
# (lock_retry), and retry a failed update (its mirrors) a few times; each try has its bound.
apt_update() {{
  local try code=0
  for try in $(seq {APT_TRIES}); do
    if bounded apt-get-update "{b('apt-get-update')}" {LOCK_RETRY} {shlex.quote(APT_LOCKED)} apt-get update -q; then return 0; else code=$?; fi
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
  # An apt-get killed mid-dpkg (a bound, a reboot) left dpkg interrupted: finish that first. `dpkg --audit`
  # reads the database without its lock and prints only packages in a bad state (guillemj/dpkg 1.21.1
  # src/enquiry.c audit: msdbrw_readonly, exit 0); the configure keeps changed config files as they are.
  if [[ -n "$(dpkg --audit || echo "dpkg --audit failed")" ]]; then
    bounded dpkg-configure "{b('dpkg-configure')}" {LOCK_RETRY} {shlex.quote(DPKG_LOCKED)} dpkg --force-confdef --force-confold --configure -a
  fi
  bounded apt-get-install "{b('apt-get-install')}" apt-get {APT_LOCK} install -y -q {' '.join(SYSTEM_PACKAGES)}
  bounded uv-installer "{b('uv-installer')}" bash -c 'set -o pipefail; curl -LsSf https://astral.sh/uv/{UV_VERSION}/install.sh | sh'
  mkdir -p {INSTALL_DIR}
  bounded uv-python-install "{b('uv-python-install')}" uv python install {release.python}
  # Made anew each time: uv creates the venv, then installs the seed (pip), so a venv whose uv-venv was
  # stopped has bin/python but maybe no pip, which install_tpu_post_train_extra_deps needs (its first command
  # is `python -m pip install uv`); --clear also drops a `uv pip install` stopped half-way. uv's cache keeps
  # it cheap.
  bounded uv-venv "{b('uv-venv')}" uv venv --clear --python {release.python} --seed "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
if [[ ! -f {marker} ]]; then
  # The extra pins torch==2.11.0+cpu, which only uv resolves (PyTorch CPU index); lowest = the tested set.
  UV_TORCH_BACKEND=cpu bounded uv-pip-install-maxtext "{b('uv-pip-install-maxtext')}" uv pip install {shlex.quote(release.pip)} --resolution=lowest
  bounded install_tpu_post_train_extra_deps "{b('install_tpu_post_train_extra_deps')}" install_tpu_post_train_extra_deps
  touch {marker}
fi"""


def token_phase(settings: Settings) -> str:
    q = shlex.quote
    fix = f"add a version with \\`tpu-rl secret set\\` (secret {settings.hf_token_secret})"
    bound = f"${{{INSTALL_TIMEOUT_ENV}:-{TOKEN_BOUND.seconds}}}"
    return f"""# --- the Hugging Face token: from Secret Manager into this process's environment only
begin_phase {TOKEN}
set +x
# A bounded read ({TOKEN_BOUND.why}); timed_out is the install's (a skipped install still defines it).
TOKEN_BOUND="{bound}" TOKEN_START="$(uptime_s)" TOKEN_CODE=0
{HF_TOKEN_ENV}="$(timeout -k "${{{KILL_AFTER_ENV}:-{KILL_AFTER_SECONDS}}}" "$TOKEN_BOUND" gcloud secrets versions access latest --secret={q(settings.hf_token_secret)} --project={q(settings.project)})" || TOKEN_CODE=$?
if timed_out "$TOKEN_CODE" "$TOKEN_START" "$TOKEN_BOUND"; then
  log "{TOKEN}: gcloud secrets versions access did not finish within its bound of $TOKEN_BOUND s (timeout, exit $TOKEN_CODE): reboot the VM to retry"
  exit "$TOKEN_CODE"
fi
if [[ $TOKEN_CODE -ne 0 ]]; then
  log "{TOKEN}: cannot read the latest version of secret {settings.hf_token_secret}: {fix}, or grant the VM's service account roles/secretmanager.secretAccessor"
  exit 1
fi
export {HF_TOKEN_ENV}
if [[ -z "${{{HF_TOKEN_ENV}}}" ]]; then log "{TOKEN}: secret {settings.hf_token_secret} is empty: {fix}"; exit 1; fi"""
