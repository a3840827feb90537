"""The startup script's install and its dpkg repair under this machine's own bash, coreutils, dpkg and apt, with
the script's own PATH; stand-ins only for what needs the network or a TPU (gcloud, curl, uv, MaxText).

dpkg and apt work on a sandbox under tmp through their own environment variables, so the script needs no hook:
DPKG_ROOT (dpkg(1), ENVIRONMENT: the root directory when --root and --instdir are not given; the database is
then DPKG_ROOT/var/lib/dpkg) and APT_CONFIG (apt.conf(5): a configuration file read first; its `Dir` moves
every apt path, including the apt.conf.d it reads next, under the sandbox). The packages are tiny ones named as
the script's, built here with dpkg-deb, in a local file: repository, so apt-get update and install run for real.
The script runs in a mount namespace of its own (unshare(1)) where this machine's dpkg and apt state is mounted
read-only and /var/log is a directory under tmp (dpkg logs to /var/log/dpkg.log by /etc/dpkg/dpkg.cfg): a path
that escaped the sandbox fails loudly instead of changing this machine. The fixture's own dpkg runs, outside
that namespace, name the sandbox with --root and --admindir, and /var/lib/dpkg/status must be unchanged from
before the fixture to after the test.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tpu_rl import jobs
import tpu_rl.jobs.vm_install as jobs_vm_install
from tpu_rl.jobs.paths import ArtifactPaths
from peers.vm_guest import Guest, private_mounts
from tpu_rl.recipes import example_settings, get_recipe
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.pipeline.vm.state import Failure
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES as RETRIES

SETTINGS = example_settings()
RECIPE = get_recipe("llama31-v6e8")
SPEC = RunSpec.of_catalog(RECIPE)
PATHS = ArtifactPaths(SPEC, SETTINGS)
HOST_STATUS = Path("/var/lib/dpkg/status")
# Only to build the sandbox here (dpkg --unpack also checks its PATH): root's standard PATH.
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The package an interrupted `apt-get install` left unpacked but not configured.
INTERRUPTED = "cmake"


def _deb(folder: Path, name: str) -> Path:
    """A package named `name` with one file, built by dpkg-deb (no maintainer scripts)."""
    tree = folder / f"{name}-tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr" / "share" / "doc" / name).mkdir(parents=True)
    (tree / "usr" / "share" / "doc" / name / "README").write_text(f"a stand-in for {name}\n")
    (tree / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: tpu-rl "
                                             f"tests <tests@example.invalid>\nDescription: stand-in for {name}\n")
    deb = folder / f"{name}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], check=True,
                   capture_output=True)
    return deb


def _repository(folder: Path, debs: list[Path]) -> None:
    """A flat apt repository (sources.list(5) `deb [trusted=yes] file:DIR ./`): its Packages index."""
    stanzas = []
    for deb in debs:
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True,
                                 text=True).stdout.strip()
        data = deb.read_bytes()
        stanzas.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (folder / "Packages").write_text("\n".join(stanzas))


def _dpkg(root: Path, *args: str) -> subprocess.CompletedProcess:
    """This machine's dpkg on the sandbox, outside the script's read-only namespace: --root and --admindir name
    it explicitly (dpkg(1): --root sets the installation directory and, as --admindir does, the database),
    so a DPKG_ROOT that did not reach dpkg could not make it write this machine's database."""
    return subprocess.run(["dpkg", f"--root={root}", f"--admindir={root / 'var' / 'lib' / 'dpkg'}", *args],
                          capture_output=True, text=True, check=True, env={"PATH": ROOT_PATH})


def _host_status() -> str:
    return hashlib.sha256(HOST_STATUS.read_bytes()).hexdigest()


def _status(root: Path) -> dict[str, str]:
    text = (root / "var" / "lib" / "dpkg" / "status").read_text()
    stanzas = [dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
               for block in text.split("\n\n") if block.strip()]
    return {stanza["Package"]: stanza["Status"] for stanza in stanzas}


