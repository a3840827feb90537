"""Kueue's queue of our runs: which Workloads of the stack's LocalQueue hold quota, which wait, in the order
Kueue admits them, and whether a waiting one waits behind one of ours (a sweep's runs on one slice's
quota) or for capacity. The ClusterQueue is the stack's own (infra/kueue_queues.py, no cohort), so only
our own workloads hold its quota. Kueue's message and order: docs/provenance.md#kueues-queue-of-our-runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tpu_rl.jobs.k8s import RUN_LABEL, recipe_selector
from tpu_rl.recipes.conventions import LOCAL_QUEUE, TPU_RESOURCE
from tpu_rl.scripts.cloud.kueue import workload_state
from tpu_rl.scripts.pipeline.gke.steps import parse_time

INSUFFICIENT_QUOTA = "insufficient unused quota"  # quota held by others, not quota lacking (fitsResourceQuota)


def _conditions(workload: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def ours(workloads: list[dict]) -> list[dict]:
    """The workloads of the stack's LocalQueue (spec.queueName), which feeds our ClusterQueue."""
    return [wl for wl in workloads if (wl.get("spec") or {}).get("queueName") == LOCAL_QUEUE]


def asks_tpu(workload: dict) -> bool:
    """Whether the workload waits for TPU quota (a train) rather than the CPU pool's (convert, export):
    the two queue for different flavors, so each is ranked only among its kind."""
    return any(TPU_RESOURCE in ((container.get("resources") or {}).get("limits") or {})
               for pod_set in (workload.get("spec") or {}).get("podSets") or []
               for container in ((pod_set.get("template") or {}).get("spec") or {}).get("containers") or [])


def holders(workloads: list[dict]) -> list[dict]:
    """Ours that hold quota now: reserved, not finished, not deactivated."""
    return [wl for wl in ours(workloads) if workload_state(wl).phase in ("checking", "admitted")]


def _queue_timestamp(workload: dict) -> str:
    evicted = _conditions(workload).get("Evicted") or {}
    if evicted.get("status") == "True" and evicted.get("reason") == "AdmissionCheck":
        return evicted.get("lastTransitionTime", "")
    return (workload.get("metadata") or {}).get("creationTimestamp", "")


def pending_in_order(workloads: list[dict]) -> list[dict]:
    """Ours that wait for quota (queued, or evicted and requeued), in the order Kueue admits them."""
    waiting = [wl for wl in ours(workloads) if workload_state(wl).phase in ("queued", "evicted")]
    return sorted(waiting, key=lambda wl: (-int((wl.get("spec") or {}).get("priority") or 0), _queue_timestamp(wl),
                                           (wl.get("metadata") or {}).get("uid", "")))


def owner_jobset(workload: dict) -> str:
    """The JobSet a workload was made for (its controller owner)."""
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return next((ref.get("name", "") for ref in refs if ref.get("kind") == "JobSet"), "")


@dataclass(frozen=True)
class QueuePlace:
    position: int  # 1: admitted next
    waiting: int  # how many of ours wait in all
    ahead_of: tuple[str, ...]  # the JobSets holding the quota it waits for


def _in_the_queue(workload: dict, now: datetime | None) -> bool:
    """Queued, or evicted and back in the queue: an evicted workload keeps Evicted True until its quota is
    reserved again (kueue v0.17.1 pkg/workload/workload.go SetQuotaReservation), so one requeued (no
    requeueAt still ahead) and pending for quota waits like a queued one."""
    state = workload_state(workload)
    if state.phase == "queued":
        return True
    quota = _conditions(workload).get("QuotaReserved") or {}
    requeue_at = parse_time(state.requeue_at) if state.requeue_at else None
    return (state.phase == "evicted" and quota.get("status") == "False" and quota.get("reason") == "Pending"
            and (requeue_at is None or now is None or requeue_at <= now))


def behind_our_own(workload: dict | None, workloads: list[dict], now: datetime | None = None) -> QueuePlace | None:
    """Where a pending workload stands when it waits for quota another of our workloads holds; None when
    it waits for anything else (capacity, an admission check, quota no workload of ours holds, a retry's
    backoff until a requeueAt after `now`)."""
    if workload is None or not _in_the_queue(workload, now):
        return None
    message = (_conditions(workload).get("QuotaReserved") or {}).get("message", "")
    uid = (workload.get("metadata") or {}).get("uid")
    kind = asks_tpu(workload)
    holding = [wl for wl in holders(workloads) if (wl.get("metadata") or {}).get("uid") != uid and asks_tpu(wl) == kind]
    if INSUFFICIENT_QUOTA not in message or not holding:
        return None
    order = [(wl.get("metadata") or {}).get("uid") for wl in pending_in_order(workloads) if asks_tpu(wl) == kind]
    position = order.index(uid) + 1 if uid in order else len(order) + 1
    return QueuePlace(position, max(len(order), position), tuple(sorted(filter(None, map(owner_jobset, holding)))))


def positions(workloads: list[dict]) -> dict[str, int]:
    """Each waiting JobSet's place in the queue (1: admitted next) among those waiting for the same kind of
    quota (asks_tpu), by JobSet name."""
    waiting = pending_in_order(workloads)
    return {owner_jobset(wl): number for kind in (True, False)
            for number, wl in enumerate((wl for wl in waiting if asks_tpu(wl) == kind), 1)}


def run_positions(session) -> dict[str, int]:
    """Each run of the recipe whose JobSet waits in the queue, by run name (its RUN_LABEL), with the
    JobSet's place; a run with several waiting (not the case: its steps go in turn) keeps the first."""
    cluster = session.cluster
    runs = {obj["metadata"]["name"]: (obj["metadata"].get("labels") or {}).get(RUN_LABEL)
            for obj in cluster.list_jobsets(recipe_selector(session.recipe))}
    found: dict[str, int] = {}
    for jobset, place in positions(cluster.list_workloads()).items():
        run = runs.get(jobset)
        if run:
            found.setdefault(run, place)
    return found
