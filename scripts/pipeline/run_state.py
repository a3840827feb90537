"""What a run is now, decided here once for every screen: `status` and `runs` read a run's step, each step's
state, its queue place and its ending from these functions, and `down` its queue place (gke/billing.py), so
that no two of them tell one run two ways (issue 37: `status` showed `step 46/50` where `runs` showed
`step -`, and `no JobSet` or `succeeded` where `runs` said `cancelled` or `failed`).

- The train step: the trainer's last step line in the live log while train runs (the platform reads it:
  Platform.live_train_step), else the last `actor/train/loss` point of the run's event files. The log
  comes first because tensorboardX flushes the event files only every 120 s (scripts/rundata/progress.py),
  so while train runs they lag behind it, or do not exist yet.
- The ending: the record's (run.json) status, or, while it still says running (or that the `run` following
  it was interrupted), what the platform's own records say of a run nobody followed (Platform.unfollowed_end).
- A run whose `run` or driver ended while a step still runs on the platform (GKE: a driver killed by SIGINT
  records `interrupted`, and its train JobSet goes on): running, with one line that says its driver ended
  and how to follow it again (left_running_line), on `runs` as on `status`, which shows the step running.
- The step total (`step n/N`): the record's train_steps (what the run's --set items asked), not the
  recipe's of the command line that asks (step_total).
- The queue place: the platform's (Platform.queue), of the run and of the step that waits, in one wording
  (session.queued).
- A step's state on `runs`: the platform's own records of its steps where it keeps them (Platform.recorded_steps:
  the VM's startup script runs them and writes their markers, followed or not, and `status` reads those),
  else the record's (recorded_states).
- A step's state on `status`: the platform's view of it while it runs or queues; once it does not, the record's
  ending of the step (cancelled, failed) when it has one: `cancel` deletes the JobSet, and a JobSet that
  succeeded without its output is a train that failed.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Callable, TypeVar

from tpu_rl.recipes import STEPS
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.scripts.cloud import gcs
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.pipeline.session import Session, queued
from tpu_rl.scripts.rundata.events import latest_scalars_in_bucket, run_directory
from tpu_rl.scripts.rundata.progress import TrainProgress
from tpu_rl.scripts.rundata.tags import LOSS

NO_RECORD = "no run.json"  # a run directory without a record (event files only)
ENDINGS = ("cancelled", "failed")  # a run's or a step's ending that the platform's view no longer shows


def read_record(session: Session) -> dict:
    """The session's run record, {} when there is none or it cannot be read: a screen shows the platform's
    view then, and never fails for the record."""
    try:
        return gcs.read_json(session.clients.storage(), session.paths.run_record) or {}
    except ApiError:
        return {}


# How a run whose record says nothing final ended with nobody following it (Platform.unfollowed_end): the
# caller passes its platform's, so this module, which the implementations use, never routes to them.
UnfollowedEnd = Callable[[Session, str], "tuple[str, str | None] | None"]


def run_outcome(session: Session, run: str, record: dict, unfollowed_end: UnfollowedEnd) -> tuple[str, str | None]:
    """The run's status and when it ended: its record's, unless the record still says running, or that the
    `run` following it was interrupted (the platform goes on), or there is none, while the platform's own
    records (`unfollowed_end`) say the run ended with nobody following it."""
    status, ended = record.get("status", NO_RECORD), record.get("ended")
    if status not in ("running", "interrupted", NO_RECORD):
        return status, ended
    return unfollowed_end(session, run) or (status, ended)


def still_running(status: str, left: list[str]) -> str:
    """The run's status once its steps left running on the platform are known (Platform.steps_left_running):
    a run whose record says its `run` or driver was interrupted is running while one of its steps is."""
    return "running" if status == "interrupted" and left else status


def left_running_line(session: Session, run: str, record: dict, left: list[str]) -> str:
    """One line, the same on `runs` and `status`, for a run whose steps `left` still run on the platform while
    its driver ended: nothing takes it on to its next step until a `run` of it (with its record's --set items
    and name) starts its driver again; "" when none is left."""
    if not left:
        return ""
    items = [f"--set {shlex.quote(item)}" for item in (record.get("overrides") or {}).get("set") or ()]
    named = ["--run", run] if record.get("named_by") == "--run" else []
    again = " ".join(["tpu-rl", "run", session.recipe.name, *items, *named])
    return (f"run {run}: {' and '.join(left)} still {'runs' if len(left) == 1 else 'run'} on the cluster, but its "
            f"driver ended, so nothing takes it on to the next step; follow it again with `{again}`")


def recorded_states(record: dict, own: dict[str, str]) -> dict[str, str]:
    """Each step's state, in the order of STEPS: `own`, the platform's records of its steps
    (Platform.recorded_steps), for each step they name, else the record's (run.json). `own` wins: the record
    says what the `run` that wrote it saw, so after `run --detach` or a cancel it lags the platform's."""
    steps = {step: entry.get("status", "-") for step, entry in (record.get("steps") or {}).items() if step in STEPS}
    return {step: own.get(step) or steps[step] for step in STEPS if step in own or step in steps}


