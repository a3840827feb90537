"""Stage the run driver's runtime in the bucket from the user's machine: the locked wheels
(recipes/driver/driver_lock.toml, downloaded once from their URLs and checked against their sha256), this
package's own wheel (driver_wheel.py) and the requirements that pin them all by hash. The driver's pod
installs them offline (jobs/driver_runtime.py); nothing needs Docker here or a package index there.

Each object carries the sha256 it was uploaded with (object metadata); one already there with the
expected sha256 is not uploaded again, so a second `run` of the same package uploads nothing. The pod's
`pip --require-hashes` checks every file again against the requirements, and the requirements against
the sha256 the CLI puts in the pod's spec (DriverRuntime.requirements_sha256), so an object changed in
the bucket fails the install instead of running.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from functools import partial
from typing import Callable

from tpu_rl.jobs.driver_runtime import (DriverRuntime, object_name, requirements_text, runtime_dir,
                                 wheels_dir)
from tpu_rl.recipes import UserError
from tpu_rl.recipes.driver.runtime import BASE_IMAGE, LockedWheel, driver_lock
from tpu_rl.scripts.pipeline.gke.driver_wheel import build_wheel, package_root, runtime_version

SHA256_METADATA = "sha256"
DOWNLOAD_SECONDS = 60  # per socket operation of one wheel's download (urllib's timeout)


def wheel_url(wheel: LockedWheel, endpoint: str | None) -> str:
    """The wheel's URL, on `endpoint` instead of its host when one is given (TPU_RL_WHEELS_ENDPOINT)."""
    if endpoint is None:
        return wheel.url
    return endpoint.rstrip("/") + urllib.parse.urlsplit(wheel.url).path


def download_wheel(wheel: LockedWheel, endpoint: str | None = None) -> bytes:
    """The wheel's bytes from its URL, refused unless they have the lock's sha256."""
    url = wheel_url(wheel, endpoint)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_SECONDS) as answer:
            data = answer.read()
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise UserError(f"could not download {wheel.file} for the run's driver ({url}): {error}; "
                        "this machine needs to reach PyPI's file host once per driver lock") from error
    if hashlib.sha256(data).hexdigest() != wheel.sha256:
        raise UserError(f"{url} does not have the sha256 recipes/driver/driver_lock.toml pins for {wheel.file}: "
                        "not uploaded; run again, and if it persists the lock needs tools/lock_driver.py")
    return data


class _Uploads:
    """Puts objects under the bucket's driver prefix unless one with the same sha256 is there."""

    def __init__(self, storage, bucket: str) -> None:
        self.storage = storage
        self.bucket = storage.bucket(bucket)
        self.uploaded: list[str] = []

    def present(self, path: str, sha256: str) -> bool:
        blob = self.bucket.get_blob(object_name(path))
        return blob is not None and (blob.metadata or {}).get(SHA256_METADATA) == sha256

    def missing(self, directory: str, files: dict[str, str]) -> list[str]:
        """Which of `files` ({file name: sha256}) `directory` lacks with that sha256: one listing, as
        objects.list returns each object's custom metadata, not one request per file (~80 wheels)."""
        prefix = object_name(directory) + "/"
        there = {blob.name.removeprefix(prefix): (blob.metadata or {}).get(SHA256_METADATA)
                 for blob in self.storage.list_blobs(self.bucket, prefix=prefix)}
        return [name for name, sha256 in files.items() if there.get(name) != sha256]

    def put(self, path: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        blob = self.bucket.blob(object_name(path))
        blob.metadata = {SHA256_METADATA: hashlib.sha256(data).hexdigest()}
        blob.upload_from_string(data, content_type=content_type)
        self.uploaded.append(path)


def stage(storage, bucket: str, wheels: tuple[LockedWheel, ...], *,
          download: Callable[[LockedWheel], bytes] = download_wheel,
          say: Callable[[str], None] = lambda line: None, root=None,
          release: str | None = None) -> tuple[DriverRuntime, list[str]]:
    """Upload what the bucket lacks of this package's driver runtime; (the runtime, the paths uploaded
    under the driver prefix). `root`/`release`: the package files and release (a test's copy)."""
    root = root or package_root()
    version = runtime_version(root, release)
    uploads = _Uploads(storage, bucket)
    absent = set(uploads.missing(wheels_dir(), {wheel.file: wheel.sha256 for wheel in wheels}))
    missing = [wheel for wheel in wheels if wheel.file in absent]
    if missing:
        megabytes = sum(wheel.size for wheel in missing) / 1e6
        say(f"staging the run driver's runtime: {len(missing)} locked wheels ({megabytes:.0f} MB) "
            f"to gs://{bucket}/{object_name(wheels_dir())}/, once")
    for wheel in missing:
        uploads.put(f"{wheels_dir()}/{wheel.file}", download(wheel))
    name, data = build_wheel(root, version)
    package_path = f"{runtime_dir(version)}/{name}"
    package_sha256 = hashlib.sha256(data).hexdigest()
    if not uploads.present(package_path, package_sha256):
        uploads.put(package_path, data)
    requirements = f"{runtime_dir(version)}/requirements.txt"
    text = requirements_text(wheels, package_path, package_sha256).encode()
    requirements_sha256 = hashlib.sha256(text).hexdigest()
    if not uploads.present(requirements, requirements_sha256):
        uploads.put(requirements, text, "text/plain")
    runtime = DriverRuntime(image=BASE_IMAGE, version=version, bucket=bucket, requirements=requirements,
                            requirements_sha256=requirements_sha256)
    return runtime, uploads.uploaded


def stage_driver(session) -> DriverRuntime:
    """The run's driver runtime for this package, uploaded to the recipe's bucket where missing."""
    runtime, _ = stage(session.clients.storage(), session.settings.gcs_bucket, driver_lock(),
                       download=partial(download_wheel, endpoint=session.clients.endpoints.wheels),
                       say=session.console.print)
    return runtime
