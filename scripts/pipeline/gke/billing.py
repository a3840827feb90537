"""What a GKE recipe's cluster still bills once nothing of it runs: the runs of the recipe that are active
or queued (a JobSet running or waiting for Kueue, a driver Job not finished), and, when there are none,
the stack's hourly bill from the pools' live nodes (recipes/costs/standing.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tpu_rl.jobs.k8s import RUN_LABEL, recipe_selector
from tpu_rl.recipes.costs.standing import StandingCost, standing_cost
from tpu_rl.scripts.cloud.jobsets import jobset_state
from tpu_rl.scripts.pipeline.gke.cancel import ACTIVE
from tpu_rl.scripts.pipeline.answers import ActiveRun, Idle
from tpu_rl.scripts.pipeline.session import Session, queued


def _finished(job: dict) -> bool:
    """A batch/v1 Job that ended: its Complete or Failed condition is True (k8s.io/api batch/v1
    JobConditionType: "Complete", "Failed")."""
    return any(condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True"
               for condition in (job.get("status") or {}).get("conditions") or [])


def active_runs(session: Session) -> list[ActiveRun]:
    """The recipe's runs that the cluster still works on or queues: a JobSet of it running or waiting for
    Kueue, or a driver Job of it (a batch/v1 Job in conventions.NAMESPACE labelled with jobs/k8s.py
    run_labels) that has not finished."""
    from tpu_rl.scripts.pipeline.gke.queue import positions

    cluster, selector = session.cluster, recipe_selector(session.recipe)
    jobsets = cluster.list_jobsets(selector)
    # A waiting JobSet's place, as `runs` and `status` show it (scripts/pipeline/run_state.py), not `suspended`.
    places = (positions(cluster.list_workloads())
              if any(jobset_state(obj).phase == "suspended" for obj in jobsets) else {})
    found = []
    for obj in jobsets:
        phase, name = jobset_state(obj).phase, obj["metadata"]["name"]
        if phase in ACTIVE:
            labels = obj["metadata"].get("labels") or {}
            shown = queued(places[name]) if phase == "suspended" and name in places else phase
            found.append(ActiveRun(labels.get(RUN_LABEL), f"JobSet {name} {shown}"))
    for job in cluster.list_jobs(selector):
        if not _finished(job):
            labels = job["metadata"].get("labels") or {}
            found.append(ActiveRun(labels.get(RUN_LABEL), f"driver Job {job['metadata']['name']}"))
    return found


# How long a `running` run.json with nothing of its run on the cluster still means a `run` follows it.
# Such a `run` writes run.json as each step ends, at each capacity change and as it submits the next step
# (scripts/pipeline/record.py, gke/submit.py, gke/capacity.py); between the two it only verifies outputs
# and finds export's checkpoint in the bucket, seconds to a few minutes. 15 minutes is several times that.
ATTACHED_FRESH = timedelta(minutes=15)


@dataclass(frozen=True)
class AttachedRun:
    run: str
    age: timedelta  # since its run.json was last written (the object's `updated`, the bucket's clock)


def attached_runs(session: Session) -> list[AttachedRun]:
    """The recipe's runs whose run.json says `running` (what `tpu-rl runs` lists), with the age of each."""
    from google.api_core import exceptions as gexc

    from tpu_rl.jobs.paths import RUN_RECORD, split_gs_url
    from tpu_rl.recipes.outcome import ApiError
    from tpu_rl.scripts.pipeline.record import run_records

    storage, recipe = session.clients.storage(), session.recipe.name
    bucket, prefix = split_gs_url(session.paths.trained)
    found = []
    for name, record in run_records(session).items():
        if not record or record.get("status") != "running" or record.get("recipe") not in (None, recipe):
            continue
        try:
            blob = storage.bucket(bucket).get_blob(f"{prefix}{name}/{RUN_RECORD}")
        except gexc.GoogleAPIError as error:
            raise ApiError(f"reading the run record of {name} failed: {error}") from None
        updated: datetime | None = blob.updated if blob else None
        if updated:
            found.append(AttachedRun(name, max(session.now() - updated, timedelta(0))))
    return sorted(found, key=lambda run: run.age)


def cluster_bill(session: Session) -> StandingCost:
    """What the stack bills per hour now, from the labels of the cluster's nodes."""
    nodes = session.cluster.list_nodes()
    return standing_cost(session.recipe, [(node.get("metadata") or {}).get("labels") or {} for node in nodes])


def idle(session: Session) -> Idle:
    active = tuple(active_runs(session))
    return Idle(active, None if active else cluster_bill(session), f"on cluster {session.settings.cluster_name}")
