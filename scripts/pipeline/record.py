"""The run record: run.json under the run's prefix in the bucket (ArtifactPaths.run_record), beside the
checkpoints and TensorBoard logs train_rl writes there.

`tpu-rl run` writes it when it starts submitting, after each step and at the end, so that a run found in
the bucket later says what it was: the recipe as run with its overrides (the recipe's and --set), the
settings, the versions (MaxText, image, Pathways tag, this package and its git commit), the command line,
when it ran and how each step went. Nothing secret is in it: the token is never in the recipe, the settings
or the command line (a --set of a secret-looking key is masked all the same).

The record also guards the run's name: a run started with other settings under the same name (`--run`)
is refused before anything is submitted, with the settings that differ.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from tpu_rl.recipes import Step, UserError, get_recipe
from tpu_rl.recipes.outcome import ApiError, Interrupted, OutputMissing, StepFailed
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.recipes.runs.identity import digest
from tpu_rl.recipes.runs.spec import RunSpec, default_run_name, run_identity
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.session import Session, differing_fields
from tpu_rl.scripts.rundata.evaluation import summary_line

RECORD_FORMAT = 1
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) holding scripts/
UNKNOWN = "unknown"
_SECRET_KEY = re.compile(r"(?i)token|secret|password|credential")


def git_commit(root: Path = PACKAGE_ROOT) -> str:
    """HEAD of the git checkout this package runs from, or "unknown" when it is not one (an installed wheel;
    a site-packages inside some other repository does not count)."""
    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        return result.stdout.strip() if result.returncode == 0 else ""

    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or Path(top).resolve() != root.resolve():
            return UNKNOWN
        return git("rev-parse", "HEAD") or UNKNOWN
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN


def package_version() -> str:
    try:
        return metadata.version("tpu-rl")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def redacted(argv: list[str]) -> list[str]:
    """The command line with the value of any secret-looking KEY=VALUE masked."""
    def mask(arg: str) -> str:
        key, sep, _ = arg.partition("=")
        return f"{key}=***" if sep and _SECRET_KEY.search(key) else arg

    return [mask(arg) for arg in argv]


def user_file_copy(session: Session, name: str) -> str:
    """Where the run keeps its copy of a --rewards/--data-processor file: beside its run.json."""
    return f"{session.paths.run_record.rpartition('/')[0]}/user-files/{name}"


def _time(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


@dataclass
class RunRecord:
    session: Session
    data: dict = field(default_factory=dict)
    current: Step | None = None  # the step this invocation is running

    @classmethod
    def open(cls, session: Session) -> RunRecord:
        """The run's record as the bucket holds it (empty for a new run). Refuses a run name whose record
        was written for other settings: the same name would resume another run's checkpoints."""
        paths = session.paths
        existing = gcs.read_json(session.clients.storage(), paths.run_record) or {}
        changes = settings_clash(session.spec, existing)
        if changes:
            derived = default_run_name(session.spec)
            raise UserError(
                f"run '{paths.run_name}' was started with other settings ({changes}; see {paths.run_record}): "
                f"choose another name with --run NAME, or leave out --run to train as run '{derived}'")
        if not existing and session.spend is not None:  # a new run: asked once, here, before anything is made
            session.consent = {**session.spend.require(session.spend_ask), "at": _time(session.now())}
        return cls(session, existing)

    def _describe(self) -> dict:
        session = self.session
        spec, recipe, settings = session.spec, session.recipe, session.settings
        identity = run_identity(spec)
        return {
            "format": RECORD_FORMAT,
            "run": session.paths.run_name,
            "named_by": "--run" if spec.run else "settings hash",
            "recipe": recipe.name,
            "identity": identity,
            "identity_sha256": digest(identity),
            "overrides": {"recipe": list(get_recipe(recipe.name).rl.overrides), "set": list(spec.sets),
                          "train": list(recipe.rl.overrides)},
            "train_steps": trained_steps(recipe),  # what its data allows (recipes/runs/datasets.py)
            "recipe_as_run": spec.as_recorded(),
            "settings": dataclasses.asdict(settings),
            "versions": {"maxtext": recipe.maxtext_version, "image": recipe.maxtext.image, "pip": recipe.maxtext.pip,
                         "pathways_tag": recipe.pathways_images.tag if recipe.pathways else None,
                         "tpu_rl": package_version(), "git_commit": git_commit()},
            "files": {file.kind: {"name": file.name, "functions": ",".join(file.functions), "sha256": file.sha256,
                                  "copy": user_file_copy(session, file.name),
                                  **({"unchecked": file.unchecked} if file.unchecked else {})}
                      for file in spec.user_files},
            **({"sweep": spec.sweep} if spec.sweep else {}),  # kept when the run is resumed alone
            **({"fit": spec.fit} if spec.fit else {}),  # kept when a later invocation brings none
            "outputs": {"checkpoints": session.paths.actor_checkpoints, "tensorboard": session.paths.tensorboard,
                        "export": session.paths.hf_export, "conversion": session.paths.converted},
        }

    def start(self, actions: dict[str, str], jobsets: dict[str, str] | None = None) -> None:
        """Before the first step: what this invocation will do with each step (skip, submit, attach, ...)."""
        now = _time(self.session.now())
        data = self.data
        earlier = {key: data[key] for key in ("command", "started", "ended", "status", "error") if key in data}
        if earlier:
            data.setdefault("earlier", []).append(earlier)
        data.update(self._describe())
        data.setdefault("created", now)
        if self.session.consent:
            data.setdefault("consent", self.session.consent)  # given once, when the run was new: never replaced
        data.update(command=redacted(self.session.argv or sys.argv), started=now, ended=None, status="running", error=None)
        for file in self.session.spec.user_files:
            gcs.write_text(self.session.clients.storage(), user_file_copy(self.session, file.name), file.content,
                           content_type="text/x-python")
        steps = data.setdefault("steps", {})
        for step, kind in actions.items():
            entry = steps.setdefault(step, {"capacity": None})
            entry.update(action=kind, jobset=(jobsets or {}).get(step))
            if kind in ("submit", "replace"):
                entry["submitted"] = True  # this run submitted the JobSet: its time is this run's cost
            elif kind == "attach":
                entry.setdefault("submitted", False)  # one submitted before: by this run, or another's convert
            if kind == "skip":
                entry["status"] = "verified"
            else:
                entry.update(status="waiting", started=None, ended=None)
        self.write(required=True)

    def step(self, step: Step, status: str, **fields: object) -> None:
        """A step's new status ("running" stamps its start, "succeeded"/"failed" its end)."""
        now = _time(self.session.now())
        entry = self.data.setdefault("steps", {}).setdefault(step, {"capacity": None})
        entry.update(status=status, **fields)
        if status == "running":
            entry["started"] = now
            self.current = step
        elif status in ("succeeded", "failed"):
            entry["ended"] = now
            self.current = None
        self.write()

    def note(self, step: Step, **fields: object) -> None:
        """More about a step (its phases, its idle TPU time), without changing its status or times."""
        self.data.setdefault("steps", {}).setdefault(step, {"capacity": None}).update(**fields)
        self.write()

    def note_while_running(self, step: Step, **fields: object) -> None:
        """`note` during a step's wait (its phases as they change), left out once `tpu-rl cancel` has marked
        the run in the bucket: that record says why the JobSet went away, and must not be overwritten."""
        try:
            stored = gcs.read_json(self.session.clients.storage(), self.session.paths.run_record) or {}
        except ApiError:
            return  # the next phase, or the step's end, writes them
        if stored.get("status") != "cancelled":
            self.note(step, **fields)

    def finish(self, error: BaseException | None) -> None:
        """The end of this invocation: succeeded, failed (a step failed or lost its output), interrupted
        (the JobSet keeps running) or stopped by an API error. A run cancelled by `tpu-rl cancel` keeps the
        record cancel wrote."""
        if isinstance(error, RunCancelled):
            return
        if isinstance(error, (StepFailed, OutputMissing)) and self.current:
            self.step(self.current, "failed")
        status = ("succeeded" if error is None else "interrupted" if isinstance(error, (Interrupted, KeyboardInterrupt))
                  else "failed")
        self.data.update(status=status, ended=_time(self.session.now()), error=str(error) if error else None)
        self.write()

    def write(self, required: bool = False) -> None:
        """Upload the record. Only the first write may stop the run (nothing is submitted yet); later, a
        failed write is a warning, and the steps go on."""
        try:
            gcs.write_json(self.session.clients.storage(), self.session.paths.run_record, self.data)
        except ApiError as error:
            if required:
                raise ApiError(f"{error}; nothing was submitted", transient=error.transient) from None
            self.session.console.print(f"[yellow]![/] the run record was not updated: {error}")


