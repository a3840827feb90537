"""The run's driver container: the pinned Python image (recipes/driver/runtime.py) installs this package's
wheel and its locked dependencies from the bucket, offline, then runs `tpu-rl` with the driver's args.

The files come from a read-only Cloud Storage FUSE volume of the bucket's BUCKET_PREFIX (the CSI driver
the GKE stack enables; the pod reads it as the workload service account, by Workload Identity), so the
driver needs no registry but the base image's, and no package index. `stage_driver`
(scripts/pipeline/gke/driver_image.py) uploads them first. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpu_rl.jobs.k8s import container_security
from tpu_rl.recipes import conventions
from tpu_rl.recipes.driver.runtime import (BUCKET_PREFIX, NODE_ARCH, SITE_SIZE_LIMIT_MIB, TMP_SIZE_LIMIT_MIB,
                                           LockedWheel)
from tpu_rl.recipes.outcome import DRIVER_RETRY, ExitCode

DRIVER_CONTAINER = "driver"
FILES_DIR = "/opt/tpu-rl-driver/files"  # gs://BUCKET/<BUCKET_PREFIX>/, read-only
SITE_DIR = "/opt/tpu-rl-driver/site"  # what pip installs, kept across the container's restarts in the pod
TMP_DIR = "/tmp"
DRIVER_UID = 65534  # nobody: the container needs no user of its own
FILES_VOLUME, SITE_VOLUME, TMP_VOLUME = "driver-files", "driver-site", "driver-tmp"
DRIVER_VERSION_ENV = "TPU_RL_DRIVER_VERSION"  # what the driver reports: DriverRuntime.version
# The requirements' sha256, from the pod spec the CLI wrote: the bucket's copy is checked against it,
# since whoever may write the bucket could change a wheel and its hash line together.
REQUIREMENTS_SHA256_ENV = "TPU_RL_DRIVER_REQUIREMENTS_SHA256"
PIP_TMP = ".pip-tmp"  # under the site volume: pip --target's staging tree, beside where it lands
ARCH_LABEL = "kubernetes.io/arch"
# On the driver's pod template: the runtime it runs, read by a CLI that attaches (driver_drift).
DRIVER_VERSION_ANNOTATION = "tpu-rl/driver-version"
# 83 MB of wheels read through FUSE and unpacked: a minute or two; a hung mount ends here.
INSTALL_SECONDS = 600
# Its requests live in recipes/conventions.py (recipes/costs/run.py prices them too).
DRIVER_RESOURCES = {"requests": {"cpu": f"{conventions.DRIVER_CPU_MILLI}m",
                                 "memory": f"{conventions.DRIVER_MEMORY_GIB}Gi"},
                    "limits": {"memory": f"{conventions.DRIVER_MEMORY_GIB}Gi"}}
# The Cloud Storage FUSE CSI driver injects its sidecar into a pod with this annotation; the others size
# it (GoogleCloudPlatform/gcs-fuse-csi-driver@bbbfc2a3 pkg/webhook/config.go: each "-limit" of "0" means
# none, and a request given alone is kept). It serves a few reads per start, not a training input.
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATIONS = {"gke-gcsfuse/volumes": "true",
                       "gke-gcsfuse/cpu-request": "50m", "gke-gcsfuse/cpu-limit": "0",
                       "gke-gcsfuse/memory-request": "64Mi", "gke-gcsfuse/memory-limit": "0",
                       "gke-gcsfuse/ephemeral-storage-request": "64Mi", "gke-gcsfuse/ephemeral-storage-limit": "0"}


@dataclass(frozen=True)
class DriverRuntime:
    """What a driver pod runs: the image, the package version it installs and where its files are."""

    image: str
    version: str  # "<package version>+<12 hex of the package files' digest>", the wheel's own version
    bucket: str
    requirements: str  # under the FUSE root (gs://bucket/BUCKET_PREFIX/): the pinned wheels, with hashes
    requirements_sha256: str  # of the requirements as staged: the pod installs nothing else

    @property
    def runtime_dir(self) -> str:
        return runtime_dir(self.version)


def runtime_dir(version: str) -> str:
    """The runtime's directory under the FUSE root: its wheel and requirements.txt."""
    return f"runtimes/{version}"


def wheels_dir() -> str:
    """The locked wheels under the FUSE root, by file name: shared by every runtime."""
    return "wheels"


def object_name(path: str) -> str:
    """The bucket object of a path under the FUSE root."""
    return f"{BUCKET_PREFIX}/{path}"


