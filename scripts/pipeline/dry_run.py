"""`tpu-rl run --dry-run`: the plan and its price. Compared with what is deployed when that can be read
(each step's output, JobSets, the VM); priced from the recipe and the settings alone when it cannot: no
Google credentials, no bucket, cluster or VM yet, or an API that does not answer. A plan and a price
need no cloud; the line that says why it was not compared names how to connect."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import STEPS, Step
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud.foreign import foreign_outcome
from tpu_rl.scripts.pipeline.platforms import platform_for

if TYPE_CHECKING:
    from rich.console import Console

    from tpu_rl.recipes import Settings
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.scripts.pipeline.session import Session


# A dry run with no settings at all (recipes/settings/load.py EXAMPLE_NOTICE says the same of synth): its plan
# and price are the recipe's under the embedded example settings, never compared with a cloud.
EXAMPLE_NOTICE = ("{why}, so the dry run prices with the embedded example (PROJECT={project}): export your own "
                  "(README, step 1) to run")
EXAMPLE_REASON = "the example settings reach no cloud"


def dry_run(spec: RunSpec, settings: Settings, make_session: Callable[[], Session], console: Console,
            steps: tuple[Step, ...], *, replace: bool, show_manifests: bool) -> None:
    try:
        session = make_session()
        platform_for(spec.recipe).run(session, steps, replace=replace, follow_logs=False, dry_run=True,
                                 show_manifests=show_manifests)
        return
    except (NotDeployed, ApiError) as error:
        reason = str(error)
    except Exception as error:  # a cloud library's own: unreachable, refused, timed out
        ending = foreign_outcome(error)
        if ending is None:
            raise
        reason = str(ending)
    offline_plan(spec, settings, console, steps, reason, show_manifests)


def offline_plan(spec: RunSpec, settings: Settings, console: Console, steps: tuple[Step, ...], reason: str,
                 show_manifests: bool = False) -> None:
    """Every step of `steps` as if none had run yet, with its time and cost, and what it would submit."""
    from rich.markup import escape

    from tpu_rl.scripts.pipeline.session import dry_run_costs

    console.print(f"dry run of run {ArtifactPaths(spec, settings).run_name}: nothing is submitted or written")
    console.print(escape(f"not compared with what is deployed ({reason}): each step is priced as if it runs"))
    costs, total = dry_run_costs(spec, steps)
    platform = platform_for(spec.recipe)
    where = platform.step_target(settings)
    for step in STEPS:
        if step in steps:
            console.print(f"  {step}: {where}{costs[step]}")
    console.print(total)
    platform.show_submissions(console, spec, settings, steps, show_manifests)
