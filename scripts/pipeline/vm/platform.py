"""The TPU VM's implementation of the Platform protocol (scripts/pipeline/platforms.py): the startup script
deployed with the stack runs the steps; `run` checks it and follows its serial console. Each command's
module is imported only when the command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NoReturn, Optional

from tpu_rl.recipes import UserError
from tpu_rl.scripts.pipeline.answers import Idle, Rendered

if TYPE_CHECKING:
    from rich.console import Console

    from tpu_rl.recipes import Recipe, Settings, Step
    from tpu_rl.recipes.costs.consent import Spend
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.scripts.pipeline.session import Session, StatusReport
    from tpu_rl.scripts.rundata.progress import TrainProgress


class VmPlatform:
    name = "vm"

    def runtime(self, recipe: Recipe) -> dict[str, Optional[str]]:
        return {"image": None, "pip": recipe.maxtext.pip}

    def images(self, recipe: Recipe) -> list[str]:
        return []  # the VM installs MaxText with pip

    def render(self, spec: RunSpec, settings: Settings) -> Rendered:
        from tpu_rl import jobs

        script = jobs.render_startup_script(spec, settings)
        return Rendered({"startup.sh": script}, script, "the startup script")

    def check_run_request(self, spec: RunSpec) -> None:
        if spec.sets or spec.run is not None:
            raise UserError(f"recipe '{spec.recipe.name}' runs on a TPU VM, whose startup script (deployed with its "
                            "stack) trains the recipe as recipes.toml defines it: --set and --run apply to GKE "
                            "recipes; change rl.overrides in recipes.toml and deploy the stack again")

    def runs_found(self, session: Session) -> Optional[tuple[str, set[str]]]:
        return None  # a VM's runs are the bucket's records

    def queue(self, session: Session) -> dict[str, int]:
        return {}  # one VM runs one run: nothing queues

    def sweep_overhead(self, session: Session, minutes: list[int]) -> tuple[float, str]:
        return 0.0, ""  # a VM recipe is not swept (recipes/runs/sweeps.py check_sweepable)

    def step_target(self, settings: Settings) -> str:
        return f"startup script of TPU VM {settings.vm_name}"

    def show_submissions(self, console: Console, spec: RunSpec, settings: Settings, steps: tuple[Step, ...],
                         show_manifests: bool) -> None:
        # the startup script was deployed with the stack: run submits nothing; what the VM does after it
        from tpu_rl.scripts.pipeline.vm.after_run import after_run_line

        console.print(after_run_line(_Plan(spec.recipe, settings)))

    def run(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool, dry_run: bool,
            show_manifests: bool, detach: bool = False) -> None:
        from tpu_rl.scripts.pipeline.vm.run import run_vm

        # nothing to replace, no manifests; --detach: the startup script is the run's driver
        run_vm(session, steps, follow_logs=follow_logs, dry_run=dry_run, detach=detach)

    def drive(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool) -> None:
        raise UserError(f"recipe '{session.recipe.name}' runs on a TPU VM, whose startup script is its driver")

    def recorded_steps(self, session: Session, run: str) -> dict[str, str]:
        from tpu_rl.scripts.pipeline.vm.views import recorded_steps

        return recorded_steps(session, run)

    def steps_left_running(self, session: Session, run: str) -> list[str]:
        return []  # the VM's startup script runs every step itself: no driver to end before them

    def unfollowed_end(self, session: Session, run: str) -> Optional[tuple[str, Optional[str]]]:
        from tpu_rl.scripts.pipeline.vm.views import unfollowed_end

        return unfollowed_end(session, run)

    def live_train_step(self, session: Session, run: str) -> Optional[TrainProgress]:
        from tpu_rl.scripts.pipeline.vm.views import live_train_step

        return live_train_step(session, run)

    def check_eval(self, recipe: Recipe) -> NoReturn:
        raise UserError(f"recipe '{recipe.name}' runs on a TPU VM, whose startup script runs the recipe's "
                        "steps only: tpu-rl eval submits a JobSet, on GKE recipes")

    def eval_spend(self, recipe: Recipe, run: str, yes: bool, max_cost: Optional[float]) -> Spend:
        self.check_eval(recipe)  # refused, as evaluate is: nothing to weigh

    def evaluate(self, session: Session, step: Optional[int], sets: tuple[str, ...]) -> object:
        self.check_eval(session.recipe)

    def cancel(self, session: Session, step: Optional[Step], yes: bool) -> None:
        from tpu_rl.scripts.pipeline.vm.run import cancel_vm

        cancel_vm(session, step, yes)

    def status(self, session: Session) -> StatusReport:
        from tpu_rl.scripts.pipeline.vm.views import status_vm

        return status_vm(session)

    def logs(self, session: Session, step: Step, follow: bool, tail: Optional[int]) -> Iterable[str]:
        from tpu_rl.scripts.pipeline.vm.views import logs_vm

        return logs_vm(session, step, tail)  # read once: --follow streams on GKE only

    def idle(self, session: Session) -> Idle:
        from tpu_rl.scripts.pipeline.vm.views import vm_idle

        return vm_idle(session)

    def down(self, session: Session, yes: bool) -> None:
        from rich.markup import escape

        from tpu_rl.recipes.costs.standing import stop_command
        from tpu_rl.scripts.pipeline.vm.after_run import standing_account

        recipe = session.recipe
        # what still bills and what the destroy stops, in the words `run`, `recipes` and the README use
        for line in standing_account(session):
            session.console.print(escape(line))
        raise UserError(f"recipe '{recipe.name}' runs on a TPU VM: tpu-rl down stops a GKE recipe's cluster; the "
                        f"VM and its network go with {stop_command(recipe)} (the bucket is kept)")


class _Plan:
    """What after_run_line reads of a session, for a plan made without the cloud."""

    def __init__(self, recipe: Recipe, settings: Settings) -> None:
        self.recipe, self.settings = recipe, settings


PLATFORM = VmPlatform()
