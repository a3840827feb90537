"""Where the run's driver gets its image and this package: a stand-in with the agreed name
(`stage_driver`); the image helper's version (issue 27, "Its image") replaces it."""

from __future__ import annotations

from jobs.driver_runtime import DriverRuntime
from scripts.pipeline.gke.driver_wheel import runtime_version
from scripts.pipeline.session import Session

STAND_IN_IMAGE = "python:3.12-slim"  # not a working driver image: the image helper's module replaces this


def stage_driver(session: Session) -> DriverRuntime:
    return DriverRuntime(image=STAND_IN_IMAGE, version=runtime_version(), bucket=session.settings.gcs_bucket)
