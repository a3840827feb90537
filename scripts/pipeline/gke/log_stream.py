"""Following a container's log to its end (`tpu-rl logs -f`, `run --follow-logs`): a stream the API
server or the kubelet dropped is reopened, a little before the last line seen and without repeating it
(the kubelet's timestamps), until the container ends; a stream that keeps dropping with no new line ends
the follow with one line.

A followed log ends on its own only when the container ends (the kubelet's log follow), so a stream that
ends while the container runs was dropped: a connection that an idle timeout, a proxy or an apiserver
restart closed.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Iterator

from kubernetes.client.exceptions import ApiException

from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud.cluster import raw_json
from tpu_rl.scripts.cloud.jobsets import container_statuses
from tpu_rl.scripts.cloud.retry import call, failed, is_transient
from tpu_rl.scripts.pipeline.gke.steps import unstamped
from tpu_rl.scripts.pipeline.session import Session

# Reopenings in a row that bring no new line before `logs -f` gives up, each after the retry policy's
# backoff (1, 2, 4, 8, 8 s by default): about half a minute of a log the cluster does not serve.
DROPS_WITHOUT_A_LINE = 5
# sinceSeconds counts back from the kubelet's clock, which this machine's need not agree with: a reopened
# stream starts this much before the time elapsed here since the last line came, which covers the lines
# still on their way when the stream dropped (those seen are skipped by their timestamps).
REOPEN_MARGIN_SECONDS = 10


class SeenUpTo:
    """The kubelet's time of the last line shown, and when it came here: what a reopened stream may skip,
    and how far back it starts."""

    def __init__(self) -> None:
        self.last: datetime | None = None
        self.came: float | None = None

    def since(self) -> int | None:
        """The sinceSeconds of a reopened stream: the seconds elapsed here since the last line came, and the
        margin. Not this machine's clock less the line's timestamp: a clock behind the node's by more than
        the margin gave a value below 1, which the API server refuses (ValidatePodLogOptions), and lost lines
        when behind by less."""
        if self.came is None:
            return None
        return math.ceil(time.monotonic() - self.came) + REOPEN_MARGIN_SECONDS

    def fresh(self, raw: str) -> str | None:
        """A timestamped line not shown yet (without its time), or None."""
        stamp, line = unstamped(raw)
        if stamp is not None and self.last is not None and stamp <= self.last:
            return None
        if stamp is not None:
            self.last, self.came = stamp, time.monotonic()
        return line


def _ended(session: Session, pod: str, container: str) -> bool:
    """Whether the container has ended: terminated, its pod finished, or the pod gone."""
    cluster = session.cluster
    try:
        response = call(cluster.policy, f"reading pod {pod}", lambda: cluster.core.read_namespaced_pod(
            pod, cluster.namespace, _request_timeout=cluster._timeout, _preload_content=False))
    except ApiException as error:
        if error.status == 404:
            return True
        raise failed(f"reading pod {pod}", error) from None
    found = raw_json(response)
    if (found.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    return any(c.get("name") == container and "terminated" in (c.get("state") or {})
               for c in container_statuses(found))


def follow(session: Session, pod: str, container: str, tail: int | None) -> Iterator[str]:
    """The container's log from its last `tail` lines on, as it grows, until the container ends."""
    cluster, seen, drops = session.cluster, SeenUpTo(), 0
    while True:
        shown = False
        since = seen.since()
        try:
            for raw in cluster.stream_log(pod, container, since, timestamps=True,
                                          tail_lines=tail if seen.last is None else None):
                line = seen.fresh(raw)
                if line is not None:
                    shown = True
                    yield line
        except Exception as error:  # a stream broken midway is a drop too; anything else is not
            if not is_transient(error):
                raise
        if _ended(session, pod, container):
            for raw in cluster.read_log(pod, container, since_seconds=seen.since(),
                                        timestamps=True).splitlines():
                line = seen.fresh(raw)  # what a dropped stream left unread before the end
                if line is not None:
                    yield line
            return
        drops = 0 if shown else drops + 1
        if drops >= DROPS_WITHOUT_A_LINE:
            raise ApiError(f"the log stream of pod {pod} dropped {drops} times in a row with no new line while "
                           "its container runs: the cluster does not serve its log now; run the command again")
        session.sleep(session.policy.delay(min(drops, 3)))
