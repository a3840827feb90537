"""What each step must leave in GCS before the next may start, checked against the bucket.

The paths come from jobs.paths.ArtifactPaths, the same object the manifests are rendered from.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from google.api_core import exceptions as gexc

from jobs.paths import ArtifactPaths, split_gs_url
from scripts.outcome import ApiError


@dataclass(frozen=True)
class Requirement:
    """Something that must exist under a prefix: any object, or one whose name matches a pattern."""

    prefix: str  # gs://bucket/dir/
    pattern: str | None = None  # e.g. "config.json", "*.safetensors"; None = any object

    def describe(self) -> str:
        return f"{self.prefix}{self.pattern}" if self.pattern else f"objects under {self.prefix}"


def step_outputs(paths: ArtifactPaths, step: str) -> tuple[Requirement, ...]:
    if step == "convert":
        return (Requirement(paths.converted_items),)
    if step == "train":
        return (Requirement(paths.final_params),)
    if step == "export":
        return (Requirement(paths.hf_export, "config.json"), Requirement(paths.hf_export, "*.safetensors"))
    raise ValueError(step)


def _satisfied(storage, requirement: Requirement) -> bool:
    bucket, prefix = split_gs_url(requirement.prefix)
    if requirement.pattern is None:
        return any(True for _ in storage.list_blobs(bucket, prefix=prefix, max_results=1))
    if "*" not in requirement.pattern:
        return storage.bucket(bucket).blob(prefix + requirement.pattern).exists()
    return any(fnmatch.fnmatch(blob.name[len(prefix):], requirement.pattern)
               for blob in storage.list_blobs(bucket, prefix=prefix, delimiter="/"))


def missing_outputs(storage, paths: ArtifactPaths, step: str) -> list[Requirement]:
    """The requirements of `step` that the bucket does not meet (empty: the output is verified)."""
    try:
        return [req for req in step_outputs(paths, step) if not _satisfied(storage, req)]
    except gexc.NotFound:  # no bucket: nothing is there
        return list(step_outputs(paths, step))
    except gexc.GoogleAPIError as error:
        raise ApiError(f"checking {step} output in gs://{paths.bucket} failed: {error}") from None


def object_names(storage, prefix_url: str) -> list[str]:
    """Names of the objects under a prefix, relative to it (progress markers)."""
    bucket, prefix = split_gs_url(prefix_url)
    return [blob.name[len(prefix):] for blob in storage.list_blobs(bucket, prefix=prefix)]
