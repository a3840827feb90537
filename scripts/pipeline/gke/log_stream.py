"""A container's log read again, or followed to its end (`tpu-rl logs -f`, `run --follow-logs`), from
where the reader is (LogCursor): a stream the API server or the kubelet dropped is reopened until the
container ends; a stream that keeps dropping with no new line ends the follow with one line.

A followed log ends on its own only when the container ends (the kubelet's log follow), so a stream that
ends while the container runs was dropped: a connection that an idle timeout, a proxy or an apiserver
restart closed.

Each read or reopened stream asks for the lines with the kubelet's timestamps from the whole second of the
last line shown on (sinceTime) and skips those shown: the log's own clock, never this machine's. A window
of the seconds elapsed here since the last line came (and a 10 s margin) lost the lines written in between
whenever the reopening came later than that margin (a slow answer, retries, a laptop asleep, whose
monotonic clock stops).
"""

from __future__ import annotations

from typing import Iterator

from kubernetes.client.exceptions import ApiException

from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud.cluster import Cluster, raw_json
from tpu_rl.scripts.cloud.jobsets import container_statuses
from tpu_rl.scripts.cloud.retry import call, failed, is_transient
from tpu_rl.scripts.pipeline.gke.steps import parse_time
from tpu_rl.scripts.pipeline.session import Session

# Reopenings in a row that bring no new line before `logs -f` gives up, each after the retry policy's
# backoff (1, 2, 4, 8, 8 s by default): about half a minute of a log the cluster does not serve.
DROPS_WITHOUT_A_LINE = 5


def _instant(stamp: str) -> str:
    """An RFC 3339 timestamp of the kubelet's (RFC3339Nano, UTC, its fraction's trailing zeros dropped)
    as a string that sorts as the instants do."""
    head, _, fraction = stamp.rstrip("Z").partition(".")
    return f"{head}.{fraction.ljust(9, '0')}"


class LogCursor:
    """Where a reader is in one container's log: the kubelet's time of the last line shown, and how many
    lines of that time were shown (equal timestamps happen). A read begins with `start`."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.same = 0
        self._from: str | None = None  # `last` when the read begun last began
        self._shown_at_from = self._again = 0  # `same` then; how many lines of that time the read brought so far

    def start(self) -> str | None:
        """Begin a read (or a stream): its sinceTime, the whole second of the last line shown (None before
        one). The lines of that second shown already come again; `fresh` skips them."""
        self._from, self._shown_at_from, self._again = self.last, self.same, 0
        return None if self.last is None else f"{self.last[:19]}Z"

    def fresh(self, raw: str) -> str | None:
        """A line of the read begun last, read with timestamps: the line without its time if not shown yet,
        else None. A line without a time is shown whole, never dropped (steps.unstamped)."""
        stamp, _, line = raw.partition(" ")
        if parse_time(stamp) is None:
            return raw
        key = _instant(stamp)
        if self._from is not None and key < self._from:
            return None
        if self._from is not None and key == self._from:
            self._again += 1
            if self._again <= self._shown_at_from:
                return None
        if key == self.last:
            self.same += 1
        else:
            self.last, self.same = key, 1
        return line

    def new_lines(self, text: str) -> list[str]:
        """The lines of a read's timestamped text not shown yet."""
        return [line for line in map(self.fresh, text.splitlines()) if line is not None]

    def read(self, cluster: Cluster, pod: str, container: str) -> list[str]:
        """The container's lines written since the last one shown."""
        since = self.start()
        return self.new_lines(cluster.read_log(pod, container, since_time=since, timestamps=True))


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
    cluster, cursor, drops = session.cluster, LogCursor(), 0
    while True:
        shown = False
        since = cursor.start()
        try:
            for raw in cluster.stream_log(pod, container, since, timestamps=True,
                                          tail_lines=tail if since is None else None):
                line = cursor.fresh(raw)
                if line is not None:
                    shown = True
                    yield line
        except Exception as error:  # a stream broken midway is a drop too; anything else is not
            if not is_transient(error):
                raise
        if _ended(session, pod, container):
            yield from cursor.read(cluster, pod, container)  # what a dropped stream left unread before the end
            return
        drops = 0 if shown else drops + 1
        if drops >= DROPS_WITHOUT_A_LINE:
            raise ApiError(f"the log stream of pod {pod} dropped {drops} times in a row with no new line while "
                           "its container runs: the cluster does not serve its log now; run the command again")
        session.sleep(session.policy.delay(min(drops, 3)))
