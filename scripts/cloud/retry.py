"""Retrying Kubernetes API calls: what is safe to repeat is repeated, with backoff and a limit.

Safe: any read (get, list, logs), and any request the server answered 429 (it did nothing). Not safe:
a create or delete that timed out or got a 5xx, because it may have happened; callers of those pass
``idempotent=False`` and resolve the ambiguity themselves (see kube.create_jobset).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from scripts.outcome import ApiError, describe

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 30.0
    request_timeout: float = 30.0  # seconds per request (connect and read)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after and retry_after.isdigit():
            return min(float(retry_after), self.max_delay)
        return min(self.base_delay * 2**attempt, self.max_delay)

    def wait(self, attempt: int, error: BaseException | None = None) -> None:
        """Sleep before the next attempt; a throttling server's Retry-After wins over the backoff."""
        headers = getattr(error, "headers", None) or {}
        self.sleep(self.delay(attempt, headers.get("Retry-After")))


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in RETRYABLE_STATUS or error.status == 0
    return isinstance(error, _TRANSPORT_ERRORS)


def was_rejected(error: BaseException) -> bool:
    """True when the server certainly did nothing (throttled), so even a create may be repeated."""
    return isinstance(error, ApiException) and error.status == 429


def call(policy: RetryPolicy, what: str, fn: Callable[[], T], *, idempotent: bool = True,
         on_retry: Callable[[int, BaseException], None] | None = None) -> T:
    """Run fn, retrying transient failures; raise ApiError naming `what` when the limit is reached."""
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as error:
            if not is_transient(error) or not (idempotent or was_rejected(error)):
                raise
            if attempt == policy.attempts - 1:
                raise ApiError(f"{what} failed {policy.attempts} times, last with {describe(error)}") from None
            if on_retry:
                on_retry(attempt, error)
            policy.wait(attempt, error)
    raise AssertionError("unreachable")
