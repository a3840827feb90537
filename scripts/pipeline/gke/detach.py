"""Starting a GKE run detached: its driver runs in the cluster and `tpu-rl` returns at once (issue 27):
`run --detach`, and each run of a sweep (through Platform.run(..., detach=True))."""

from __future__ import annotations

from tpu_rl.recipes import Step
from tpu_rl.scripts.pipeline.session import Session


def start_detached(session: Session, steps: tuple[Step, ...], *, replace: bool = False,
                   follow_logs: bool = False) -> None:
    """Hand run `session.paths.run_name` (its `steps`) to its in-cluster driver, created or found (never a
    second one), and return once it exists, with the commands that follow it."""
    from tpu_rl.scripts.pipeline.gke.attach import run_attached

    run_attached(session, steps, replace=replace, follow_logs=follow_logs, detach=True)
