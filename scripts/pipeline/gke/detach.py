"""Starting a GKE run detached: its driver runs in the cluster and `tpu-rl` returns at once (issue 27).

TODO(driver branch): the in-cluster driver (a batch/v1 Job `tpu-rl-driver-<run>` running `tpu-rl drive`,
jobs/driver.py) is built on the `driver` branch. Until it is merged, `start_detached` starts nothing and
says so; after the merge it creates (or finds) the run's driver Job, as `run --detach` does, and passes
the run's sweep name (session.recipe.sweep) on so that the driver's run.json records it.
"""

from __future__ import annotations

from recipes import Step
from scripts.outcome import Outcome
from scripts.pipeline.session import Session


class DetachUnavailable(Outcome):
    """A detached start was asked for and this build has no in-cluster driver to hand the run to."""


def start_detached(session: Session, steps: tuple[Step, ...]) -> None:
    """Hand run `session.paths.run_name` (its `steps`) to its in-cluster driver and return at once."""
    raise DetachUnavailable(
        f"run {session.paths.run_name} was not started: a detached run needs the in-cluster driver, which this "
        f"build of tpu-rl lacks; start it attached with {session.command('run', '--steps', ','.join(steps))}")