def step_state(recorded: str | None, live: str, active: bool, place: int | None = None) -> str:
    """The state a screen shows of one step: its queue place while it waits there (`place`, as `runs` shows
    the run's); `live`, the platform's word for it, while `active` (it runs or queues there) or when it
    already says the record's ending (`failed (BackoffLimitExceeded)`); else the ending the record keeps
    (`recorded`: the step's status in run.json)."""
    if place is not None:
        return queued(place)
    if active or recorded not in ENDINGS or live.startswith(recorded):
        return live
    return recorded


def step_total(session: Session, record: dict) -> int:
    """The steps the run trains, N of `step n/N` and of the time left: its record's (run.json's train_steps, what
    its `run` asked with its --set items, as `runs` shows it), so that a screen opened without those items
    counts as `runs` does; the session's recipe's only while the run has no record."""
    steps = record.get("train_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    return trained_steps(session.recipe)


def train_progress(session: Session, run: str, live: TrainProgress | None,
                   scalars: dict[str, tuple[int, float]] | None = None) -> TrainProgress | None:
    """The run's train step and loss: `live`, what the platform read of its live log (None when train does
    not run, or logged no step yet), else the last loss point of its event files; `scalars`: those points,
    when the caller read them already (`runs` reads the reward beside)."""
    if live is not None:
        return live
    if scalars is None:
        try:
            scalars = latest_scalars_in_bucket(session.clients.storage(),
                                               run_directory(session.recipe, session.settings, run), (LOSS.name,))
        except Exception:  # noqa: BLE001 -- no files yet, one half uploaded: no step, as `runs` shows it
            return None
    point = scalars.get(LOSS.name)
    return TrainProgress(point[0], point[1]) if point else None


Answer = TypeVar("Answer")


class LiveSteps:
    """What the platform reads of each listed run's train step in its live log (Platform.live_train_step),
    None when it cannot be read (no cluster configured or reachable, the VM stopped): the event files are
    the fallback; and of the steps it still runs after the run's driver ended (Platform.steps_left_running).
    The caller passes its platform's two, so this module never routes to them. After one read failed the
    others of the listing are not tried: each would wait out the same retries, and `runs` needs only the
    bucket; `error` says why (runs.with_queue does not try again)."""

    def __init__(self, session: Session, live_train_step: Callable[[Session, str], TrainProgress | None],
                 steps_left_running: Callable[[Session, str], list[str]]) -> None:
        self.session = session
        self.error: Exception | None = None
        self.live_train_step, self.steps_left_running = live_train_step, steps_left_running

    def read(self, run: str) -> TrainProgress | None:
        return self._ask(lambda: self.live_train_step(self.session, run), None)

    def left_running(self, run: str) -> list[str]:
        """The platform's steps_left_running of the run, [] when the platform cannot be read (as `read`)."""
        return self._ask(lambda: self.steps_left_running(self.session, run), [])

    def _ask(self, question: Callable[[], Answer], otherwise: Answer) -> Answer:
        if self.error is not None:
            return otherwise
        try:
            return question()
        except Exception as error:  # noqa: BLE001 -- UserError, ApiError or a client's own: see the class
            self.error = error
            return otherwise


def utc(text: str | None) -> str:
    """An ISO 8601 time as `2026-12-06 07:40 UTC`, as `runs` shows its times; the text as it is otherwise."""
    try:
        moment = datetime.fromisoformat(text) if text else None
    except ValueError:
        return text or ""
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def ending_line(session: Session, record: dict, unfollowed_end: UnfollowedEnd) -> str:
    """`run exp1 cancelled at 2026-12-06 07:40 UTC` (and, for a failure, its error), as `runs` says it in its
    status column; "" while the run has no such ending."""
    run = session.paths.run_name
    status, ended = run_outcome(session, run, record, unfollowed_end)
    if status not in ENDINGS:
        return ""
    at = f" at {utc(ended)}" if ended else ""
    error = record.get("error") if status == "failed" and record.get("status") == "failed" else None
    return f"run {run} {status}{at}" + (f": {' '.join(str(error).split())}" if error else "")
