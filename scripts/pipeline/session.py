"""What both pipeline runners share: the Session of one command, the steps a user may name, checking a
step's output, and the rows `tpu-rl status` shows.

Everything that talks to a cloud comes in through a Session, so tests swap endpoints, sleeps and the
console without patching.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable

from rich.console import Console

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe, Settings, Step, UserError
from tpu_rl.recipes.costs.consent import Spend
from tpu_rl.recipes.costs.run import ESTIMATE_NOTE, costly_run_warning, pipeline_run_estimate
from tpu_rl.recipes.costs.standing import account, idle_bill
from tpu_rl.recipes.outcome import OutputMissing, RetryPolicy
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.usual_values import has_unusual
from tpu_rl.recipes.settings.tuning import MAINTENANCE_GRACE
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.cloud.clients import Clients
from tpu_rl.scripts.cloud.cluster import Cluster
from tpu_rl.scripts.field_diff import changed_fields


# How long `run` waits for a TPU VM that maintenance stopped to come back (scripts/pipeline/vm/checks.py),
# unless TPU_RL_MAINTENANCE_GRACE_SECONDS says otherwise (recipes/settings/tuning.py).
MAINTENANCE_GRACE_SECONDS = MAINTENANCE_GRACE.default


@dataclass
class Session:
    spec: RunSpec  # the run this command asks for (recipes/runs/spec.py)
    settings: Settings
    clients: Clients
    console: Console = field(default_factory=Console)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    poll_interval: float = 15.0
    maintenance_grace: float = MAINTENANCE_GRACE_SECONDS
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    confirm: Callable[[str], bool] | None = None  # interactive yes/no; None = not interactive
    driven: bool = False  # the run's driver in the cluster runs this (tpu-rl drive): no logging role
    argv: list[str] | None = None  # the command line run.json records; None: this process's (sys.argv)
    # What a new run is estimated at, asked about once where it is first submitted (recipes/costs/consent.py);
    # None where nothing is asked: a dry run, the driver, a sweep's run (the sweep asked for all of them).
    spend: Spend | None = None
    spend_ask: Callable[[str], bool] | None = None  # the terminal's question when `spend` is set
    # What was decided about that spend (Spend.record, with when): run.json keeps the first one it is given;
    # the GKE driver gets it in its request from the `run` that asked, a sweep's run from its sweep.
    consent: dict | None = None

    def __post_init__(self) -> None:
        self.paths = ArtifactPaths(self.spec, self.settings)
        self._cluster: Cluster | None = None

    @property
    def recipe(self) -> Recipe:
        """The catalog recipe as this run trains it."""
        return self.spec.recipe

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            cluster = Cluster(self.clients.kube(), self.settings, self.policy,
                              say=lambda line: self.console.print(line, markup=False, highlight=False),
                              in_cluster=self.clients.in_cluster)
            cluster.check_ready()
            self._cluster = cluster
        return self._cluster

    def missing(self, step: Step, finished: bool = False) -> list[gcs.Requirement]:
        """What the bucket lacks of the step's output; `finished`: the step's JobSet succeeded."""
        return gcs.missing_outputs(self.clients.storage(), self.paths, step, finished)

    def output_state(self, step: Step, finished: bool = False) -> str:
        """The `status` table's output column: verified, NO_OUTPUT when none of it exists (a step that never
        started, or still runs), else what is missing of it; `finished`: the step's JobSet succeeded."""
        missing = self.missing(step, finished)
        # Each requirement reports at least one missing piece when none of it exists (train's newest finished
        # checkpoint reports one whatever its number), so as many pieces as requirements is "nothing yet".
        if len(missing) >= len(gcs.step_outputs(self.paths, step, finished)):
            return NO_OUTPUT
        return f"missing: {describe_missing(missing)}" if missing else "verified"

    def report_done(self, steps: tuple[Step, ...], billing: Callable[[], list[str]] | None = None) -> None:
        self.console.print(f"[green]done[/]: {', '.join(steps)} verified in gs://{self.settings.gcs_bucket} "
                           f"(run {self.paths.run_name})")
        for line in self.next_steps(steps, billing):
            self.console.print(line)

    def next_steps(self, steps: tuple[Step, ...], billing: Callable[[], list[str]] | None = None) -> list[str]:
        """What to do after a run: fetch the export, look at the curves, and what the stack still bills until
        it is destroyed (recipes/costs/standing.py account); `billing`: the platform's own last lines instead
        (a TPU VM that stops itself after its run, or stays up)."""
        recipe, paths, run = self.recipe, self.paths, self.paths.run_name
        lines = ["next:"]
        if "export" in steps:
            # the URL alone takes most of 80 columns: the command goes on three lines, which a paste runs as one
            lines += ["  download the Hugging Face model with", "    `gcloud storage cp -r \\",
                      f"      {paths.hf_export} \\", f"      ./{run}`"]
        if set(steps) - {"convert"}:
            lines.append(f"  its curves: `tpu-rl metrics {recipe.name} --run {run} --png {run}.png`")
        if billing is not None:  # the platform's own lines: what its stack bills now this run is done
            return lines + [f"  {line}" for line in billing()]
        # what still bills once it is done, in the words `runs`, `down`, `recipes` and the README use
        return lines + [f"  {line}" for line in account(idle_bill(recipe), recipe)]

    def command(self, verb: str, *args: str) -> str:
        """A `tpu-rl` command line for this run, in backquotes: with the run's --set items and --run name,
        so that it reaches the same run. A run with --rewards/--data-processor files: `run` names the files
        again (they are checked and mounted anew); the other commands take no files and name the run."""
        sets = [f"--set {shlex.quote(item)}" for item in self.spec.sets]
        files = self.spec.user_files
        run = [f"--run {self.spec.run}"] if self.spec.run else []
        if verb == "run" and has_unusual(self.recipe.maxtext_version, self.spec.sets):
            sets.append("--unusual-values")
        if files and verb == "run":
            sets += [f"--{file.kind} {shlex.quote(file.option)}" for file in files]
        elif files and not run:
            run = [f"--run {self.paths.run_name}"]
        return f"`{' '.join(['tpu-rl', verb, self.recipe.name, *args, *sets, *run])}`"

    def logs_hint(self, step: Step) -> str:
        return self.command("logs", step)

    def cancel_confirmed(self, yes: bool, action: str, kept: str) -> bool:
        """Whether cancel may go on and `action` ("delete JobSet(s) …"): --yes, or a yes at the prompt. No
        terminal to ask in refuses (exit 2); a no prints that nothing was cancelled."""
        if yes:
            return True
        if self.confirm is None:
            raise UserError(f"cancel would {action}: rerun with --yes to confirm (there is no terminal to ask in)")
        if self.confirm(f"{action[0].upper()}{action[1:]} ({kept})?"):
            return True
        self.console.print("nothing was cancelled")
        return False


