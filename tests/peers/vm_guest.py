"""The TPU VM's guest, locally: the real rendered startup script under bash, with stand-ins for gcloud (a
local directory as the bucket, Secret Manager from an environment variable), python3 (records its arguments),
uv, apt-get and curl, and the serial console the guest agent makes of each boot.

The console format is the guest agent's (GoogleCloudPlatform/guest-agent google_metadata_script_runner/
main.go at 0a52260f: main logs "Starting %s scripts (version %s).", "Found %s in metadata.", then runCmd
copies each output line as "%s: %s" with the metadata key, then "%s exit status 0" or
"Script %q failed with error: %v" (Go's exec error: "exit status N"), then "Finished running %s scripts.").
The newer agent (GoogleCloudPlatform/google-guest-agent cmd/gce_metadata_script_runner/scriptrunner.go at
16b9b3bf) copies a line as `Metadata key(%q), command(%q): %s`, logs the same failure line and
"Finished running %s scripts" without the period.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

INSTALL_DIR, LOG_FILE = "/opt/tpu-rl", "/var/log/tpu-rl.log"  # jobs/vm.py, replaced by local paths here

FAKE_GCLOUD = r"""#!/bin/bash
set -eu
local_path() { echo "$FAKE_GCS/${1#gs://}"; }
count() { local n; n=$(( $(cat "$1" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$1"; echo "$n"; }
case "$1 $2" in
  "storage ls")
    # FAKE_LS_FAILURES: the first checks fail (transient); FAKE_LS_FAIL: checks of URLs containing it fail, the
    # first FAKE_LS_FAIL_TIMES of them (default: always).
    if (( $(count "$FAKE_GCS.ls-calls") <= ${FAKE_LS_FAILURES:-0} )) || { [[ -n "${FAKE_LS_FAIL:-}" && "$3" == *"$FAKE_LS_FAIL"* ]] \
        && (( $(count "$FAKE_GCS.ls-fail-calls") <= ${FAKE_LS_FAIL_TIMES:-1000000} )); }; then
      echo "ERROR: (gcloud.storage.ls) HTTPError 503: stand-in transient error" >&2; exit 1
    fi
    # Each matching object's URL (one object, or a wildcard's matches), as `gcloud storage ls` prints them.
    found=1
    for path in $(local_path "$3"); do
      if [[ -e "$path" ]]; then found=0; echo "gs://${path#"$FAKE_GCS"/}"; fi
    done
    (( found == 0 )) || { echo "ERROR: (gcloud.storage.ls) One or more URLs matched no objects." >&2; exit 1; } ;;
  "storage cp")
    # FAKE_CP_FAILURES: the first uploads fail (a transient error); FAKE_CP_FAIL: uploads to URLs containing it
    # always fail.
    if (( $(count "$FAKE_GCS.cp-calls") <= ${FAKE_CP_FAILURES:-0} )) || [[ -n "${FAKE_CP_FAIL:-}" && "$4" == *"$FAKE_CP_FAIL"* ]]; then
      cat > /dev/null; echo "ERROR: (gcloud.storage.cp) HTTPError 503: stand-in upload error" >&2; exit 1
    fi
    # FAKE_CP_FAIL_BODY: uploads whose content contains it always fail.
    body="$(cat)"
    if [[ -n "${FAKE_CP_FAIL_BODY:-}" && "$body" == *"$FAKE_CP_FAIL_BODY"* ]]; then
      echo "ERROR: (gcloud.storage.cp) HTTPError 503: stand-in upload error" >&2; exit 1
    fi
    mkdir -p "$(dirname "$(local_path "$4")")"; printf '%s\n' "$body" > "$(local_path "$4")"
    # Every upload in order (Guest.uploads): what a reader of the bucket could see between two of them.
    mkdir -p "$FAKE_GCS.uploads"; printf '%s\n%s\n' "$4" "$body" > "$FAKE_GCS.uploads/$(date +%s%N).$$" ;;
  "storage cat")
    path="$(local_path "$3")"
    [[ -f "$path" ]] || { echo "ERROR: (gcloud.storage.cat) The following URLs matched no objects or files: $3" >&2; exit 1; }
    cat "$path" ;;
  "secrets versions")
    if [[ -n "${FAKE_SECRET_HANG:-}" ]]; then sleep 30; fi  # a request that never returns
    if [[ -z "${FAKE_TOKEN:-}" ]]; then
      echo "ERROR: (gcloud.secrets.versions.access) NOT_FOUND: Secret Version [projects/p/secrets/hf-token/versions/latest] not found." >&2
      exit 1
    fi
    printf '%s' "$FAKE_TOKEN" ;;
  *) echo "unexpected gcloud $*" >&2; exit 2 ;;