@pytest.fixture
def sandbox(tmp_path):
    """The sandbox's dpkg and apt state, with INTERRUPTED left unpacked; afterwards, this machine's dpkg status
    must be as it was before the sandbox was built (the fixture's own dpkg runs included)."""
    missing = private_mounts() or next((f"{tool} is not installed" for tool in ("dpkg", "dpkg-deb", "apt-get")
                                        if shutil.which(tool) is None), None)
    if missing:
        pytest.skip(f"the install under the real dpkg and apt needs {missing}")
    host_before = _host_status()
    root, repo = tmp_path / "root", tmp_path / "repo"
    for folder in ("var/lib/dpkg/updates", "var/lib/dpkg/info", "var/lib/apt/lists/partial",
                   "var/cache/apt/archives/partial", "var/log/apt", "etc/apt/apt.conf.d",
                   "etc/apt/preferences.d", "etc/apt/sources.list.d", "etc/apt/trusted.gpg.d"):
        (root / folder).mkdir(parents=True)
    for name in ("status", "available"):
        (root / "var" / "lib" / "dpkg" / name).touch()
    repo.mkdir()
    debs = [_deb(repo, name) for name in jobs_vm_install.SYSTEM_PACKAGES]
    _repository(repo, debs)
    (root / "etc" / "apt" / "sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    apt_conf = tmp_path / "apt.conf"
    # As root apt's methods drop to the _apt user, who cannot read tmp_path: they stay root here.
    apt_conf.write_text(f'Dir "{root}/";\nAPT::Sandbox::User "root";\n')
    # The interrupted state: the package unpacked, never configured (what a KILLed apt-get leaves).
    interrupted = next(deb for deb in debs if deb.name.startswith(f"{INTERRUPTED}_"))
    # (--log: dpkg.cfg's /var/log/dpkg.log is this machine's; the script's runs log inside its namespace)
    _dpkg(root, f"--log={tmp_path / 'dpkg-setup.log'}", "--unpack", str(interrupted))
    audit = _dpkg(root, "--audit").stdout
    assert f" {INTERRUPTED} " in audit and "unpacked but not yet configured" in audit  # the sandbox, not this machine
    (tmp_path / "var-log").mkdir()
    yield root, {"APT_CONFIG": str(apt_conf), "DPKG_ROOT": str(root)}
    assert _host_status() == host_before, f"{HOST_STATUS} changed while the sandbox was in use"


def first_boot(tmp_path: Path) -> Guest:
    """A first boot (the install runs) with this machine's apt-get and dpkg, in a mount namespace where this
    machine's dpkg and apt state is read-only and /var/log is tmp_path/var-log."""
    guest = Guest(tmp_path, jobs.render_startup_script(SPEC, SETTINGS), "hf_fake_token_for_the_test",
                  installed=RECIPE.maxtext_version, actor_checkpoints=PATHS.actor_checkpoints, real=("apt-get", "dpkg"))
    guest.install_marker.unlink()
    guest.mounts += [f"mount --bind {tmp_path / 'var-log'} /var/log"] + [
        f"mount --bind -o ro {folder} {folder}" for folder in ("/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt")
        if os.path.isdir(folder)]
    return guest


def test_an_interrupted_dpkg_is_repaired_and_the_install_runs_under_the_real_dpkg_and_apt(tmp_path, sandbox):
    # Before: the script's PATH had no /usr/sbin nor /sbin, and the real dpkg refused `--configure -a` (exit 2,
    # "2 expected programs not found in PATH or not executable": ldconfig, start-stop-daemon), on every boot.
    root, env = sandbox
    guest = first_boot(tmp_path)
    code, calls, log = guest.boot(**env)
    assert code == 0, log
    assert "install: dpkg-configure (at most 900 s)" in guest.output
    assert f"Setting up {INTERRUPTED} (1.0) ..." in guest.output  # dpkg's own line, configuring it
    assert "expected programs not found in PATH" not in guest.output
    assert _status(root) == {name: "install ok installed" for name in jobs_vm_install.SYSTEM_PACKAGES}
    for name in jobs_vm_install.SYSTEM_PACKAGES:
        assert (root / "usr" / "share" / "doc" / name / "README").is_file()
    assert [call.split()[0] for call in calls[:3]] == ["curl", "uv", "uv"]  # the stand-ins came after apt
    assert guest.install_marker.is_file()
    assert "configure" in (tmp_path / "var-log" / "dpkg.log").read_text()  # dpkg's log stayed in the namespace
    # dpkg's own verdict afterwards: nothing left in a bad state (this machine's status: the fixture checks it).
    assert _dpkg(root, "--audit").stdout == ""
    assert Failure.parse(guest.object(PATHS.vm_failure).read_text()) is None


def test_locks_held_by_another_process_are_waited_for_on_the_real_apt_and_dpkgs_own_words(tmp_path, sandbox):
    # The image's apt-daily or unattended-upgrades at first boot: this test holds apt's lists lock and dpkg's
    # frontend lock (fcntl record locks, as they take them) for a few seconds; the script retries each command
    # on the tool's own words (jobs/vm_install.py APT_LOCKED, DPKG_LOCKED), then goes on.
    root, env = sandbox
    guest = first_boot(tmp_path)
    locks = [root / "var" / "lib" / "apt" / "lists" / "lock", root / "var" / "lib" / "dpkg" / "lock-frontend"]
    held = [open(path, "a") for path in locks]
    timers = []
    try:
        for handle, seconds in zip(held, (2, 4)):  # apt-get update runs first, dpkg --configure -a after it
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            timers.append(threading.Timer(seconds, fcntl.lockf, (handle, fcntl.LOCK_UN)))
            timers[-1].start()
        code, _, log = guest.boot(**env, **{RETRIES.lock.pause.env: "1"})
    finally:
        for timer in timers:
            timer.cancel()
        for handle in held:
            handle.close()
    assert code == 0, log
    output = guest.output
    assert f"E: Could not get lock {locks[0]}. It is held by process {os.getpid()}" in output
    assert f"dpkg: error: dpkg frontend lock was locked by another process with pid {os.getpid()}" in output
    assert jobs_vm_install.APT_LOCKED in output and jobs_vm_install.DPKG_LOCKED in output
    assert "apt-get: another process holds the lock (exit 100); trying again in 1 s" in output
    assert "dpkg: another process holds the lock (exit 2); trying again in 1 s" in output
    assert _status(root) == {name: "install ok installed" for name in jobs_vm_install.SYSTEM_PACKAGES}


def test_the_stand_ins_audit_text_is_what_the_real_dpkg_prints(tmp_path, sandbox):
    # tests/test_jobs_vm_script.py feeds the script this text from a stand-in dpkg; here the real one prints it.
    root, env = sandbox
    audit = _dpkg(root, "--audit").stdout
    from vm_helpers import AUDIT_UNPACKED
    assert audit.splitlines()[:3] == AUDIT_UNPACKED.splitlines()[:3]
    assert audit.splitlines()[3].split()[0] == AUDIT_UNPACKED.splitlines()[3].split()[0] == INTERRUPTED
    assert audit.endswith("\n\n") and AUDIT_UNPACKED.endswith("\n\n")