def dry_run_costs(spec: RunSpec, running: Iterable[Step], attached: Iterable[Step] = ()) -> tuple[dict[Step, str], str]:
    """What a dry run shows of the steps it would run: each one's expected time and cost (`; about 180
    min, $269.04`, "up to" for a step already running), and the lines of their total, of what the train
    step's time assumes, and of a run that costs several times the recipe's own; from recipes/costs/run.py."""
    estimate, running, attached = pipeline_run_estimate(spec), list(running), set(attached)
    each = {step: f"; {'up to ' if step in attached else ''}{estimate.step(step).summary()}" for step in running}
    if not running:
        return each, "expected: nothing to run"
    lines = [f"expected: {estimate.steps_summary(running)} ({ESTIMATE_NOTE})"]
    lines += [f"assumed: {estimate.train.assumption}"] if "train" in running else []
    return each, "\n".join(lines + [line for line in [costly_run_warning(spec)] if line])


def hms(seconds: float) -> str:
    """A duration as h:mm:ss (never negative)."""
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


MAX_FIELDS_SHOWN = 3


def differing_fields(old: object, new: object, limit: int = MAX_FIELDS_SHOWN) -> str:
    """What differs between two JSON values, as `path: old → new` (dotted paths; scripts and argument lists
    by their key=value arguments), at most `limit` of them and how many more; "" when nothing does."""
    changes = changed_fields(old, new)
    shown = "; ".join(f"{path}: {' '.join(text.split())}" for path, text, _ in changes[:limit])  # one line
    return shown + (f"; and {len(changes) - limit} more" if len(changes) > limit else "")


