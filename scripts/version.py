"""The version of this package, as installed: what `tpu-rl --version` prints and the run's driver carries
(jobs/driver.py VERSION_ANNOTATION), so a CLI and a driver of different versions are noticed."""

from __future__ import annotations


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-rl")
    except PackageNotFoundError:  # a checkout run without installing it
        return "unknown"
