"""`tpu-rl runs`: the runs of a recipe found in the bucket, each from its record (run.json) and its
TensorBoard event files, both under `<model>/trained/<run>/`.

The record says when the run started and ended, and how each step went where `run` ran them (on the VM, its
startup script's own records say it, as `status` reads them); the event files give the last mean
reward (`rewards/train/mean`). A run's ending, its steps' states and its train step are decided where
`status` decides them (scripts/pipeline/run_state.py): the step is the live log's while train runs, else
the last `actor/train/loss` point. Only the event files are downloaded, never the checkpoints beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tpu_rl.jobs.paths import RUN_RECORD
from tpu_rl.recipes import STEPS, UserError
from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.costs.run import hourly_estimate
from tpu_rl.scripts.cloud.foreign import foreign_outcome
from tpu_rl.scripts.pipeline.record import run_records
from tpu_rl.scripts.pipeline.run_state import (NO_RECORD, LiveSteps, left_running_line, recorded_states, run_outcome,
                                               still_running, train_progress, utc)
from tpu_rl.scripts.pipeline.session import Session, hms, queued
from tpu_rl.scripts.rundata.evaluation import accuracy_change, after_training, eval_set_name, resumed_first
from tpu_rl.scripts.rundata.events import latest_scalars_in_bucket, run_directory, runs_under
from tpu_rl.scripts.rundata.records import record_differences
from tpu_rl.scripts.rundata.tags import LOSS, REWARD_MEAN
from tpu_rl.scripts.words import counted

RESUMED_MARK = "*"  # `tpu-rl runs`: an accuracy at a resume, step unknown (RESUMED_NOTE)
RESUMED_NOTE = "* at resume, step unknown: no evaluation before training was logged"


@dataclass(frozen=True)
class RunSummary:
    run: str
    status: str  # the record's: running, succeeded, failed, interrupted, cancelled; or NO_RECORD
    steps: dict[str, str]  # each step's state: the platform's records' (VM: done, ...), else the record's
    last_step: int | None  # the last train step: the live log's while train runs, else the event files'
    train_steps: int | None  # how many the run trains, from the record
    reward: float | None  # the last rewards/train/mean
    started: str | None  # when the run was first started (the record's `created`), ISO 8601
    ended: str | None
    duration_seconds: int | None  # from the start to the end, or to now while it runs
    record: str  # where its run.json is (or would be)
    accuracy_before: float | None = None  # held-out accuracy (%) before training, from the record
    accuracy_after: float | None = None  # and after it (the last evaluation when none after)
    differs: tuple[str, ...] = ()  # what differs from the recipe: --set items, reward file, capacity
    # Without an evaluation known to be before training: the first one at a resume, of an unknown step
    # (scripts/rundata/evaluation.py resumed_first), shown marked RESUMED_MARK rather than as "before".
    accuracy_resumed: float | None = None
    sweep: str | None = None  # the sweep that started it (its record's `sweep`)
    queued: int | None = None  # its place in the platform's queue (1: next), while it waits there
    cost_usd: float | None = None  # estimated from the time its steps billed so far (billed_usd)
    accuracy_post: float | None = None  # the last evaluation after training only: what a sweep ranks by
    held_out: str = ""  # the set it was evaluated on after training: `64 gsm8k test`
    # The step of accuracy_after when it is not after training but an evaluation during it (a run still
    # training, or one that stopped before its Post): said, so no screen calls it the final one.
    accuracy_after_step: int | None = None
    # A run whose steps still run on the platform while its driver ended (run_state.left_running_line), "" else.
    left_running: str = ""

    @property
    def state_text(self) -> str:
        return queued(self.queued) if self.queued is not None else self.status

    def step_state(self, step: str) -> str:
        """The step's cell: its record's status, except that a step the record says is running while the
        run waits in the platform's queue is queued (issue 37: `queued #1` beside `train running`)."""
        state = self.steps.get(step, "-")
        return "queued" if self.queued is not None and state == "running" else state

    @property
    def cost_text(self) -> str:
        return "-" if self.cost_usd is None else usd(self.cost_usd)

    @property
    def accuracy_figures(self) -> str:
        """`40.6→59.4`: before and after (accuracy_label says after what)."""
        if self.accuracy_before is None and self.accuracy_after is None and self.accuracy_resumed is None:
            return "-"
        before = (f"{self.accuracy_before:.1f}" if self.accuracy_before is not None else
                  f"{self.accuracy_resumed:.1f}{RESUMED_MARK}" if self.accuracy_resumed is not None else "-")
        return f"{before}→{'-' if self.accuracy_after is None else f'{self.accuracy_after:.1f}'}"

    @property
    def accuracy_text(self) -> str:
        """The table's cell: the figures, and the step of the second while it is not after training."""
        during = f" (step {self.accuracy_after_step})" if self.accuracy_after_step is not None else ""
        return self.accuracy_figures + (during if self.accuracy_figures != "-" else "")

    @property
    def accuracy_label(self) -> str:
        """What the two figures of accuracy_text are: before and after training, or before and at a step of
        it (no evaluation after training yet)."""
        if self.accuracy_after_step is not None:
            return f"held-out, before → step {self.accuracy_after_step}; none after training yet"
        return "held-out, before → after training"

    @property
    def differs_text(self) -> str:
        return ", ".join(self.differs) or "-"

    @property
    def step_text(self) -> str:
        if self.last_step is None:
            return "-"
        return f"{self.last_step}/{self.train_steps}" if self.train_steps else str(self.last_step)

    @property
    def reward_text(self) -> str:
        return "-" if self.reward is None else f"{self.reward:.3g}"

    @property
    def started_text(self) -> str:
        return utc(self.started) if self.started else "-"

    @property
    def duration_text(self) -> str:
        if self.duration_seconds is None:
            return "-"
        return hms(self.duration_seconds) + (" so far" if self.status == "running" else "")