esac
"""

# snapd at first boot (`snap wait system seed.loaded` returns once the seed snaps are mounted,
# snapcore/snapd tests/main/snap-wait): the seeding takes FAKE_SEED_SECONDS, then the gcloud snap is on PATH;
# FAKE_SEED_SECONDS=never: the seeding outlasts any bound.
FAKE_SNAP = r"""#!/bin/bash
echo "snap $*" >> "$CALLS"
[[ "$*" == "wait system seed.loaded" ]] || { echo "unexpected snap $*" >&2; exit 2; }
if [[ "${FAKE_SEED_SECONDS:-1}" == never ]]; then sleep 60; exit 0; fi
sleep "${FAKE_SEED_SECONDS:-1}"
install -m 755 "$(dirname "$0")/gcloud.snap" "$(dirname "$0")/gcloud"
"""

FAKE_UV = r"""#!/bin/bash
echo "uv $*${UV_TORCH_BACKEND:+ (UV_TORCH_BACKEND=$UV_TORCH_BACKEND)}" >> "$CALLS"
if [[ "$1" == venv ]]; then
  venv="${@: -1}"; mkdir -p "$venv/bin"; touch "$venv/bin/activate"; ln -sf "$(command -v true)" "$venv/bin/python"
fi
"""

# A tool that records its call and fails when FAIL_TOOL names it, as apt-get does (exit 100); when HANG_TOOL
# names it, it hangs (a download that never ends) until a signal stops it.
RECORDER = r"""#!/bin/bash
echo "$(basename "$0") $*" >> "$CALLS"
# IGNORE_TERM: it also ignores SIGTERM (its children inherit that), so only `timeout`'s KILL stops it.
if [[ "$(basename "$0")" == "${HANG_TOOL:-none}" ]]; then [[ -z "${IGNORE_TERM:-}" ]] || trap '' TERM; sleep 30; fi
# LOCKED_CALL: the first LOCKED_TIMES calls starting with it fail as while another process holds the lock the
# tool does not wait for, with the tool's own line and exit code: apt-get's lists lock (Debian/apt 2.4.13
# apt-pkg/contrib/fileutl.cc GetLock, apt-pkg/acquire.cc pkgAcquire::GetLock; apt-get exits 100) and dpkg's
# frontend lock (guillemj/dpkg 1.21.1 lib/dpkg/file.c file_lock, lib/dpkg/ehandle.c: "dpkg: error: ...", exit 2).
call="$(basename "$0") $*"
if [[ "$call" == "${LOCKED_CALL:-none}"* ]]; then
  n=$(( $(cat "$CALLS.locked" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$CALLS.locked"
  if (( n <= ${LOCKED_TIMES:-0} )); then
    case "$(basename "$0")" in
      apt-get) echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
               echo "N: Be aware that removing the lock file is not a solution and may break your system." >&2
               echo "E: Unable to lock directory /var/lib/apt/lists/" >&2; exit 100 ;;
      dpkg) echo "dpkg: error: dpkg frontend lock was locked by another process with pid 4242" >&2
            echo "Note: removing the lock file is always wrong, and can end up damaging the" >&2
            echo "locked area and the entire system. See <https://wiki.debian.org/Teams/Dpkg/FAQ>." >&2; exit 2 ;;
    esac
  fi
fi
# DPKG_AUDIT: what `dpkg --audit` prints (nothing: no package in a bad state; it exits 0 either way,
# guillemj/dpkg 1.21.1 src/enquiry.c audit).
if [[ "$call" == "dpkg --audit" ]]; then printf '%s' "${DPKG_AUDIT:-}"; fi
if [[ "$(basename "$0")" == "${FAIL_TOOL:-none}" ]]; then
  echo "E: stand-in failure of $(basename "$0") $*"; exit 100
fi
"""

FAKE_PYTHON = r"""#!/bin/bash
printf '%s token=%s\n' "$2" "$([[ "${HF_TOKEN:-}" == "$FAKE_TOKEN" ]] && echo yes || echo no)" >> "$CALLS"
echo "$2: stand-in output"
sleep "${FAKE_STEP_SECONDS:-0}"  # how long a step takes (the sandbox's VM: peers/sandbox_vm.py)
if [[ "$2" == *train_rl && "${FAIL_MODULE:-none}" != *train_rl && "${KILL_MODULE:-none}" != *train_rl && -n "${ACTOR:-}" ]]; then
  # tunix saves the step training reached on close (a killed one saves nothing): its params, then orbax's
  # commit marker in its step directory last.
  for step in ${TRAINED_STEPS-50}; do
    mkdir -p "$ACTOR/$step/model_params"; echo params > "$ACTOR/$step/model_params/params"
    echo committed > "$ACTOR/$step/commit_success.txt"
  done
fi
if [[ "$2" == *to_huggingface && -n "${EXPORTED:-}" ]]; then
  printf '%s\n' "$@" | grep '^load_parameters_path=' >> "$EXPORTED" || true
fi
# What each step leaves under its base_output_directory, as MaxText writes it (scripts/cloud/gcs.py
# step_outputs): the conversion's step 0 items and commit marker; the export's config, tokenizer and weights
# (one file, or FAKE_SHARDS shards and their index last). FAKE_NO_OUTPUT: a file name the step leaves out.
put_file() { [[ "$(basename "$1")" == "${FAKE_NO_OUTPUT:-none}" ]] || { mkdir -p "$(dirname "$1")"; echo "$2" > "$1"; }; }
base="$(printf '%s\n' "$@" | sed -n 's#^base_output_directory=gs://##p')"
base="$FAKE_GCS/${base%/}"
if [[ "$2" == *to_maxtext && "${FAIL_MODULE:-none}" != *to_maxtext ]]; then
  put_file "$base/0/items/manifest.ocdbt" items; put_file "$base/0/commit_success.txt" committed
fi
HF_EXPORT="$base"
if [[ "$2" == *to_huggingface && "${FAIL_MODULE:-none}" != *to_huggingface ]]; then
  for name in config.json tokenizer_config.json tokenizer.json; do put_file "$HF_EXPORT/$name" '{}'; done
  if [[ -z "${FAKE_SHARDS:-}" ]]; then put_file "$HF_EXPORT/model.safetensors" weights; else
    map=""
    for i in $(seq "$FAKE_SHARDS"); do
      shard="$(printf 'model-%05d-of-%05d.safetensors' "$i" "$FAKE_SHARDS")"; put_file "$HF_EXPORT/$shard" weights
      map="$map${map:+, }\"layer.$i.weight\": \"$shard\""
    done
    put_file "$HF_EXPORT/model.safetensors.index.json" "{\"weight_map\": {$map}}"
  fi
fi
if [[ "$2" == "${CANCEL_MODULE:-none}" ]]; then
  # A long step, during which someone runs `tpu-rl cancel` (the marker appears); it runs until SIGTERM.
  mkdir -p "$(dirname "$CANCEL_FILE")"; date > "$CANCEL_FILE"
  trap 'kill "$nap"; echo "$2 got SIGTERM" >> "$CALLS"; exit 143' TERM
  sleep 50 & nap=$!; wait "$nap"
  exit 0
fi
if [[ "$2" == "${LONG_MODULE:-none}" ]]; then
  # A step that logs more than the console keeps (train_rl at debug logs every question and answer).
  head -c "$LONG_BYTES" /dev/zero | tr '\0' 'q' | fold -w 99
  echo
fi
if [[ "$2" == "${KILL_MODULE:-none}" ]]; then
  # The step is killed with the script (the kernel's OOM killer, a SIGKILL): no trap runs, no record is left.
  kill -KILL "$PPID"; exit 137
fi
if [[ "$2" == "${FAIL_MODULE:-none}" ]]; then
  echo "$2: stand-in error, exiting 1"; exit 1
fi
"""


# systemd's shutdown(8) on the VM: it records its call apart from the other tools' (Guest.power_offs); the
# script's power-off must never reach this machine, so every guest has it, whatever `real` says.
FAKE_SHUTDOWN = r"""#!/bin/bash
echo "shutdown $*" >> "$FAKE_GCS.power"
"""


# curl: the metadata server answers this instance's id (FAKE_INSTANCE_ID: another id is another VM, as
# after `gcloud compute instances delete` and `cdktf deploy`), unrecorded; any other URL is recorded.
# FAKE_METADATA_DOWN: the server does not answer (curl's exit 6, "Couldn't resolve host").
FAKE_CURL = r"""#!/bin/bash
if [[ "$*" == *computeMetadata/v1/instance/id* ]]; then
  [[ -z "${FAKE_METADATA_DOWN:-}" ]] || exit 6
  [[ "$*" == *"Metadata-Flavor: Google"* ]] || exit 22
  printf '%s' "${FAKE_INSTANCE_ID:-7351236548216840001}"; exit 0
fi
echo "curl $*" >> "$CALLS"; echo "exit 0"
"""


class Guest:
    """One TPU VM's boot disk and bucket, booted as often as a test likes."""

    def __init__(self, tmp_path: Path, script: str, token: str, installed: str | None,
                 actor_checkpoints: str | None = None, real: tuple[str, ...] = (), gcloud_snap: bool = False) -> None:
        """`actor_checkpoints`: the run's gs:// checkpoint prefix; train_rl's stand-in then writes the step
        it reached there with orbax's commit marker, as tunix does on close, so export finds it. `real`: the
        tools ("apt-get", "dpkg") that run as this machine's own, with no stand-in. `gcloud_snap`: gcloud is a
        snap that snapd mounts at first boot (FAKE_SNAP), and this machine's own gcloud is hidden (`mounts`)."""
        self.root, self.token = tmp_path, token
        self.bin, self.gcs, self.install = tmp_path / "bin", tmp_path / "gcs", tmp_path / "opt"
        for directory in (self.bin, self.gcs, self.install / "venv" / "bin"):
            directory.mkdir(parents=True, exist_ok=True)
        tools = {"gcloud.snap" if gcloud_snap else "gcloud": FAKE_GCLOUD, "python3": FAKE_PYTHON, "uv": FAKE_UV,
                 "apt-get": RECORDER, "dpkg": RECORDER, "install_tpu_post_train_extra_deps": RECORDER,
                 "curl": FAKE_CURL,
                 **({"snap": FAKE_SNAP} if gcloud_snap else {})}
        for name, text in tools.items():
            if name not in real:
                (self.bin / name).write_text(text)
                (self.bin / name).chmod(0o755)
        (self.bin / "shutdown").write_text(FAKE_SHUTDOWN)
        (self.bin / "shutdown").chmod(0o755)
        # Shell commands run in a mount namespace of the script's own before it starts (unshare(1)): what the
        # script must not see or change of this machine.
        self.mounts: list[str] = []
        (self.install / "venv" / "bin" / "activate").write_text("# stand-in venv\n")
        self.install_marker = self.install / f".installed-{installed or 'none'}"
        if installed:
            self.install_marker.touch()  # the install phase is skipped
        self.log_file = tmp_path / "tpu-rl.log"
        text = script.replace(INSTALL_DIR, str(self.install)).replace(LOG_FILE, str(self.log_file))
        self.script = tmp_path / "startup.sh"
        self.script.write_text(text.replace('export PATH="', f'export PATH="{self.bin}:', 1))
        self.script.chmod(0o755)
        self.path = re.search(r"^readonly SCRIPT_PATH=(\S+)$", script, re.MULTILINE)[1]  # the script's own PATH
        if gcloud_snap:
            self.hide("gcloud")
        self.calls = tmp_path / "calls"
        self.boots: list[tuple[str, int]] = []  # (the script's output, its exit code) per boot
        self.output = ""
        self.env = {"EXPORTED": str(tmp_path / "exported")}  # the load_parameters_path of each export
        if actor_checkpoints:
            self.env["ACTOR"] = str(self.object(actor_checkpoints))

    def command(self, **env: str) -> tuple[list[str], dict[str, str]]:
        """The command that runs the script once, and its environment: the stand-ins', and `env`."""
        full = {"PATH": os.environ["PATH"], "FAKE_GCS": str(self.gcs), "FAKE_TOKEN": self.token,
                "CALLS": str(self.calls), **self.env, **env}
        command = ["bash", "-c", str(self.script)]
        if self.mounts:
            command = ["unshare", "--mount", "--propagation", "private", "bash", "-c",
                       " && ".join(self.mounts) + ' && exec "$0"', str(self.script)]
        return command, full

    def boot(self, **env: str) -> tuple[int, list[str], str]:
        """Run the script once as the guest agent does (one pipe for stdout and stderr): (exit code, the
        stand-ins' calls, the log file and output)."""
        command, full = self.command(**env)
        result = subprocess.run(command, env=full, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=60)
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        self.calls.unlink(missing_ok=True)
        self.output = result.stdout
        self.boots.append((result.stdout, result.returncode))
        log = (self.log_file.read_text() if self.log_file.exists() else "") + result.stdout
        return result.returncode, lines, log

    def finished(self, paths, *steps: str, checkpoint: int = 50) -> None:
        """The bucket after `steps` of the run finished in an earlier boot: what each left (as the stand-ins
        write it: the conversion, training checkpoint `checkpoint`, the export), then its progress marker.
        `paths`: the run's tpu_rl.jobs.paths.ArtifactPaths."""
        from tpu_rl.recipes.conventions import HF_CONFIG, HF_SINGLE_WEIGHTS, HF_TOKENIZER_FILES, ORBAX_COMMIT_MARKER

        step_dir = paths.converted_items.rstrip("/").rpartition("/")[0] + "/"
        left = {"convert": [f"{paths.converted_items}manifest.ocdbt", step_dir + ORBAX_COMMIT_MARKER],
                "train": [f"{paths.params_at(checkpoint)}params",
                          f"{paths.actor_checkpoints}{checkpoint}/{ORBAX_COMMIT_MARKER}"],
                "export": [paths.hf_export + name for name in (HF_CONFIG, *HF_TOKENIZER_FILES, HF_SINGLE_WEIGHTS)]}
        for step in steps:
            for url in [*left[step], paths.progress_marker(step)]:
                self.object(url).parent.mkdir(parents=True, exist_ok=True)
                self.object(url).write_text("done")

    @property
    def shutdowns(self) -> list[str]:
        """Every shutdown command the script ran on this guest, in order, cancels (`shutdown -c`) included."""
        power = Path(f"{self.gcs}.power")
        return power.read_text().splitlines() if power.exists() else []

    @property
    def power_offs(self) -> list[str]:
        """Every power-off the script ran or scheduled on this guest, in order ("shutdown -h now", ...)."""
        return [line for line in self.shutdowns if line != "shutdown -c"]

    @property
    def pending_power_off(self) -> str | None:
        """The scheduled power-off still pending (`shutdown -h +N ...` not followed by `shutdown -c`), as on
        one boot of systemd: logind keeps one schedule, which a cancel drops."""
        pending = None
        for line in self.shutdowns:
            pending = None if line == "shutdown -c" else line if line.startswith("shutdown -h +") else pending
        return pending

    def hide(self, tool: str) -> None:
        """This machine's own `tool` on the script's PATH, out of the script's sight: a file that is not
        executable bound over it in the script's mount namespace (the machine's file is untouched)."""
        empty = self.root / f"no-{tool}"
        empty.write_text("")
        empty.chmod(0o644)
        found = {(Path(directory) / tool).resolve() for directory in self.path.split(":")
                 if (Path(directory) / tool).exists()}
        self.mounts += [f"mount --bind {empty} {path}" for path in sorted(found)]

    def uploads(self) -> list[tuple[str, str]]:
        """Every upload of the boots so far, in order: (URL, body)."""
        folder = Path(f"{self.gcs}.uploads")
        files = sorted(folder.iterdir()) if folder.exists() else []  # named by the time of the upload, in ns
        return [tuple(path.read_text().split("\n", 1)) for path in files]

    def object(self, url: str) -> Path:
        return self.gcs / url.removeprefix("gs://")

    def console(self, agent: str = "guest-agent", boots: list[tuple[str, int]] | None = None,
                running: bool = False) -> str:
        """The serial console of these boots (all so far) as the guest agent writes it; `running`: the last
        boot's script has not ended yet (no verdict). agent="unforwarded": the newer agent on an image whose
        syslog/journald do not forward to the console (it logs to syslog only, google-guest-agent
        internal/logger/logger_linux.go at 16b9b3bf): neither the script's lines nor the agent's reach it."""
        boots = self.boots if boots is None else boots
        lines: list[str] = []
        for index, (output, code) in enumerate(boots):
            ended = not (running and index == len(boots) - 1)
            if agent == "unforwarded":
                continue
            if agent == "guest-agent":
                lines += ["Starting startup scripts (version ).", "Found startup-script in metadata."]  # version: unset
                lines += [f"startup-script: {line}" for line in output.splitlines()]
                if ended:
                    lines.append("startup-script exit status 0" if code == 0
                                 else f'Script "startup-script" failed with error: exit status {code}')
                    lines.append("Finished running startup scripts.")
            else:
                lines += ['Found startup-script in metadata']
                lines += [f'Metadata key("startup-script"), command("/bin/bash"): {line}'
                          for line in output.splitlines()]
                if ended:
                    if code:
                        lines.append(f'Script "startup-script" failed with error: exit status {code}')
                    lines.append("Finished running startup scripts")
        return "\n".join(lines) + "\n"

    def sync_to(self, storage) -> None:
        """Copy the local bucket into the GCS emulator, so the real CLI reads what the script wrote."""
        for path in sorted(self.gcs.rglob("*")):
            if path.is_file():
                bucket, _, name = str(path.relative_to(self.gcs)).partition("/")
                storage.bucket(bucket).blob(name).upload_from_string(path.read_bytes())


def private_mounts() -> str | None:
    """None when a process can have its own mount namespace here (unshare(1) --mount, as root), else why not."""
    if shutil.which("unshare") is None:
        return "unshare(1) (util-linux) is not installed"
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if result.returncode == 0 else f"unshare --mount fails here: {result.stderr.strip()} (it needs root)"
