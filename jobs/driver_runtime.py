"""What the run's driver container runs: its image and how it gets this package (issue 27).

A stand-in with the agreed names (`DriverRuntime`, `driver_container`, `driver_volumes`): the image
helper's version replaces it. Pure, like the rest of jobs/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DRIVER_CONTAINER = "driver"


@dataclass(frozen=True)
class DriverRuntime:
    image: str  # pinned by digest in the real one
    version: str  # the tpu-rl package version the container runs


def driver_container(runtime: DriverRuntime, args: list[str]) -> dict[str, Any]:
    """The driver's container: `tpu-rl ARGS` in the image (resources and env are added by jobs/driver.py)."""
    return {"name": DRIVER_CONTAINER, "image": runtime.image, "command": ["tpu-rl", *args]}


def driver_volumes(runtime: DriverRuntime) -> list[dict[str, Any]]:
    """Volumes the container needs to install the package (none in this stand-in)."""
    return []