@dataclass(frozen=True)
class RunList:
    trained: str  # the prefix the runs are under
    runs: list[RunSummary]
    other_recipes: int  # runs under the same model prefix whose record names another recipe
    # Why the platform could not be read for the runs' live train steps (run_state.LiveSteps), if it could not.
    unread: Exception | None = field(default=None, compare=False)


def _time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _scalars(storage, url: str) -> dict[str, tuple[int, float]]:
    """The last reward and loss points under a run's tensorboard/; {} when there are none or a file cannot be
    read (a file being re-uploaded by a flush, say): the list shows "-" for that run, not an error."""
    try:
        return latest_scalars_in_bucket(storage, url, (REWARD_MEAN.name, LOSS.name))
    except Exception:  # noqa: BLE001 -- see the docstring
        return {}


def summarize_run(session: Session, name: str, record: dict | None, live: LiveSteps | None = None) -> RunSummary:
    """One run of the listing; `live`: the listing's reader of live train steps (one per listing)."""
    storage, trained = session.clients.storage(), session.paths.trained
    record = record or {}
    scalars = _scalars(storage, run_directory(session.recipe, session.settings, name))
    from tpu_rl.scripts.pipeline.platforms import platform_for

    platform = platform_for(session.recipe)
    status, ended_text = run_outcome(session, name, record, platform.unfollowed_end)
    live = live or live_steps(session)
    left = live.left_running(name) if status == "interrupted" else []  # a killed driver's run goes on
    status, ended_text = still_running(status, left), None if left else ended_text
    started, ended = _time(record.get("created")), _time(ended_text)
    end = session.now() if status == "running" else ended
    change = accuracy_change(record.get("evaluations") or [])
    post = after_training(record.get("evaluations") or [])
    train_overrides = (record.get("overrides") or {}).get("train") or []
    resumed = resumed_first(record.get("evaluations") or [])
    duration = int((end - started).total_seconds()) if started and end else None
    steps = recorded_states(record, platform.recorded_steps(session, name))  # as `status` reads them (run_state.py)
    # The cluster (or the VM) is asked only while train runs by the steps' records, or there is no record (a VM's
    # script, a JobSet submitted before its run.json was written): the bucket answers for the rest.
    asks = steps.get("train") == "running" or status == NO_RECORD
    now = live.read(name) if asks else None
    progress = train_progress(session, name, now, scalars)
    return RunSummary(
        run=name, status=status, steps=steps, last_step=progress.step if progress else None,
        train_steps=record.get("train_steps"),
        reward=scalars[REWARD_MEAN.name][1] if REWARD_MEAN.name in scalars else None,
        started=record.get("created"), ended=ended_text, duration_seconds=duration,
        record=f"{trained}{name}/{RUN_RECORD}",
        accuracy_before=change.before.accuracy if change.before else None,
        accuracy_after=change.after.accuracy if change.after else None,
        accuracy_after_step=change.after.step if change.after and change.after.phase != "post" else None,
        accuracy_resumed=resumed.accuracy if resumed else None,
        differs=record_differences(session.recipe, record), sweep=record.get("sweep"),
        cost_usd=billed_usd(session, record), accuracy_post=post.accuracy if post else None,
        held_out=f"{post.total} {eval_set_name(train_overrides)}" if post else "",
        left_running=left_running_line(session, name, record, left))


def _step_seconds(entry: dict, now: datetime) -> float:
    """What a step billed for, in seconds: its phases but `queued` (no node is up while Kueue holds it)
    once `run` recorded them (at each new phase; the last one of a step still running counted to now),
    else from its start to its end, or to now while it runs."""
    phases = entry.get("phases")
    running = entry.get("status") == "running"
    if phases:
        spans = [(span.get("phase"), float(span.get("seconds") or 0)) for span in phases]
        if running and (started := _time(phases[-1].get("started"))):
            spans[-1] = (spans[-1][0], max((now - started).total_seconds(), spans[-1][1]))
        return sum(seconds for phase, seconds in spans if phase != "queued")
    started, ended = _time(entry.get("started")), _time(entry.get("ended"))
    end = ended or (now if running else None)
    return max((end - started).total_seconds(), 0.0) if started and end else 0.0


