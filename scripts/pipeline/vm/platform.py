"""The TPU VM's implementation of the Platform protocol (scripts/pipeline/platforms.py): the startup script
deployed with the stack runs the steps; `run` checks it and follows its serial console. Each command's
module is imported only when the command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from recipes import UserError
from scripts.pipeline.platforms import Rendered

if TYPE_CHECKING:
    from rich.console import Console

    from recipes import Recipe, Settings, Step
    from scripts.pipeline.session import Session, StatusReport


class VmPlatform:
    name = "vm"

    def runtime(self, recipe: Recipe) -> dict[str, Optional[str]]:
        return {"image": None, "pip": recipe.maxtext.pip}

    def images(self, recipe: Recipe) -> list[str]:
        return []  # the VM installs MaxText with pip

    def render(self, recipe: Recipe, settings: Settings) -> Rendered:
        import jobs

        script = jobs.render_startup_script(recipe, settings)
        return Rendered({"startup.sh": script}, script, "the startup script")

    def check_run_request(self, recipe: Recipe, sets: Iterable[str], run_name: Optional[str]) -> None:
        if sets or run_name is not None:
            raise UserError(f"recipe '{recipe.name}' runs on a TPU VM, whose startup script (deployed with its "
                            "stack) trains the recipe as recipes.toml defines it: --set and --run apply to GKE "
                            "recipes; change rl.overrides in recipes.toml and deploy the stack again")

    def runs_found(self, session: Session) -> Optional[tuple[str, set[str]]]:
        return None  # a VM's runs are the bucket's records

    def step_target(self, settings: Settings) -> str:
        return f"startup script of TPU VM {settings.vm_name}"

    def show_submissions(self, console: Console, recipe: Recipe, settings: Settings, steps: tuple[Step, ...],
                         show_manifests: bool) -> None:
        return None  # the startup script was deployed with the stack: run submits nothing

    def run(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool, dry_run: bool,
            show_manifests: bool, detach: bool = False) -> None:
        if detach and not dry_run:  # until `run` on the VM returns once the startup script runs (issue 27)
            raise UserError(f"run --detach is for GKE recipes for now; on the VM, run `tpu-rl run {session.recipe.name}` "
                            "and press Ctrl-C: its startup script keeps running the steps")
        from scripts.pipeline.vm.run import run_vm

        run_vm(session, steps, follow_logs=follow_logs, dry_run=dry_run)  # nothing to replace, no manifests

    def drive(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool) -> None:
        raise UserError(f"recipe '{session.recipe.name}' runs on a TPU VM, whose startup script is its driver")

    def check_eval(self, recipe: Recipe) -> None:
        raise UserError(f"recipe '{recipe.name}' runs on a TPU VM, whose startup script runs the recipe's "
                        "steps only: tpu-rl eval submits a JobSet, on GKE recipes")

    def evaluate(self, session: Session, step: Optional[int], sets: tuple[str, ...]) -> object:
        self.check_eval(session.recipe)

    def cancel(self, session: Session, step: Optional[Step], yes: bool) -> None:
        from scripts.pipeline.vm.run import cancel_vm

        cancel_vm(session, step, yes)

    def status(self, session: Session) -> StatusReport:
        from scripts.pipeline.vm.views import status_vm

        return status_vm(session)

    def logs(self, session: Session, step: Step, follow: bool, tail: Optional[int]) -> Iterable[str]:
        from scripts.pipeline.vm.views import logs_vm

        return logs_vm(session, step, tail)  # read once: --follow streams on GKE only


PLATFORM = VmPlatform()
