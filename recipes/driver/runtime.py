"""What the run's driver runs on (docs/pipeline.md, "The driver's image"): a public Python image pinned by
digest, into which the driver's container installs this package's own wheel and its locked dependencies
from the bucket, offline. Data only; jobs/driver_runtime.py renders the container, and
scripts/pipeline/gke/driver_image.py stages the files.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources as package_files

# docker-library/official-images: python 3.12 on Debian bookworm, slim. Pinned by the digest of the tag's
# image index (docker-library/repo-info@33a22f41ac7bf613bc03380b0317536a9a7fb5e8
# repos/python/remote/3.12-slim-bookworm.md: `python@sha256:0f5b26b9...`, PYTHON_VERSION=3.12.14, its
# linux/amd64 entry is what cpu-np's x86_64 nodes pull). Private nodes pull it through the stack's Cloud
# NAT, as they pull the Kueue webhook probe's busybox (infra/kueue_webhook_probe.py).
BASE_IMAGE = ("docker.io/library/python:3.12-slim-bookworm"
              "@sha256:0f5b26b9518d002b6173fd61daad821fa340635ebfec5bba471013f9ca114579")
# The interpreter and platform the lock is resolved for: the image's Python, x86_64 (cpu-np), and Debian
# bookworm's glibc 2.36 (manylinux_2_36 and older wheels run on it).
PYTHON_VERSION = "3.12"
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
# The lock's x86_64 as Kubernetes' kubernetes.io/arch label names it (Go's GOARCH): the base image is
# multi-arch, the lock is not, so the driver's pod asks for these nodes (jobs/driver_runtime.py).
NODE_ARCH = "amd64"
# The driver pod's two emptyDirs (MiB). The site holds the installed runtime and pip's own temporary
# tree (pip --target stages everything there and moves it, one rename on one filesystem); /tmp holds
# only the driver's own scratch files. `tools/lock_driver.py --verify` measures both peaks against these.
SITE_SIZE_LIMIT_MIB = 1024
TMP_SIZE_LIMIT_MIB = 256

# The package's dependencies (pyproject.toml) that the driver leaves out, and why it can: it runs only
# `tpu-rl drive`, the GKE pipeline. scripts/ never import infra/ or stacks/, where cdktf stays
# (tests/test_imports.py), and matplotlib is imported by `metrics --png` alone (scripts/metrics/plot.py);
# tests/test_driver_image.py holds both.
LEFT_OUT = {
    "cdktf": "the stacks (infra/, stacks/)",
    "cdktf-cdktf-provider-google": "the stacks (infra/, stacks/)",
    "cdktf-cdktf-provider-helm": "the stacks (infra/, stacks/)",
    "constructs": "the stacks (infra/, stacks/)",
    "jsii": "the stacks (infra/, stacks/)",
    "matplotlib": "`tpu-rl metrics --png` (scripts/metrics/plot.py)",
}
# Where in the bucket the driver's files live (a prefix the workload service account may read, like the
# rest of the bucket): the wheels by file name under wheels/, one directory per runtime under runtimes/.
BUCKET_PREFIX = "tpu-rl-driver"
LOCK_FILE = "driver_lock.toml"  # written by tools/lock_driver.py; package data of recipes


@dataclass(frozen=True)
class LockedWheel:
    """One wheel of the driver's lock: the one file of a pinned release that installs on the image."""

    name: str
    version: str
    file: str  # the wheel's file name, which pip reads its tags from
    url: str
    sha256: str
    size: int


def driver_lock(text: str | None = None) -> tuple[LockedWheel, ...]:
    """The committed lock (or `text`, a lock of the same form), in file-name order."""
    if text is None:
        text = package_files.files("tpu_rl.recipes.driver").joinpath(LOCK_FILE).read_text()
    return tuple(sorted((LockedWheel(**entry) for entry in tomllib.loads(text)["wheels"]), key=lambda w: w.file))