def requirements_text(wheels: tuple[LockedWheel, ...], package_wheel: str, package_sha256: str) -> str:
    """pip's requirements for one runtime: every file by its path under the FUSE root and its sha256, so
    `--require-hashes` refuses a file that differs from the lock or from the wheel that was built."""
    lines = [f"./{wheels_dir()}/{wheel.file} --hash=sha256:{wheel.sha256}" for wheel in wheels]
    return "\n".join([*lines, f"./{package_wheel} --hash=sha256:{package_sha256}", ""])


# How the install ends for the driver's Job (jobs/driver.py podFailurePolicy): a failed or slow install, or
# a bucket mount not ready yet, is retried as the driver's own transient failures are (EX_TEMPFAIL); a
# staged file changed in the bucket is bad input the user must clear (2), never retried.
INSTALL_RETRY = DRIVER_RETRY
STAGED_FILE_CHANGED = int(ExitCode.BAD_INPUT)
# The installed package failing to import (a broken wheel, or an image whose Python it does not run on) is no
# transient: the next pod installs the same files on the same image. Python would exit 1, "a step failed",
# which the Job fails on too, but under another name; so it ends as what it is, bad input, never retried.
RUNTIME_BROKEN = int(ExitCode.BAD_INPUT)
# `tpu-rl`'s entry point, run as the container's process (exec: SIGTERM reaches Python), which says an import
# that fails in one line after its traceback. No single quote: it goes inside the script's.
BOOT = f"""import sys, traceback
try:
    from tpu_rl.scripts.cli import main
except Exception as error:
    traceback.print_exc()
    print(f"error: tpu-rl does not import in the driver pod ({{type(error).__name__}}: {{error}}): the staged "
          "runtime or the driver image is broken, the same in any new pod, so its Job ends", flush=True)
    sys.exit({RUNTIME_BROKEN})
sys.argv[0] = "tpu-rl"
main()
"""


def install_script() -> str:
    """bash: install the runtime once per pod (into a directory named for its version, moved into place
    when complete, so a restart after a failed install starts over), then exec `tpu-rl` (BOOT) with its
    arguments ("$@") so SIGTERM reaches Python; -P keeps the working directory off its path. Paths, version and
    the requirements' sha256 come from the environment. pip --target builds the whole install in a
    temporary directory and then moves it (pypa/pip tag 23.2.1 src/pip/_internal/commands/install.py,
    `TempDirectory(kind="target")`, `_handle_target_dir`): TMPDIR in the site volume keeps that tree
    off the small /tmp volume and makes the move a rename."""
    return f"""set -euo pipefail
trap 'exit {INSTALL_RETRY}' ERR
packages="$TPU_RL_DRIVER_SITE/${DRIVER_VERSION_ENV}"
pip_tmp="$TPU_RL_DRIVER_SITE/{PIP_TMP}"
if [ ! -d "$packages" ]; then
  echo "tpu-rl driver ${DRIVER_VERSION_ENV}: installing from $TPU_RL_DRIVER_FILES (at most {INSTALL_SECONDS} s)"
  rm -rf "$packages.partial" "$pip_tmp"
  cd "$TPU_RL_DRIVER_FILES"
  if ! echo "${REQUIREMENTS_SHA256_ENV}  $TPU_RL_DRIVER_REQUIREMENTS" | sha256sum -c --status 2>/dev/null; then
    echo "tpu-rl driver: {BUCKET_PREFIX}/$TPU_RL_DRIVER_REQUIREMENTS in the bucket is not the file \\
tpu-rl run staged (another sha256): not installed; delete it and run again" >&2
    exit {STAGED_FILE_CHANGED}
  fi
  mkdir "$pip_tmp"
  if ! TMPDIR="$pip_tmp" timeout {INSTALL_SECONDS} python3 -m pip install --quiet --no-index --no-deps \\
      --require-hashes --no-cache-dir --disable-pip-version-check --root-user-action=ignore \\
      --target "$packages.partial" -r "$TPU_RL_DRIVER_REQUIREMENTS"; then
    echo "tpu-rl driver: installing $TPU_RL_DRIVER_REQUIREMENTS failed or took over {INSTALL_SECONDS} s" >&2
    exit {INSTALL_RETRY}
  fi
  rm -rf "$pip_tmp"
  mv "$packages.partial" "$packages"
fi
cd "$TPU_RL_DRIVER_TMP"
export PYTHONPATH="$packages"
exec python3 -P -c '{BOOT}' "$@"
"""


