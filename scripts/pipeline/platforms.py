"""The seam between the commands and the platforms a recipe runs on: one `Platform` protocol, one
implementation per platform (a package each: scripts/pipeline/gke/, scripts/pipeline/vm/), and the one place
that maps a recipe's `platform` to its implementation. The CLI and the pipeline ask `platform_for(recipe)`
and call it; nothing outside the implementations branches on the platform (tests/test_platform_seam.py).

The route is a lookup of a function that imports the implementation only when a command reaches it, as
SkyPilot's `_route_to_cloud_impl` does (skypilot-org/skypilot, sky/provision/__init__.py): `tpu-rl --help`
imports no platform, and the import is written out, so a tool that reads the code sees it. A new platform
is a package with a `PLATFORM` object and one line in IMPLEMENTATIONS (docs/development.md lists the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Optional, Protocol

from tpu_rl.recipes.platforms import registered

if TYPE_CHECKING:
    from rich.console import Console

    from tpu_rl.recipes import Recipe, Settings, Step
    from tpu_rl.recipes.costs.consent import Spend
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.scripts.pipeline.answers import Idle, Rendered
    from tpu_rl.scripts.pipeline.session import Session, StatusReport
    from tpu_rl.scripts.rundata.progress import TrainProgress



def _gke() -> Platform:
    from tpu_rl.scripts.pipeline.gke.platform import PLATFORM
    return PLATFORM


def _vm() -> Platform:
    from tpu_rl.scripts.pipeline.vm.platform import PLATFORM
    return PLATFORM


# recipes.toml's `platform` -> what imports its PLATFORM (its facts are recipes/platforms/ PLATFORMS')
IMPLEMENTATIONS: dict[str, Callable[[], Platform]] = {"gke": _gke, "vm": _vm}


class Platform(Protocol):
    name: str

    def runtime(self, recipe: Recipe) -> dict[str, Optional[str]]:
        """How the recipe gets MaxText: {"image": ..., "pip": ...}, the other one None."""

    def images(self, recipe: Recipe) -> list[str]:
        """The container images the recipe pulls (preflight checks each exists); [] when it pulls none."""

    def render(self, spec: RunSpec, settings: Settings) -> Rendered:
        """What runs the run: JobSets, or a startup script. Pure (jobs/), no cloud."""

    def check_run_request(self, spec: RunSpec) -> None:
        """Refuse `run` options the platform cannot honour (UserError), before anything is submitted."""

    def runs_found(self, session: Session) -> Optional[tuple[str, set[str]]]:
        """Runs of the recipe the platform itself knows of beyond the bucket's records (where it looked, their
        names), for refusing a mistyped --run; None when it keeps none of its own."""

    def queue(self, session: Session) -> dict[str, int]:
        """The recipe's runs that wait in the platform's queue for their slice, by name, each with its
        place (1: next); {} when the platform queues no runs."""

    def sweep_overhead(self, session: Session, minutes: list[int]) -> tuple[float, str]:
        """What a sweep whose runs last `minutes` each, one after another, costs beyond its runs' own price
        (GKE: the system nodes its drivers make the autoscaler add, read from the cluster), and the line
        that says it; (0.0, "") where a sweep adds nothing."""

    def step_target(self, settings: Settings) -> str:
        """What runs a step, for a plan made without the cloud ("JobSet", the VM's startup script)."""

    def show_submissions(self, console: Console, spec: RunSpec, settings: Settings, steps: tuple[Step, ...],
                         show_manifests: bool) -> None:
        """Print what `run` would submit for `steps` (a plan made without the cloud); nothing when it submits
        nothing of its own."""

    def run(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool, dry_run: bool,
            show_manifests: bool, detach: bool = False) -> None:
        """`tpu-rl run`: start the run's driver (GKE: a Job in the cluster; VM: its startup script), which
        plans, submits, follows and verifies each step, and follow it until it ends; `detach`: start (or
        find) it and return at once with the commands that follow the run (a dry run prints the plan only)."""

    def drive(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool) -> None:
        """`tpu-rl drive` (hidden), what the run's driver runs: the pipeline itself, with no terminal."""

    def unfollowed_end(self, session: Session, run: str) -> Optional[tuple[str, Optional[str]]]:
        """How a run whose record still says running (or that its `run` was interrupted) ended with nobody
        following it ("succeeded" or "failed", and when), from the platform's own records; None when they say
        nothing more."""

    def recorded_steps(self, session: Session, run: str) -> dict[str, str]:
        """Each step's state by the platform's own records, where something other than `run` runs the steps and
        records them (the VM's startup script: its progress markers, failure record and cancel marker), in the
        words `status` shows; {} where the run record is those records (GKE: `run` and its driver write it)."""

    def steps_left_running(self, session: Session, run: str) -> list[str]:
        """The run's steps that still run or queue on the platform while what takes the run from step to step
        (GKE: its driver) has ended; [] when it runs, or the platform has no such thing."""

    def live_train_step(self, session: Session, run: str) -> Optional[TrainProgress]:
        """The trainer's last step in the run's live log while its train step runs (scripts/pipeline/run_state.py
        says when screens use it); None while it does not run or has logged no step yet."""

    def check_eval(self, recipe: Recipe) -> None:
        """Refuse `tpu-rl eval` before any cloud is asked when the platform cannot evaluate."""

    def eval_spend(self, recipe: Recipe, run: str, yes: bool, max_cost: Optional[float]) -> Spend:
        """The most `tpu-rl eval` of run `run` can bill, weighed by the rule `run` and `sweep` follow
        (recipes/costs/consent.py), before any cloud is asked."""

    def evaluate(self, session: Session, step: Optional[int], sets: tuple[str, ...]) -> object:
        """`tpu-rl eval`: score a saved checkpoint of the session's run on the held-out set."""

    def cancel(self, session: Session, step: Optional[Step], yes: bool) -> None:
        """`tpu-rl cancel`: stop the run (outputs are kept), after a yes unless `yes`."""

    def status(self, session: Session) -> StatusReport:
        """`tpu-rl status`: each step's state, time and verified output."""

    def logs(self, session: Session, step: Step, follow: bool, tail: Optional[int]) -> Iterable[str]:
        """`tpu-rl logs`: the step's main log, the last `tail` lines (None: all)."""

    def idle(self, session: Session) -> Optional[Idle]:
        """`tpu-rl runs`: what the recipe's stack still bills when no run of it is active or queued, or None
        when the platform has nothing to add (its own commands say it)."""

    def down(self, session: Session, yes: bool) -> None:
        """`tpu-rl down`: stop what the recipe's stack bills, keeping the bucket, after a yes unless `yes`."""


def platform_for(recipe: Recipe) -> Platform:
    """The implementation of the recipe's platform (KeyError naming IMPLEMENTATIONS for one not registered)."""
    return registered(IMPLEMENTATIONS, recipe.platform, "IMPLEMENTATIONS of scripts/pipeline/platforms.py")()
