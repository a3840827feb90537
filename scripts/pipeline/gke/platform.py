"""GKE's implementation of the Platform protocol (scripts/pipeline/platforms.py): one JobSet per step, each
command in its own module of this package, imported only when the command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from tpu_rl.scripts.pipeline.answers import Rendered

if TYPE_CHECKING:
    from rich.console import Console

    from tpu_rl.recipes import Recipe, Settings, Step
    from tpu_rl.recipes.costs.consent import Spend
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.scripts.pipeline.answers import Idle
    from tpu_rl.scripts.pipeline.session import Session, StatusReport
    from tpu_rl.scripts.rundata.progress import TrainProgress


class GkePlatform:
    name = "gke"

    def runtime(self, recipe: Recipe) -> dict[str, Optional[str]]:
        return {"image": recipe.maxtext.image, "pip": None}

    def images(self, recipe: Recipe) -> list[str]:
        """The MaxText image, and Pathways' server and proxy with it."""
        images = [recipe.maxtext.image]
        if recipe.pathways:
            images += [recipe.pathways_images.server, recipe.pathways_images.proxy]
        return images

    def render(self, spec: RunSpec, settings: Settings) -> Rendered:
        from tpu_rl import jobs
        from tpu_rl.scripts.pipeline.manifests import manifest_stream

        manifests = {f"{step}.yaml": manifest for step, manifest in jobs.render_manifests(spec, settings).items()}
        what = ", ".join(name.removesuffix(".yaml") for name in manifests)
        configmap = jobs.user_files_configmap(jobs.ArtifactPaths(spec, settings))
        if configmap:  # first, as `run` creates it before the train JobSet that mounts it
            manifests = {"user-files.yaml": configmap, **manifests}
            what += f" and ConfigMap {configmap['metadata']['name']}"
        return Rendered({name: jobs.manifest_yaml(manifest) for name, manifest in manifests.items()},
                        manifest_stream(manifests.values()), what)

    def check_run_request(self, spec: RunSpec) -> None:
        return None  # --set and --run name a run of their own

    def runs_found(self, session: Session) -> Optional[tuple[str, set[str]]]:
        from tpu_rl.jobs.k8s import RUN_LABEL, recipe_selector

        jobsets = session.cluster.list_jobsets(recipe_selector(session.recipe))
        return "the cluster's JobSets", set(filter(None, ((obj["metadata"].get("labels") or {}).get(RUN_LABEL)
                                                          for obj in jobsets)))

    def queue(self, session: Session) -> dict[str, int]:
        from tpu_rl.scripts.pipeline.gke.queue import run_positions

        return run_positions(session)

    def sweep_overhead(self, session: Session, minutes: list[int]) -> tuple[float, str]:
        from tpu_rl.scripts.pipeline.gke.system_room import read_room, sweep_nodes

        return sweep_nodes(read_room(session), minutes)

    def step_target(self, settings: Settings) -> str:
        return "JobSet"

    def show_submissions(self, console: Console, spec: RunSpec, settings: Settings, steps: tuple[Step, ...],
                         show_manifests: bool) -> None:
        from tpu_rl.scripts.pipeline.gke.plan import show_submitted
        from tpu_rl.scripts.pipeline.gke.steps import step_jobs

        from tpu_rl.recipes.costs.run import driver_cost_line

        console.print(driver_cost_line())  # the driver, which `run` starts first
        show_submitted(console, [job for step, job in step_jobs(spec, settings).items() if step in steps],
                       show_manifests)

    def run(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool, dry_run: bool,
            show_manifests: bool, detach: bool = False) -> None:
        """The run's driver in the cluster runs the pipeline (drive); this starts or finds it and follows it."""
        if detach and not dry_run:
            from tpu_rl.scripts.pipeline.gke.detach import start_detached

            start_detached(session, steps, replace=replace, follow_logs=follow_logs)
            return
        if dry_run:  # the plan, and what the driver costs
            from tpu_rl.scripts.pipeline.gke.submit import run_gke

            run_gke(session, steps, replace=replace, follow_logs=follow_logs, dry_run=True,
                    show_manifests=show_manifests)
            return
        from tpu_rl.scripts.pipeline.gke.attach import run_attached

        run_attached(session, steps, replace=replace, follow_logs=follow_logs, detach=False)

    def drive(self, session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool) -> None:
        from tpu_rl.scripts.pipeline.gke.submit import run_gke

        run_gke(session, steps, replace=replace, follow_logs=follow_logs, driven=True)

    def unfollowed_end(self, session: Session, run: str) -> Optional[tuple[str, Optional[str]]]:
        from tpu_rl.scripts.pipeline.gke.status import unfollowed_end

        return unfollowed_end(session, run)

    def recorded_steps(self, session: Session, run: str) -> dict[str, str]:
        return {}  # `run` and the run's driver write each step's state into run.json: the record says it

    def steps_left_running(self, session: Session, run: str) -> list[str]:
        from tpu_rl.scripts.pipeline.gke.driver import steps_left_running

        return steps_left_running(session, run)

    def live_train_step(self, session: Session, run: str) -> Optional[TrainProgress]:
        from tpu_rl.scripts.pipeline.gke.status import live_train_step

        return live_train_step(session, run)

    def check_eval(self, recipe: Recipe) -> None:
        return None

    def eval_spend(self, recipe: Recipe, run: str, yes: bool, max_cost: Optional[float]) -> Spend:
        from tpu_rl.scripts.pipeline.gke.eval_cost import eval_spend

        return eval_spend(recipe, run, yes, max_cost)

    def evaluate(self, session: Session, step: Optional[int], sets: tuple[str, ...]) -> object:
        from tpu_rl.scripts.pipeline.gke.evaluate import eval_gke

        return eval_gke(session, step, sets)

    def cancel(self, session: Session, step: Optional[Step], yes: bool) -> None:
        from tpu_rl.scripts.pipeline.gke.cancel import cancel_gke

        cancel_gke(session, step, yes)

    def status(self, session: Session) -> StatusReport:
        from tpu_rl.scripts.pipeline.gke.status import status_gke

        return status_gke(session)

    def logs(self, session: Session, step: Step, follow: bool, tail: Optional[int]) -> Iterable[str]:
        from tpu_rl.scripts.pipeline.gke.status import logs_gke

        return logs_gke(session, step, follow, tail)

    def idle(self, session: Session) -> Optional[Idle]:
        from tpu_rl.scripts.pipeline.gke.billing import idle

        return idle(session)

    def down(self, session: Session, yes: bool) -> None:
        from tpu_rl.scripts.pipeline.gke.down import down_gke

        down_gke(session, yes)


PLATFORM = GkePlatform()
