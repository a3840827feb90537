"""What the run's driver container runs: its image and how it gets this package (issue 27).

A stand-in with the names and shapes the image helper's module has (`DriverRuntime`, `driver_container`,
`driver_volumes`, `driver_pod_annotations`, `driver_drift`): that module replaces this one at merge.
Here the container runs `tpu-rl` from its image as is. Pure, like the rest of jobs/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.k8s import container_security
from recipes.conventions import DRIVER_CPU_MILLI, DRIVER_MEMORY_MIB

DRIVER_CONTAINER = "driver"
# On the driver's pod template: the runtime it runs, read by a CLI that attaches (driver_drift).
DRIVER_VERSION_ANNOTATION = "tpu-rl/driver-version"


@dataclass(frozen=True)
class DriverRuntime:
    image: str
    version: str  # the tpu-rl package version the container runs
    bucket: str = ""  # where the real runtime's files are (unused here)
    requirements: str = ""


def driver_container(runtime: DriverRuntime, args: list[str]) -> dict[str, Any]:
    """The driver's container: `tpu-rl ARGS` in the image."""
    return {"name": DRIVER_CONTAINER, "image": runtime.image, "command": ["tpu-rl"], "args": list(args),
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],  # its lines reach its log as printed
            "resources": {"requests": {"cpu": f"{DRIVER_CPU_MILLI}m", "memory": f"{DRIVER_MEMORY_MIB}Mi"},
                          "limits": {"memory": f"{DRIVER_MEMORY_MIB}Mi"}},
            "securityContext": container_security()}


def driver_volumes(runtime: DriverRuntime) -> list[dict[str, Any]]:
    """Volumes the container needs to install the package (none in this stand-in)."""
    return []


def driver_pod_annotations(runtime: DriverRuntime) -> dict[str, str]:
    return {DRIVER_VERSION_ANNOTATION: runtime.version}


def driver_drift(cli_version: str, driver_version: str | None) -> str | None:
    """One line when the run's driver runs another version than this CLI, else None."""
    if driver_version == cli_version:
        return None
    return (f"this run's driver runs tpu-rl {driver_version or '(unknown)'}, this CLI {cli_version}: the run "
            "goes on with the driver's code")
