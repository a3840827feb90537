"""`tpu-rl runs`: the runs of a recipe found in the bucket, each from its record (run.json) and its
TensorBoard event files, both under `<model>/trained/<run>/`.

The record says how each step went and when the run started and ended; the event files give the last mean
reward (`rewards/train/mean`) and the last train step: the step of the last `actor/train/loss` point,
which the actor trainer writes after each update, counting from 1 (scripts/rundata/tags.py has the source).
Only the event files are downloaded, never the checkpoints beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.paths import RUN_RECORD
from recipes import STEPS, UserError
from scripts.cloud import gcs
from scripts.pipeline.record import run_records
from scripts.pipeline.session import Session, hms
from scripts.pipeline.vm.state import Failure
from scripts.rundata.evaluation import accuracy_change, resumed_first
from scripts.rundata.events import latest_scalars_in_bucket, run_directory
from scripts.rundata.records import record_differences
from scripts.rundata.tags import LOSS, REWARD_MEAN

RESUMED_MARK = "*"  # `tpu-rl runs`: an accuracy at a resume, step unknown (RESUMED_NOTE)
RESUMED_NOTE = "* at resume, step unknown: no evaluation before training was logged"

NO_RECORD = "no run.json"


@dataclass(frozen=True)
class RunSummary:
    run: str
    status: str  # the record's: running, succeeded, failed, interrupted, cancelled; or NO_RECORD
    steps: dict[str, str]  # each step's status in the record (verified, succeeded, failed, ...)
    last_step: int | None  # the last train step in the event files
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

    @property
    def accuracy_text(self) -> str:
        if self.accuracy_before is None and self.accuracy_after is None and self.accuracy_resumed is None:
            return "-"
        before = (f"{self.accuracy_before:.1f}" if self.accuracy_before is not None else
                  f"{self.accuracy_resumed:.1f}{RESUMED_MARK}" if self.accuracy_resumed is not None else "-")
        return f"{before}→{'-' if self.accuracy_after is None else f'{self.accuracy_after:.1f}'}"

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
        return _utc(self.started) if self.started else "-"

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


def _time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _utc(text: str) -> str:
    moment = _time(text)
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else text


def _scalars(storage, url: str) -> dict[str, tuple[int, float]]:
    """The last reward and loss points under a run's tensorboard/; {} when there are none or a file cannot be
    read (a file being re-uploaded by a flush, say): the list shows "-" for that run, not an error."""
    try:
        return latest_scalars_in_bucket(storage, url, (REWARD_MEAN.name, LOSS.name))
    except Exception:  # noqa: BLE001 -- see the docstring
        return {}


def _outcome(session: Session, name: str, record: dict) -> tuple[str, str | None]:
    """The run's status and end: its record's, unless the record still says running (or there is none) while
    the run's own progress records say it ended: the VM's startup script writes export's marker (its text: when)
    once every step succeeded, and its failure record when a phase failed (jobs/vm.py), whether or not a `run`
    followed it (`run --detach` returns at once)."""
    status, ended = record.get("status", NO_RECORD), record.get("ended")
    if status not in ("running", NO_RECORD):
        return status, ended
    storage, paths = session.clients.storage(), session.paths
    done = gcs.read_text(storage, paths.run_marker(name, "export"))
    if done is not None:
        return "succeeded", done.strip() or None
    failure = Failure.parse(gcs.read_text(storage, paths.run_failure(name)))
    return ("failed", failure.at or None) if failure else (status, ended)


def summarize_run(session: Session, name: str, record: dict | None) -> RunSummary:
    storage, trained = session.clients.storage(), session.paths.trained
    record = record or {}
    scalars = _scalars(storage, run_directory(session.recipe, session.settings, name))
    status, ended_text = _outcome(session, name, record)
    started, ended = _time(record.get("created")), _time(ended_text)
    end = session.now() if status == "running" else ended
    change = accuracy_change(record.get("evaluations") or [])
    resumed = resumed_first(record.get("evaluations") or [])
    duration = int((end - started).total_seconds()) if started and end else None
    return RunSummary(
        run=name, status=status,
        steps={step: entry.get("status", "-") for step, entry in (record.get("steps") or {}).items() if step in STEPS},
        last_step=scalars[LOSS.name][0] if LOSS.name in scalars else None,
        train_steps=record.get("train_steps"),
        reward=scalars[REWARD_MEAN.name][1] if REWARD_MEAN.name in scalars else None,
        started=record.get("created"), ended=ended_text, duration_seconds=duration,
        record=f"{trained}{name}/{RUN_RECORD}",
        accuracy_before=change.before.accuracy if change.before else None,
        accuracy_after=change.after.accuracy if change.after else None,
        accuracy_resumed=resumed.accuracy if resumed else None,
        differs=record_differences(session.recipe, record))


def list_runs(session: Session) -> RunList:
    """The runs under the recipe's `trained/` prefix, oldest first (runs without a record last). A record
    of another recipe with the same model is left out and counted."""
    runs, others = [], 0
    for name, record in run_records(session).items():
        if record and record.get("recipe") not in (None, session.recipe.name):
            others += 1
            continue
        runs.append(summarize_run(session, name, record))

    def order(run: RunSummary) -> tuple:
        moment = _time(run.started)
        return (moment is None, moment.timestamp() if moment else 0.0, run.run)

    runs.sort(key=order)
    return RunList(session.paths.trained, runs, others)



def require_run(session: Session, uses_bucket: bool) -> None:
    """Refuse (UserError) a --run that names no run of the recipe, in every command that reads a run: a
    mistyped name would otherwise show an empty table, or cancel nothing and exit 0. A run is known by
    its directory under trained/ (what `tpu-rl runs` lists) when the command reads the bucket, and on GKE
    by a JobSet of the recipe labelled with it (a run whose record was never written)."""
    from google.api_core import exceptions as gexc

    from scripts.rundata.events import runs_under

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
        from scripts.pipeline.platforms import platform_for

        found = platform_for(recipe).runs_found(session)
        if found is not None:
            where.append(found[0])
            known.update(found[1])
    if run in known:
        return
    there = f"runs: {', '.join(sorted(known))}" if known else "no run yet"
    raise UserError(f"--run '{run}': no run of {recipe.name} by that name in {' or '.join(where)} ({there}): "
                    f"pass one of those (`tpu-rl runs {recipe.name}` lists them)")
