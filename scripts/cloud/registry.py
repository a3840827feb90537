"""Does an image tag exist? One HEAD request to the registry that serves it.

Artifact Registry implements the OCI Distribution Specification, the successor of the Docker Registry
HTTP API V2 (https://cloud.google.com/artifact-registry/docs/reference/docker-api), and takes an OAuth
access token as `Authorization: Bearer <token>` (the curl example there). The spec
(opencontainers/distribution-spec @987425f6, spec.md, endpoint end-3) answers
`HEAD /v2/<name>/manifests/<reference>` with 200 and a Docker-Content-Digest header when the manifest
exists and 404 when it does not; an error's body is `{"errors": [{"code": "MANIFEST_UNKNOWN", ...}]}`
(spec.md, error codes), which a HEAD answer leaves out. Public repositories, such as Google's MaxText
and Pathways images, are meant to answer without credentials; on a 401/403 the user's ADC token is sent.

TPU_RL_REGISTRY_ENDPOINT (clients.py) sends every request to another registry (a test peer); no Google
credential is ever sent there.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

# The manifest media types a tag can point at: OCI index and manifest, Docker manifest list and manifest
# (image-spec media-types.md; distribution's manifest/schema2 and manifestlist). Without them a registry
# may refuse a multi-platform tag.
ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Answer:
    status: int | None  # the HTTP status, None when no answer came
    digest: str = ""  # Docker-Content-Digest of a 200
    error: str = ""  # the registry's error code (MANIFEST_UNKNOWN, DENIED; none in a HEAD answer), or why no
    # answer came


def split_image(image: str) -> tuple[str, str, str]:
    """host, repository and tag of `host/repository:tag` (the recipe model requires a tag)."""
    host, rest = image.split("/", 1)
    repository, tag = rest.rsplit(":", 1)
    return host, repository, tag


def _error_code(body: bytes) -> str:
    try:
        return json.loads(body)["errors"][0]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


def head_manifest(image: str, endpoint: str | None, token: Callable[[], str | None]) -> Answer:
    """HEAD the image's manifest: anonymously first, then (against Google's registry only) with the
    token `token()` gives, when the registry asks for credentials."""
    host, repository, tag = split_image(image)
    url = f"{(endpoint or f'https://{host}').rstrip('/')}/v2/{repository}/manifests/{tag}"
    answer = _head(url, None)
    if answer.status in (401, 403) and endpoint is None:
        bearer = token()
        if bearer:
            answer = _head(url, bearer)
    return answer


def _head(url: str, bearer: str | None) -> Answer:
    headers = {"Accept": ACCEPT}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(url, method="HEAD", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return Answer(response.status, digest=response.headers.get("Docker-Content-Digest", ""))
    except urllib.error.HTTPError as error:
        return Answer(error.code, error=_error_code(error.read() or b""))
    except (urllib.error.URLError, OSError) as error:
        return Answer(None, error=str(getattr(error, "reason", error))[:120])