def billed_usd(session: Session, record: dict) -> float | None:
    """The run's cost so far, estimated at list prices (recipes/costs/run.py) from each step's billed time. A
    step whose JobSet another run submitted (the shared convert, which the record says this run did not
    submit) is that run's cost, not this one's. None without a record of steps."""
    steps = {step: entry for step, entry in (record.get("steps") or {}).items() if step in STEPS}
    if not steps:
        return None
    hourly, now = hourly_estimate(session.recipe), session.now()
    return sum(hourly.during(step) * _step_seconds(entry, now) / 3600 for step, entry in steps.items()
               if entry.get("submitted") is not False)


def with_queue(session: Session, listing: RunList) -> tuple[RunList, str]:
    """The listing with each waiting run's place in the platform's queue, and a note when the queue
    could not be read (no cluster configured or reachable): `runs` needs only the bucket."""
    import dataclasses

    from tpu_rl.scripts.pipeline.platforms import platform_for

    if not any(run.status == "running" for run in listing.runs):
        return listing, ""
    error = listing.unread  # the live steps' read failed already: not waited for again
    if error is None:
        try:
            places = platform_for(session.recipe).queue(session)
        except Exception as caught:  # noqa: BLE001 -- UserError, ApiError or a client's own: said, not fatal
            error = caught
    if error is not None:
        ending = foreign_outcome(error)
        return listing, f"(queue positions not read: {error if ending is None else ending})"
    runs = [dataclasses.replace(run, queued=places.get(run.run)) for run in listing.runs]
    return dataclasses.replace(listing, runs=runs), ""


def best_of_sweep(runs: list[RunSummary], sweep: str) -> str:
    """One line naming the sweep's best run by held-out accuracy after training (an intermediate
    evaluation is not ranked), among the runs evaluated on the held-out set most of them were; the runs
    evaluated on another set are named, not ranked."""
    from collections import Counter

    members = [run for run in runs if run.sweep == sweep]
    scored = [(run, run.accuracy_post) for run in members if run.accuracy_post is not None]
    if not scored:
        return (f"sweep {sweep}: {counted(len(members), 'run')}, none evaluated after training yet; `tpu-rl runs` "
                "names the best once they are")
    held_out = Counter(run.held_out for run, _ in scored).most_common(1)[0][0]
    ranked = [(run, accuracy) for run, accuracy in scored if run.held_out == held_out]
    best, _ = max(ranked, key=lambda pair: pair[1])
    others = [f"{run.run} ({run.held_out})" for run, _ in scored if run.held_out != held_out]
    apart = f"; not ranked, evaluated on another held-out set than {held_out}: {', '.join(others)}" if others else ""
    return (f"sweep {sweep}: best run {best.run}, held-out accuracy {best.accuracy_text} "
            f"({len(ranked)} of {counted(len(members), 'run')} evaluated){apart}")


def live_steps(session: Session) -> LiveSteps:
    """What the recipe's platform reads of its runs' live steps, for one listing (run_state.LiveSteps)."""
    from tpu_rl.scripts.pipeline.platforms import platform_for

    platform = platform_for(session.recipe)
    return LiveSteps(session, platform.live_train_step, platform.steps_left_running)


def list_runs(session: Session) -> RunList:
    """The runs under the recipe's `trained/` prefix, oldest first (runs without a record last). A record
    of another recipe with the same model is left out and counted."""
    runs, others, live = [], 0, live_steps(session)
    for name, record in run_records(session).items():
        if record and record.get("recipe") not in (None, session.recipe.name):
            others += 1
            continue
        runs.append(summarize_run(session, name, record, live))

    def order(run: RunSummary) -> tuple:
        moment = _time(run.started)
        return (moment is None, moment.timestamp() if moment else 0.0, run.run)

    runs.sort(key=order)
    return RunList(session.paths.trained, runs, others, live.error)



def require_run(session: Session, uses_bucket: bool) -> None:
    """Refuse (UserError) a --run that names no run of the recipe, in every command that reads a run: a
    mistyped name would otherwise show an empty table, or cancel nothing and exit 0. A run is known by
    its directory under trained/ (what `tpu-rl runs` lists) when the command reads the bucket, and on GKE
    by a JobSet of the recipe labelled with it (a run whose record was never written)."""
    from google.api_core import exceptions as gexc

    run, recipe = session.paths.run_name, session.recipe
    known: set[str] = set()
    where = []
    if uses_bucket:
        where.append(session.paths.trained)
        try:
            known.update(runs_under(session.clients.storage(), session.paths.trained))
        except gexc.NotFound:
            pass
    if run not in known:
        from tpu_rl.scripts.pipeline.platforms import platform_for

        found = platform_for(recipe).runs_found(session)
        if found is not None:
            where.append(found[0])
            known.update(found[1])
    if run in known:
        return
    there = f"runs: {', '.join(sorted(known))}" if known else "no run yet"
    raise UserError(f"--run '{run}': no run of {recipe.name} by that name in {' or '.join(where)} ({there}): "
                    f"pass one of those (`tpu-rl runs {recipe.name}` lists them)")
