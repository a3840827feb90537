"""What a GKE recipe's cluster still bills once nothing of it runs: the runs of the recipe that are active
or queued (a JobSet running or waiting for Kueue, a driver Job not finished), and, when there are none,
the stack's hourly bill from the pools' live nodes (recipes/standing_cost.py)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.k8s import RECIPE_LABEL, RUN_LABEL
from recipes.cost import ESTIMATE_NOTE
from recipes.prices import usd
from recipes.standing_cost import StandingCost, standing_cost
from scripts.cloud.kube_objects import jobset_state
from scripts.pipeline.gke.cancel import ACTIVE
from scripts.pipeline.session import Session


@dataclass(frozen=True)
class ActiveRun:
    run: str | None  # None: a conversion, which runs of the same conversion share (no run label)
    what: str  # e.g. "JobSet qwen3-v6e32-abc-train running", "driver Job tpu-rl-driver-abc"


def _finished(job: dict) -> bool:
    """A batch/v1 Job that ended: its Complete or Failed condition is True (k8s.io/api batch/v1
    JobConditionType: "Complete", "Failed")."""
    return any(condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True"
               for condition in (job.get("status") or {}).get("conditions") or [])


def active_runs(session: Session) -> list[ActiveRun]:
    """The recipe's runs that the cluster still works on or queues: a JobSet of it running or waiting for
    Kueue, or a driver Job of it (a batch/v1 Job labelled with the recipe) that has not finished."""
    cluster, selector = session.cluster, f"{RECIPE_LABEL}={session.recipe.name}"
    found = []
    for obj in cluster.list_jobsets(selector):
        phase = jobset_state(obj).phase
        if phase in ACTIVE:
            labels = obj["metadata"].get("labels") or {}
            found.append(ActiveRun(labels.get(RUN_LABEL), f"JobSet {obj['metadata']['name']} {phase}"))
    for job in cluster.list_jobs(selector):
        if not _finished(job):
            labels = job["metadata"].get("labels") or {}
            found.append(ActiveRun(labels.get(RUN_LABEL), f"driver Job {job['metadata']['name']}"))
    return found


def cluster_bill(session: Session) -> StandingCost:
    """What the stack bills per hour now, from the labels of the cluster's nodes."""
    nodes = session.cluster.list_nodes()
    return standing_cost(session.recipe, [(node.get("metadata") or {}).get("labels") or {} for node in nodes])


@dataclass(frozen=True)
class Idle:
    """`tpu-rl runs` on a recipe whose cluster has no run: what it still bills (None while a run is there)."""

    active: tuple[ActiveRun, ...]
    bill: StandingCost | None

    def lines(self, recipe: str, cluster: str, bucket: str) -> list[str]:
        if self.bill is None:
            return []
        return [f"no run of {recipe} is active or queued; cluster {cluster} still bills {usd(self.bill.total)}/h "
                f"({ESTIMATE_NOTE}): {self.bill.summary()}",
                f"`tpu-rl down {recipe}` destroys its stack, keeping gs://{bucket}"]

    def as_record(self) -> dict:
        return {"active": [{"run": run.run, "what": run.what} for run in self.active],
                "idle_bill": self.bill.as_record() if self.bill else None}


def idle(session: Session) -> Idle:
    active = tuple(active_runs(session))
    return Idle(active, None if active else cluster_bill(session))