def driver_env(runtime: DriverRuntime) -> list[dict[str, str]]:
    values = {DRIVER_VERSION_ENV: runtime.version, "TPU_RL_DRIVER_FILES": FILES_DIR,
              "TPU_RL_DRIVER_SITE": SITE_DIR, "TPU_RL_DRIVER_TMP": TMP_DIR,
              "TPU_RL_DRIVER_REQUIREMENTS": runtime.requirements,
              REQUIREMENTS_SHA256_ENV: runtime.requirements_sha256, "HOME": TMP_DIR,
              "PYTHONUNBUFFERED": "1"}  # the driver's lines reach its log as they are printed
    return [{"name": name, "value": value} for name, value in values.items()]


def driver_container(runtime: DriverRuntime, args: list[str]) -> dict[str, Any]:
    """The driver's container; `args` are `tpu-rl`'s (e.g. ["drive", RECIPE, "--run", NAME])."""
    return {
        "name": DRIVER_CONTAINER, "image": runtime.image,
        # "$0" is the script's name in its messages; "$@" the args
        "command": ["bash", "-c", install_script(), "tpu-rl-driver"], "args": list(args),
        "env": driver_env(runtime), "resources": DRIVER_RESOURCES,
        "volumeMounts": [{"name": FILES_VOLUME, "mountPath": FILES_DIR, "readOnly": True},
                         {"name": SITE_VOLUME, "mountPath": SITE_DIR},
                         {"name": TMP_VOLUME, "mountPath": TMP_DIR}],
        "securityContext": {**container_security(), "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                            "runAsUser": DRIVER_UID, "runAsGroup": DRIVER_UID},
    }


def driver_volumes(runtime: DriverRuntime) -> list[dict[str, Any]]:
    """The pod's volumes for driver_container: the bucket's driver files (FUSE, read-only), and two
    emptyDirs, for the installed packages and for /tmp (the root filesystem is read-only)."""
    # gcsfuse's files belong to the uid/gid its mount options name, so the unprivileged container owns
    # them (GoogleCloudPlatform/gcs-fuse-csi-driver issue 16); only-dir mounts the driver's prefix alone,
    # and implicit-dirs shows the directories that staging never writes as objects.
    options = f"implicit-dirs,only-dir={BUCKET_PREFIX},uid={DRIVER_UID},gid={DRIVER_UID}"
    files = {"driver": GCSFUSE_CSI_DRIVER, "readOnly": True,
             "volumeAttributes": {"bucketName": runtime.bucket, "mountOptions": options}}
    return [{"name": FILES_VOLUME, "csi": files},
            {"name": SITE_VOLUME, "emptyDir": {"sizeLimit": f"{SITE_SIZE_LIMIT_MIB}Mi"}},
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": f"{TMP_SIZE_LIMIT_MIB}Mi"}}]


def driver_node_selector(runtime: DriverRuntime) -> dict[str, str]:
    """Entries the driver's pod spec adds to its nodeSelector: nodes of the lock's architecture, since the
    base image is multi-arch and the locked wheels are not (the Job adds its node pool beside it)."""
    return {ARCH_LABEL: NODE_ARCH}


def driver_pod_annotations(runtime: DriverRuntime) -> dict[str, str]:
    """For the driver's pod template: the FUSE sidecar's, and the runtime version a CLI compares."""
    return {**GCSFUSE_ANNOTATIONS, DRIVER_VERSION_ANNOTATION: runtime.version}


_RELEASE = re.compile(r"\d+(\.\d+)*")


def _release(version: str) -> tuple[int, ...]:
    found = _RELEASE.match(version)
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


def driver_drift(cli_version: str, driver_version: str | None) -> str | None:
    """One line when the run's driver runs other code than this CLI, else None. The run goes on with the
    driver's code either way: a driver is never swapped under a running step."""
    if driver_version == cli_version:
        return None
    if not driver_version:
        return (f"this run's driver does not say its version (no {DRIVER_VERSION_ANNOTATION} annotation); "
                f"this CLI is tpu-rl {cli_version}")
    driver, cli = _release(driver_version), _release(cli_version)
    relation = "older than" if driver < cli else "newer than" if driver > cli else "built from other files than"
    return (f"this run's driver runs tpu-rl {driver_version}, {relation} this CLI ({cli_version}): "
            "the run goes on with the driver's code")
