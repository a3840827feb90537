"""The run's held-out evaluations as `run` meets them: printed as they arrive, kept in run.json under
"evaluations", read back from Cloud Logging when the head's pod is gone (its JobSet's TTL, or a run that
was not attached), and summed up at the end by record.ending_run ("accuracy 41.2% → 58.7% (+17.5) on 64
gsm8k test questions"). The lines and their source are in scripts/rundata/evaluation.py."""

from __future__ import annotations

from tpu_rl.jobs.k8s import MAIN_CONTAINER, jobset_name, main_replicated_job
from tpu_rl.recipes.conventions import NAMESPACE
from tpu_rl.recipes.outcome import PermissionRefused
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.recipes.runs.evaluation import evaluates
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.record import RunRecord
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.rundata.evaluation import (RESTORED_TEXT, TRAIN_STEP, Evaluation, describe, merged,
                                              parse_evaluations)

# What the Cloud Logging query asks for: the lines that start each evaluation's text, and tunix's restore
# line, which tells a resumed attempt's Pre from the one before training (evaluation.py).
EVALUATION_TEXTS = ("RL Training: corr=", "Intermediate Eval (step=", RESTORED_TEXT)


class EvaluationWatch:
    """Feeds log text to the run record: each evaluation not seen before is printed and recorded (a failed
    write is a warning, see RunRecord.write)."""

    def __init__(self, session: Session, record: RunRecord) -> None:
        self.session, self.record = session, record
        self.step_seen: int | None = None  # the last train step logged in any text seen so far

    @property
    def entries(self) -> list[dict]:
        return self.record.data.get("evaluations") or []

    def see(self, text: str, source: str = "log", tail: bool = False) -> int:
        """Record the evaluations in `text`; how many were new. `tail`: the text is the log's last lines
        only, which may have lost tunix's restore line: a new Pre it puts at step 0 is a resumed attempt's
        when the bucket already holds a finished checkpoint (a Pre is logged before its attempt trains), or
        when the bucket cannot be read: it is then recorded at step None, "at resume, step unknown"."""
        steps = [int(step) for step in TRAIN_STEP.findall(text)] if "Train step" in text else []
        self.step_seen = max([*steps, self.step_seen or 0]) if steps else self.step_seen
        if "corr=" not in text:  # cheap: most polls hold none
            return 0
        found = parse_evaluations(text, last_step=self._reached() if "Post RL Training" in text else None)
        before = self.entries
        after = merged(before, found)
        new = after[len(before):]
        if not new:
            return 0
        at_zero = any(entry["phase"] == "pre" and entry["step"] == 0 for entry in new)
        if tail and at_zero and self._resumed() is not False:
            for entry in new:  # not known to start at step 0: at resume, step unknown
                if entry["phase"] == "pre" and entry["step"] == 0:
                    entry.update(step=None, when=Evaluation.from_record({**entry, "step": None}).when)
        for entry in new:
            entry["source"] = source
            self.session.console.print(f"train: {describe_entry(entry)}")
        self.record.data["evaluations"] = after
        self.record.write()
        return len(new)

    def _reached(self) -> int:
        """The step training reached, for an evaluation after training whose text logs no train step: the
        last one logged in an earlier text, else the bucket's newest finished checkpoint (tunix saves the
        step it reached on close), else the most it could reach (trained_steps; it may have stopped below)."""
        if self.step_seen is not None:
            return self.step_seen
        try:
            saved = gcs.latest_checkpoint_step(self.session.clients.storage(), self.session.paths)
        except Exception:  # noqa: BLE001 -- unknown: the step it could reach at most
            saved = None
        return saved if saved is not None else trained_steps(self.session.recipe)

    def _resumed(self) -> bool | None:
        """Whether the bucket holds a finished checkpoint the attempt may have restored; None: unknown."""
        try:
            return bool(gcs.finished_checkpoint_steps(self.session.clients.storage(), self.session.paths))
        except Exception:  # noqa: BLE001 -- unknown: the attempt is not known to start at step 0
            return None

    def has_after(self) -> bool:
        return any(entry.get("phase") == "post" for entry in self.entries)

    def has_before_and_after(self) -> bool:
        """Whether the record has the evaluation before training (a Pre at step 0) and one after."""
        return self.has_after() and any(e.get("phase") == "pre" and e.get("step") == 0 for e in self.entries)


def describe_entry(entry: dict) -> str:
    return describe(Evaluation.from_record(entry))


# How far back Cloud Logging is searched for a run without a start time in its record: the retention of
# a project's _Default log bucket (30 days unless configured; Cloud Logging docs, "Routing and storage").
DEFAULT_SEARCH_DAYS = 30


def cloud_logging_text(session: Session, since: str | None) -> str:
    """The evaluation lines of the run's train head, as Cloud Logging kept them (oldest first), logged
    from `since` (the run's first start, ISO 8601) on."""
    from datetime import datetime, timedelta

    from tpu_rl.scripts.cloud.cloud_logging import container_filter

    recipe, settings = session.recipe, session.settings
    prefix = f"{jobset_name(session.spec, 'train')}-{main_replicated_job(recipe, 'train')}-"
    try:
        start = datetime.fromisoformat(since) if since else None
    except ValueError:
        start = None
    # An hour early: the record's clock is the user's machine, the entries' Google's.
    start = start - timedelta(hours=1) if start else session.now() - timedelta(days=DEFAULT_SEARCH_DAYS)
    query = container_filter(settings.project, settings.cluster_name, NAMESPACE, prefix, MAIN_CONTAINER,
                             EVALUATION_TEXTS, since=start)
    return session.clients.logging().lines(query)


def fill_from_cloud_logging(session: Session, watch: EvaluationWatch) -> int:
    """Read the evaluations Cloud Logging kept into the record; a failed read is a warning (it only fills in
    figures; the run's outputs are what counts)."""
    try:
        return watch.see(cloud_logging_text(session, watch.record.data.get("created")), source="cloud logging")
    except Exception as error:  # noqa: BLE001 -- no credentials, no permission, no API: warn
        reason = " ".join(str(error).split())[:200]
        if session.driven and isinstance(error, PermissionRefused):  # no logging role (docs/security.md)
            reason = (f"the run's driver may not read Cloud Logging ({reason}); `tpu-rl eval "
                      f"{session.recipe.name} --run {session.paths.run_name}` measures the trained checkpoint")
            watch.record.data["evaluations_unread"] = reason
            watch.record.write()
        session.console.print(f"[yellow]![/] evaluations not filled in: {reason}")
        return 0


def fill_after_train(session: Session, watch: EvaluationWatch, head_log: str | None) -> None:
    """At the end of train: the head's whole log when its pod is still there, else (or when that lacks the
    evaluation before training or the one after: an attempt resumed, its pod holds only its own) Cloud
    Logging."""
    if not evaluates(session.recipe):
        return
    if head_log:
        watch.see(head_log)
    if not watch.has_before_and_after():
        fill_from_cloud_logging(session, watch)
