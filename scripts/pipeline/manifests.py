"""Rendered JobSets as one text: what `render --out -` prints and `run --dry-run` shows. Imports only jobs, so
the offline `render` stays free of the cloud clients."""

from __future__ import annotations

from typing import Iterable
from tpu_rl.jobs import manifest_yaml


def manifest_stream(manifests: Iterable[dict]) -> str:
    """JobSets (and the run's ConfigMap) as one multi-document YAML stream, each document after a `---`
    line: what `kubectl apply -f -` reads."""
    return "".join(f"---\n{manifest_yaml(manifest)}" for manifest in manifests)
