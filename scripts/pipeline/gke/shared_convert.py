"""A conversion's JobSet is shared by every run of the same conversion identity (jobs/k8s.py jobset_name):
which run may delete it, for `cancel` and for the driver that loses sight of it (submit.py)."""

from __future__ import annotations

from tpu_rl.scripts.pipeline.record import run_records
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.words import counted


def _convert_waits_for(record: dict | None, jobset: str) -> bool:
    """Whether a run's record shows it waiting on this conversion JobSet (submitted or reattached by that
    run, and not finished: an interrupted `run` leaves it "running" too)."""
    entry = ((record or {}).get("steps") or {}).get("convert") or {}
    return entry.get("jobset") == jobset and entry.get("status") == "running"

def convert_kept(session: Session, name: str) -> str | None:
    """Why this run may not delete conversion JobSet `name` (None: it may). The conversion is shared by every
    run of the same conversion identity: only a run whose record shows it waiting on it, when no other
    run's record does, deletes it (cancel, and the driver that loses sight of it, submit.py)."""
    run = session.paths.run_name
    records = run_records(session)
    others = sorted(other for other, record in records.items() if other != run and _convert_waits_for(record, name))
    if not _convert_waits_for(records.get(run), name):
        return (f"the conversion is running, but not for run {run} (its run.json does not show it waiting on "
                "it); other runs may share it")
    if others:
        return (f"the conversion is shared, and {counted(len(others), 'run')} ({', '.join(others)}) "
                f"{'waits' if len(others) == 1 else 'wait'} on it too")
    return None