def describe_missing(missing: Iterable[gcs.Requirement]) -> str:
    return ", ".join(req.describe() for req in missing)


def verify_output(session: Session, step: Step, steps: tuple[Step, ...]) -> None:
    """Check the output of a step that reported success; for train, say so when it stopped below the
    computed step (and go on: export converts the step it reached)."""
    missing = session.missing(step, finished=True)
    if missing:
        following = steps[steps.index(step) + 1:]
        stopped = f"; {following[0]} was not started" if following else ""
        raise OutputMissing(f"{step} reported success but its output is missing: {describe_missing(missing)}"
                            f"{stopped}. Check {session.logs_hint(step)}")
    session.console.print(f"[green]✓[/] {step}: output verified")
    if step == "train":
        reached = gcs.latest_checkpoint_step(session.clients.storage(), session.paths)
        if reached is not None and reached < session.recipe.last_step:
            session.console.print(short_training_line(reached, session.recipe.last_step))


# Why train_rl stops below num_batches x num_iterations x train_fraction x num_epoch (the evidence is in
# scripts/cloud/gcs.py, TrainedCheckpoint). train_rl filters long prompts and then slices the first
# num_batches x batch_size rows (MaxText 0.2.4 trainers/post_train/rl/train_rl.py ~364-376), but grain's
# filter keeps its parent's length and yields None for a dropped row (grain 0.2.18
# _src/python/dataset/transformations/filter.py, FilterMapDataset), so the slice counts dropped rows.
SHORT_TRAINING_CAUSE = ("likely prompts longer than max_prefill_predict_length: train_rl drops them from "
                        "its num_batches x batch_size rows and trains on the rest, and an incomplete last batch")


def short_training_line(reached: int, computed: int) -> str:
    """One line: training stopped `computed - reached` steps below the computed step, why, and what export
    converts instead."""
    fewer = computed - reached
    return (f"[yellow]![/] train: stopped at step {reached}, {fewer} step{'s' if fewer != 1 else ''} below the "
            f"computed {computed} ({SHORT_TRAINING_CAUSE}); export converts step {reached}")


def export_checkpoint(session: Session) -> tuple[int | None, str]:
    """The checkpoint step export converts, and why (for run.json): the newest finished training step, once
    training finished; None while it has not."""
    if session.missing("train"):
        return None, "training has not finished"
    reached = gcs.latest_checkpoint_step(session.clients.storage(), session.paths)
    computed = session.recipe.last_step
    why = f"the newest checkpoint under {session.paths.actor_checkpoints} with orbax's commit marker"
    if reached is not None and reached < computed:
        why += f"; training stopped {computed - reached} below the computed {computed} ({SHORT_TRAINING_CAUSE})"
    else:
        why += ": the computed last step"
    return reached, why


NO_OUTPUT = "none yet"  # the status of a step's output when none of it exists


def queued(place: int) -> str:
    """A run's, or its waiting step's, place in the platform's queue (Platform.queue; 1: next), in the words
    of every screen (scripts/pipeline/run_state.py decides when; `down` names a waiting JobSet by it)."""
    return f"queued #{place}"


@dataclass(frozen=True)
class StepStatus:
    step: Step
    state: str  # JobSet phase (with its reason unless it succeeded), or the VM's progress for the step
    pods: str  # "ready/expected ready" while a JobSet runs, "done" once it finished, "" when not applicable
    time: str  # "h:mm:ss elapsed" while running, "took h:mm:ss" once finished, "" when unknown
    output: str  # verified | missing: ...
    capacity: str = ""  # the capacity mode the step's TPU pods were placed on (spot, ...), "" when none
    progress: str = ""  # while train runs: its step, loss and reward as `run` shows them, "" when unknown


@dataclass(frozen=True)
class StatusReport:
    where: str  # what runs the steps, e.g. "JobSets qwen3-v6e32-<step>" or "TPU VM rl-vm (RUNNING)"
    rows: list[StepStatus]
    note: str = ""  # a line under the table, e.g. that the VM does not exist
    driver: str = ""  # GKE: the run's driver in one line (running, finished, failed, none), and any drift
    ending: str = ""  # the run's ending when it was cancelled or failed (scripts/pipeline/run_state.py ending_line)
