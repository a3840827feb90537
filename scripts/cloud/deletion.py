"""Deleting an object with its pods as the API server reads it, and the bounded wait until they are gone.

Every DeleteOption goes in the request's body: the API server decodes DeleteOptions from the body when
there is one and reads the query only when the body is empty (kubernetes/apiserver handlers/delete.go,
DeleteResource), so an option left in the query beside a body is silently dropped. Foreground
propagation keeps the object, marked with its deletionTimestamp, until the garbage collector has removed
its dependents, the pods included (docs/provenance.md#foreground-deletion-and-its-wait).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from tpu_rl.recipes.outcome import ApiError

FOREGROUND = "Foreground"
# A pod without terminationGracePeriodSeconds gets the API's default (k8s.io/api core/v1
# DefaultTerminationGracePeriodSeconds); the API server fills it in on every pod it stores.
DEFAULT_POD_GRACE_SECONDS = 30
# After the last pod's grace period: the kubelet's report that it stopped, then the garbage collector's
# passes over the Jobs and the owner (processDeletingDependentsItem).
COLLECT_SECONDS = 60.0


def foreground(uid: str | None = None) -> dict:
    """The DeleteOptions body of a foreground delete; with `uid`, only the object of that UID (the API
    server answers 409 Conflict for another: preconditions.uid)."""
    return {"propagationPolicy": FOREGROUND, **({"preconditions": {"uid": uid}} if uid else {})}


def pod_grace_seconds(pod_specs: Iterable[dict]) -> int:
    """The longest termination grace period of these pod specs (the default where one sets none)."""
    return max((int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS)) for spec in pod_specs),
               default=DEFAULT_POD_GRACE_SECONDS)


def jobset_pod_specs(jobset: dict) -> list[dict]:
    """The pod specs of a JobSet's replicated jobs (none for a Status: the object went at once)."""
    return [((rj.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
            for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []]


def job_pod_specs(job: dict) -> list[dict]:
    """The pod spec of a batch/v1 Job (none for a Status)."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec")
    return [template] if template is not None else []


class Gone:
    """The wait until a deleted object and its pods are gone: their grace period, then COLLECT_SECONDS."""

    def __init__(self, what: str, grace: int, say: Callable[[str], None] | None = None) -> None:
        self.what, self.grace, self.say = what, grace, say
        self.seconds = grace + COLLECT_SECONDS

    @property
    def waits_for(self) -> str:
        return (f"its pods' {self.grace} s grace period, then {COLLECT_SECONDS:g} s for the kubelet and the "
                "garbage collector")

    def wait(self, gone: Callable[[], bool], pause: Callable[[int], None]) -> None:
        """Poll `gone` (pausing with `pause(attempt)`) until it holds; an ApiError past the bound."""
        deadline = time.monotonic() + self.seconds
        attempt = 0
        while not gone():
            if attempt == 0 and self.say:
                self.say(f"waiting up to {self.seconds:g} s for {self.what} and its pods to go ({self.waits_for})")
            if time.monotonic() > deadline:
                raise ApiError(f"{self.what} is still being deleted after {self.seconds:g} s ({self.waits_for}); "
                               "wait a minute and run again")
            pause(attempt)
            attempt += 1
