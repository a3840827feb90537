"""Retrying Kubernetes API calls: what is safe to repeat is repeated, with backoff and a limit.

Safe: any read (get, list, logs), and any request the server answered 429 (it did nothing). Not safe:
a create or delete that timed out or got a 5xx, because it may have happened; callers of those pass
``idempotent=False`` and resolve the ambiguity themselves (see kube.create_jobset).
"""

from __future__ import annotations

from typing import Callable, TypeVar

import tenacity
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from tpu_rl.recipes.outcome import THROTTLED, ApiError, RetryPolicy, refused_for_good, transient_status
from tpu_rl.scripts.cloud.foreign import describe

T = TypeVar("T")

_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)


class RetriesExhausted(ApiError):
    """A repeatable failure that kept happening until the policy's last attempt."""


def is_transient(error: BaseException) -> bool:
    """The Kubernetes client's error, by its status (recipes/outcome.py), or a transport's own."""
    if isinstance(error, ApiException):
        return transient_status(error.status)
    return isinstance(error, _TRANSPORT_ERRORS)


def rejected_for_good(error: BaseException) -> bool:
    """The server refused the request itself (recipes/outcome.py refused_for_good): refused again."""
    return isinstance(error, ApiException) and refused_for_good(error.status)


def failed(what: str, error: ApiException, detail: str = "") -> ApiError:
    """The ApiError of a request the API answered with an error: transient unless it was rejected for good."""
    return ApiError(f"{what} failed with {describe(error)}{detail}", transient=not rejected_for_good(error))


def was_rejected(error: BaseException) -> bool:
    """True when the server certainly did nothing (throttled), so even a create may be repeated."""
    return isinstance(error, ApiException) and error.status == THROTTLED


def _backoff(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    def wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome and state.outcome.failed else None
        headers = getattr(error, "headers", None) or {}
        step = state.attempt_number - 1
        return policy.delay(step, headers.get("Retry-After"))
    return wait


def call(policy: RetryPolicy, what: str, fn: Callable[[], T], *, idempotent: bool = True,
         within: float | None = None) -> T:
    """Run fn, retrying transient failures (tenacity); raise RetriesExhausted naming `what` at the limit.
    `within`: no try starts, nor backoff sleeps, past that many seconds from the first."""
    def repeatable(error: BaseException) -> bool:
        return is_transient(error) and (idempotent or was_rejected(error))

    stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(policy.attempts)
    if within is not None:
        stop = stop | tenacity.stop_before_delay(within)
    retrying = tenacity.Retrying(stop=stop, wait=_backoff(policy),
                                 retry=tenacity.retry_if_exception(repeatable), sleep=policy.sleep, reraise=True)
    try:
        return retrying(fn)
    except Exception as error:
        if repeatable(error):
            times = f"{policy.attempts} times" if within is None else f"for {within:g} s"
            raise RetriesExhausted(f"{what} failed {times}, last with {describe(error)}") from None
        raise
