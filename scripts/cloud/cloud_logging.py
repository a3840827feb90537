"""Reading a container's lines back from Cloud Logging once its pod is gone (a JobSet's pods are deleted
after their TTL; GKE ships container output there, resource type k8s_container).

The REST method, not a client library: `POST https://logging.googleapis.com/v2/entries:list` with
{resourceNames, filter, orderBy, pageSize, pageToken}, answered with {entries: [LogEntry], nextPageToken}
(Cloud Logging API v2 reference, "Method: entries.list"; pageSize at most 1000). A LogEntry of a container
line has `textPayload` (the line, ending in a newline), `timestamp` (RFC 3339) and `resource` {type:
"k8s_container", labels: {project_id, location, cluster_name, namespace_name, pod_name, container_name}}
(the k8s_container monitored resource). Production authenticates with Application Default Credentials
(google-auth's AuthorizedSession, scope logging.read); TPU_RL_LOGGING_ENDPOINT points it at a local peer
with no credentials, like the other APIs (scripts/cloud/clients.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterator

from tpu_rl.recipes.outcome import ApiError, PermissionRefused

if TYPE_CHECKING:
    import requests

LOGGING_ENDPOINT = "https://logging.googleapis.com"
READ_SCOPE = "https://www.googleapis.com/auth/logging.read"
PAGE_SIZE = 1000  # the API's largest page
MAX_PAGES = 50  # every wait has an end: at most 50,000 entries are read for one question
REQUEST_TIMEOUT_SECONDS = 60


def _quoted(value: str) -> str:
    return json.dumps(value)  # the query language's string literal: double quotes, backslash escapes


def _starts_with(prefix: str) -> str:
    """An RE2 pattern for names starting with `prefix` (a pod name: [a-z0-9.-], only '.' is special)."""
    return "^" + prefix.replace(".", r"\.")


def container_filter(project: str, cluster: str, namespace: str, pod_prefix: str, container: str,
                     texts: tuple[str, ...] = (), since: datetime | None = None) -> str:
    """The Logging query for one container of the pods whose names start with `pod_prefix` (`=~` is the
    query language's RE2 match, anchored with ^: `:` would be a case-insensitive substring "has", so run
    lr2 would also read x-lr2's pods; cloud.google.com/logging/docs/view/logging-query-language,
    "Comparison operators"; a pod name holds [a-z0-9.-], of which only '.' needs escaping; the resource labels are the k8s_container resource's), lines holding
    one of `texts`, from `since` on. entries:list itself has no default time range (the client libraries
    add 24 hours: googleapis/python-logging#73), so without `since` it would search the whole retention."""
    parts = ['resource.type="k8s_container"', f"resource.labels.project_id={_quoted(project)}",
             f"resource.labels.cluster_name={_quoted(cluster)}",
             f"resource.labels.namespace_name={_quoted(namespace)}",
             f"resource.labels.container_name={_quoted(container)}",
             f"resource.labels.pod_name=~{_quoted(_starts_with(pod_prefix))}"]
    if texts:
        parts.append("(" + " OR ".join(f"textPayload:{_quoted(text)}" for text in texts) + ")")
    if since is not None:
        parts.append(f"timestamp>={_quoted(since.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'))}")
    return " AND ".join(parts)


@dataclass
class LoggingReader:
    session: requests.Session  # or google.auth.transport.requests.AuthorizedSession, a subclass
    endpoint: str
    project: str

    def entries(self, query: str) -> Iterator[dict]:
        """Every entry matching `query`, oldest first, page by page (at most MAX_PAGES pages)."""
        body: dict = {"resourceNames": [f"projects/{self.project}"], "filter": query, "orderBy": "timestamp asc",
                      "pageSize": PAGE_SIZE}
        for _ in range(MAX_PAGES):
            try:
                response = self.session.post(f"{self.endpoint.rstrip('/')}/v2/entries:list", json=body,
                                             timeout=REQUEST_TIMEOUT_SECONDS)
            except Exception as error:  # noqa: BLE001 -- connection errors of either session type
                raise ApiError(f"reading Cloud Logging failed: {type(error).__name__}") from None
            if response.status_code != 200:
                refused = PermissionRefused if response.status_code == 403 else ApiError
                raise refused(f"reading Cloud Logging failed: HTTP {response.status_code} {_message(response)}")
            page = response.json()
            yield from page.get("entries") or []
            token = page.get("nextPageToken")
            if not token:
                return
            body["pageToken"] = token

    def lines(self, query: str) -> str:
        """The text of the matching entries, one line each, oldest first."""
        return "".join(entry.get("textPayload", "").rstrip("\n") + "\n" for entry in self.entries(query)
                       if entry.get("textPayload"))


def _message(response) -> str:
    try:
        return str(response.json()["error"]["message"])[:200]
    except Exception:  # noqa: BLE001 -- not a Google error envelope
        return ""


def reader(project: str, endpoint: str | None) -> LoggingReader:
    """Production (endpoint None): ADC with the read scope. A redirected endpoint: no credentials at all."""
    if endpoint:
        import requests

        return LoggingReader(requests.Session(), endpoint, project)
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[READ_SCOPE])
    return LoggingReader(AuthorizedSession(credentials), LOGGING_ENDPOINT, project)