@contextmanager
def ending_run(session: Session, record: RunRecord, steps: tuple[Step, ...],
               billing: Callable[[], list[str]] | None = None) -> Iterator[None]:
    """The end of a `run` on either platform, around what it does with its steps: a failure or an interrupt
    is recorded (RunRecord.finish) and raised; success is recorded, then the accuracy line (when the run
    evaluated) and the summary of the steps are printed (`billing`: Session.next_steps)."""
    try:
        yield
    except BaseException as error:
        record.finish(error)
        raise
    record.finish(None)
    accuracy = summary_line(record.data.get("evaluations") or [], session.recipe.rl.overrides)
    if accuracy:
        session.console.print(accuracy)
    session.report_done(steps, billing)


class RunCancelled(StepFailed):
    """The step's JobSet was deleted by `tpu-rl cancel`, which recorded it in run.json."""


def _now(session: Session) -> str:
    return _time(session.now())


def record_cancellation(session: Session, steps: Iterable[str], how: Mapping[str, object], again: bool = False) -> None:
    """Mark the run and `steps` (by name, as the JobSets' step labels give them) cancelled in its record
    before anything is stopped, so that a `tpu-rl run` attached to them reads why they went away; `how` goes
    into the entry under "cancellations" (the deleted JobSets, or the VM's cancel marker). A run without a
    record gets none: a record without the run's identity would refuse the name later. A failed write is a
    warning: cancel goes on. `again` (after the driver is gone, whose last write may have undone the first):
    the entry of the same `how` is not added twice."""
    storage, url = session.clients.storage(), session.paths.run_record
    try:
        data = gcs.read_json(storage, url)
        if not data:
            return
        now = _now(session)
        for step in steps:
            data.setdefault("steps", {}).setdefault(step, {}).update(status="cancelled", ended=now)
        data.update(status="cancelled", ended=now, error=None)
        cancellations = data.setdefault("cancellations", [])
        if not again or not any(all(entry.get(key) == value for key, value in how.items()) for entry in cancellations):
            cancellations.append({"at": now, **how, "command": redacted(sys.argv)})
        gcs.write_json(storage, url, data)
    except ApiError as error:
        session.console.print(f"[yellow]![/] the run record was not updated: {error}")


def cancellation_of(session: Session, jobset: str) -> str | None:
    """When `tpu-rl cancel` deleted this JobSet (or the run's driver Job of this name) of the run, by the
    run's record; None when it did not."""
    try:
        data = gcs.read_json(session.clients.storage(), session.paths.run_record) or {}
    except ApiError:
        return None
    found = [entry["at"] for entry in data.get("cancellations") or []
             if jobset in entry.get("jobsets", []) or jobset == entry.get("driver")]
    return found[-1] if found else None


def settings_clash(spec: RunSpec, record: dict | None) -> str | None:
    """How the settings a run's record was written for differ from `spec`'s (the same name would resume
    another run's checkpoints); None when the name may be used: no record, or the same settings."""
    identity = run_identity(spec)
    if not record or record.get("identity") == identity:
        return None
    return differing_fields(record.get("identity") or {}, identity) or "its record has no identity"


def run_records(session: Session) -> dict[str, dict | None]:
    """Every run directory under the recipe's trained/ prefix, with its record (None without one; a record
    that is not JSON is marked unreadable). No bucket: no run."""
    from tpu_rl.scripts.rundata.records import records_under

    return records_under(session.clients.storage(), session.paths.trained)
