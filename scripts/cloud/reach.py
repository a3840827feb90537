"""The first contact with an endpoint a command needs (the bucket, the cluster's API server, Compute Engine
for a TPU VM): said on stderr when it is slow, and given up after a bound, exit 4, naming the endpoint.

Without a bound, an endpoint that refuses or never answers kept a command silent for as long as its
library's retries last (google-cloud-storage's DEFAULT_RETRY: 120 s; six Kubernetes attempts with
backoff and a 30 s request timeout each). A person cannot tell that from a slow answer, so the line
comes after ANNOUNCE_AFTER_SECONDS and the wait ends after REACH_ENV's seconds (RetryPolicy.reach_seconds,
recipes/settings/tuning.py).
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from tpu_rl.recipes.outcome import ApiError
from tpu_rl.recipes.settings.tuning import REACH

REACH_ENV = REACH.env  # how long the first contact with an endpoint may take (a tuning setting)
ANNOUNCE_AFTER_SECONDS = 2.0
# A test knob: tests that compare a command's whole output set it high, so a loaded machine's slow answer
# does not add the line to what they compare.
ANNOUNCE_ENV = "TPU_RL_REACH_NOTICE_SECONDS"
NETWORK_FIX = "check the network"

T = TypeVar("T")


class Unreachable(ApiError):
    """An endpoint did not answer within the bound (exit 4, like any cloud API that kept failing)."""

    def __init__(self, what: str, endpoint: str, seconds: float, cause: str, fix: str, *,
                 wait_longer: bool = True) -> None:  # False where the caller cannot set REACH_ENV (a pod)
        tail = f", or set {REACH_ENV} to wait longer" if wait_longer else ""
        super().__init__(f"cannot reach {what} at {endpoint} within {seconds:g} s ({cause}): {fix}{tail}")


@contextmanager
def reaching(what: str, endpoint: str, seconds: float) -> Iterator[None]:
    """Say on stderr what is tried, and for how long, once it has taken ANNOUNCE_AFTER_SECONDS."""
    line = f"reaching {what} at {endpoint} (up to {seconds:g} s, {REACH_ENV})…"
    try:
        after = float(os.environ.get(ANNOUNCE_ENV, ANNOUNCE_AFTER_SECONDS))
    except ValueError:
        after = ANNOUNCE_AFTER_SECONDS
    timer = threading.Timer(after, lambda: print(line, file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def call_within(what: str, endpoint: str, seconds: float, call: Callable[[float], T], fix: str = NETWORK_FIX) -> T:
    """`call(timeout)`, one request to a Google REST client (Compute, Secret Manager), said after
    ANNOUNCE_AFTER_SECONDS and ended after `seconds`: those clients have no bound of their own (Compute)
    or a 60 s one (Secret Manager), and their errors name no endpoint. The API's own answers (NotFound,
    PermissionDenied) pass through for the caller to explain."""
    import requests
    from google.api_core import exceptions as gexc

    from tpu_rl.scripts.cloud.foreign import describe

    try:
        with reaching(what, endpoint, seconds):
            return call(seconds)
    except (requests.RequestException, gexc.RetryError, gexc.DeadlineExceeded) as error:
        raise Unreachable(what, endpoint, seconds, describe(error), fix) from None
