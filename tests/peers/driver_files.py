"""The bucket as an earlier `tpu-rl run` left it for the run's driver: every wheel of the committed lock
(recipes/driver/driver_lock.toml) already staged, so a test's `run` stages only this package's own runtime and
downloads nothing. Each object carries the lock's sha256 as staging records it
(scripts/pipeline/gke/driver_image.py); its bytes are a stand-in, which only the driver's pod would
install (and its `pip --require-hashes` would refuse)."""

from __future__ import annotations

from tpu_rl.jobs.driver_runtime import object_name, wheels_dir
from tpu_rl.recipes.driver.runtime import driver_lock
from tpu_rl.scripts.pipeline.gke.driver_image import SHA256_METADATA


def seed_locked_wheels(client, bucket: str) -> int:
    """Put a stand-in of each locked wheel in `bucket`; how many."""
    wheels = driver_lock()
    for wheel in wheels:
        blob = client.bucket(bucket).blob(object_name(f"{wheels_dir()}/{wheel.file}"))
        blob.metadata = {SHA256_METADATA: wheel.sha256}
        blob.upload_from_string(f"stand-in for {wheel.file}".encode())
    return len(wheels)
