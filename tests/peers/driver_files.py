"""The bucket as an earlier `tpu-rl run` left it for the run's driver: every wheel of the committed lock
(recipes/driver/driver_lock.toml) already staged, so a test's `run` stages only this package's own runtime and
downloads nothing. Each object carries the lock's sha256 as staging records it
(scripts/pipeline/gke/driver_image.py); its bytes are a stand-in, which only the driver's pod would
install (and its `pip --require-hashes` would refuse).

The objects go straight into the emulator's store, built by the emulator's own multipart-upload code
(its object resource and checksums): ~80 uploads over HTTP cost a third of a second of CPU in every
test that starts from such a bucket. test_driver_image.py checks that an object put here reads back as
one uploaded through the storage client does.
"""

from __future__ import annotations

from tpu_rl.jobs.driver_runtime import object_name, wheels_dir
from tpu_rl.recipes.driver.runtime import driver_lock
from tpu_rl.scripts.pipeline.gke.driver_image import SHA256_METADATA
from peers.gcs_emulator import put_object


def seed_locked_wheels(emulator, bucket: str) -> int:
    """Put a stand-in of each locked wheel in `bucket` of the emulator (server, url); how many."""
    wheels = driver_lock()
    for wheel in wheels:
        name = object_name(f"{wheels_dir()}/{wheel.file}")
        put_object(emulator, bucket, name, f"stand-in for {wheel.file}".encode(), {SHA256_METADATA: wheel.sha256})
    return len(wheels)
