"""The version this CLI's driver runtime has: a stand-in with the image helper's name (`runtime_version`),
whose module (the wheel built from the package files) replaces it at merge."""

from __future__ import annotations

from pathlib import Path

from scripts.version import package_version


def runtime_version(root: Path | None = None, release: str | None = None) -> str:
    return release or package_version()
