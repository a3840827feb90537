"""The startup script's phases before the steps (jobs/vm.py): the install of MaxText (once per boot disk) and
the Hugging Face token, read from Secret Manager into the script's environment only. Their bash is
jobs/vm_script/bounded.sh, install.sh and token.sh; this module holds the values and the bounds they read.

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

from dataclasses import dataclass
from datetime import timedelta

from tpu_rl.jobs.vm_preamble import Knob, Value
from tpu_rl.recipes import Recipe, Settings
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES

INSTALL_DIR = "/opt/tpu-rl"
# uv's installer is pinned; its version only matters for the install, not for what gets installed.
UV_VERSION = "0.13.9"
SYSTEM_PACKAGES = ("build-essential", "cmake", "ninja-build")  # as seed 002
# The script's phases before the steps, in the attempt record and the failure record (paths.vm_attempt,
# paths.vm_failure): a phase that fails there leaves the same record as a step that fails.
INSTALL, TOKEN = "install", "token"
# apt-get install waits this long for the dpkg lock (Debian/apt 2.4.13 debSystem::Lock, DPkg::Lock::Timeout);
# `apt-get update` and dpkg never wait, so they are retried for as long (VM_SCRIPT_RETRIES.lock, lock_retry;
# docs/provenance.md#apt-and-dpkg-locks).
APT_LOCK_SECONDS = VM_SCRIPT_RETRIES.lock.within.seconds
# What each prints when another process holds the lock (the sources above).
APT_LOCKED, DPKG_LOCKED = "Could not get lock", "was locked by another process"
APT_UPDATE = VM_SCRIPT_RETRIES.apt_update


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
    + (APT_UPDATE.tries - 1) * (INSTALL_BOUNDS["apt-get-update"].seconds + KILL_AFTER_SECONDS)
    + APT_UPDATE.pause.seconds * sum(range(1, APT_UPDATE.tries)))



def bounds_table() -> str:
    """docs/pipeline.md's table of the bounds (tests/test_jobs_vm_script.py checks the page holds it)."""
    rows = [f"| `{name}`{f' (each of {APT_UPDATE.tries} tries)' if name == 'apt-get-update' else ''} | "
            f"{timedelta(seconds=bound.seconds)} | {bound.why} |" for name, bound in INSTALL_BOUNDS.items()]
    return "\n".join(["| command | bound | what it waits for |", "| --- | --- | --- |", *rows])


def install_values(recipe: Recipe) -> dict[str, Value]:
    """The values bounded.sh and install.sh read."""
    release = recipe.maxtext
    return {
        "INSTALL": INSTALL, "INSTALL_DIR": INSTALL_DIR, "VENV": f"{INSTALL_DIR}/venv",
        # written last, so an interrupted install is redone at the next boot
        "INSTALL_MARKER": f"{INSTALL_DIR}/.installed-{recipe.maxtext_version}",
        "MAXTEXT_PIP": release.pip, "PYTHON_VERSION": release.python,
        "UV_INSTALLER_URL": f"https://astral.sh/uv/{UV_VERSION}/install.sh", "SYSTEM_PACKAGES": SYSTEM_PACKAGES,
        "APT_TRIES": APT_UPDATE.tries, "APT_LOCK_SECONDS": APT_LOCK_SECONDS, "APT_LOCKED": APT_LOCKED,
        "DPKG_LOCKED": DPKG_LOCKED, "LOCK_WAIT_SECONDS": Knob.of(VM_SCRIPT_RETRIES.lock.within),
        "LOCK_RETRY_SECONDS": Knob.of(VM_SCRIPT_RETRIES.lock.pause),
        "KILL_AFTER_SECONDS": Knob(KILL_AFTER_ENV, KILL_AFTER_SECONDS),
        "INSTALL_BOUNDS": {name: Knob(INSTALL_TIMEOUT_ENV, bound.seconds) for name, bound in INSTALL_BOUNDS.items()},
    }


def token_values(settings: Settings) -> dict[str, Value]:
    """The values token.sh reads."""
    return {
        "TOKEN": TOKEN, "TOKEN_BOUND": Knob(INSTALL_TIMEOUT_ENV, TOKEN_BOUND.seconds),
        "HF_TOKEN_SECRET": settings.hf_token_secret, "PROJECT": settings.project,
    }
