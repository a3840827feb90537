"""`tpu-rl metrics`: a run's TensorBoard scalars as a table, JSON or a picture.

- table.py: the 80-column table and the JSON;
- compare.py: several runs side by side in 80 columns (with their held-out accuracy);
- plot.py: the 3x2 picture, accuracy first (imports matplotlib: only for --png).
The event files, the tags and the run records are read by scripts/rundata/, which `run` and `runs` use too.

The reader and matplotlib are imported by the functions that use them, so importing this package is cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe, Settings, UserError
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.recipes.runs.identity import check_run_name
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.settings.checks import bucket_name_problem
from tpu_rl.scripts.rundata.events import (EVENT_FILE_GLOB, Run, latest_scalar, missing_run, read_run,
                                    run_directory)
from tpu_rl.scripts.rundata.records import record_differences, records_under
from tpu_rl.scripts.words import counted

__all__ = ["PICTURE_FORMATS", "Run", "collect", "latest_scalar", "picture_format", "run_directory", "source_label"]


# The formats matplotlib writes (plot.py) that --png takes, by the file's extension (lowercase).
PICTURE_FORMATS = ("png", "svg", "pdf")


def picture_format(path: Path) -> str:
    """The format the file's extension names; UserError (one line) for any other extension."""
    extension = path.suffix.lower().lstrip(".")
    if extension not in PICTURE_FORMATS:
        named = f"'.{extension}'" if extension else "no extension"
        raise UserError(f"--png {path}: {named} is not a format it writes: name the file "
                        f"{', '.join('.' + name for name in PICTURE_FORMATS[:-1])} or .{PICTURE_FORMATS[-1]}")
    return extension


def source_label(location: str) -> str:
    """A --from location's name in the table and legend: its last directory, or the one above a
    `tensorboard/` directory (the run's name when a run directory was copied as it is)."""
    parts = [part for part in location.removeprefix("gs://").rstrip("/").split("/") if part]
    if len(parts) > 1 and parts[-1] == "tensorboard":
        return parts[-2]
    return parts[-1] if parts else location


def with_record(run: Run, recipe: Recipe, settings: Settings, storage) -> Run:
    """The run with the held-out evaluations and the changes from the recipe its run.json holds (none
    when it has no record or the record cannot be read: the scalars are shown all the same)."""
    from dataclasses import replace

    from tpu_rl.scripts.cloud import gcs

    try:
        record = gcs.read_json(storage, ArtifactPaths(RunSpec.in_bucket(recipe, run.name), settings).run_record)
    except ApiError:
        record = None
    if not record:
        return run
    return replace(run, evaluations=tuple(record.get("evaluations") or ()),
                   differs=record_differences(recipe, record))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _checked_source(source: str) -> str:
    """A --from location: an existing local directory, or gs://BUCKET/PREFIX with a valid bucket name."""
    if source.startswith("gs://"):
        bucket = source.removeprefix("gs://").split("/", 1)[0]
        problem = bucket_name_problem(bucket)
        if problem:
            raise UserError(f"--from {source}: bucket '{bucket}' {problem}: pass gs://BUCKET/PATH/TO/tensorboard")
        return source
    if not Path(source).is_dir():
        raise UserError(f"--from {source}: no such directory: pass a local directory or a gs:// URL "
                        "holding the event files")
    return source


def sweep_runs(recipe: Recipe, settings: Settings, storage, sweep: str) -> list[str]:
    """The runs of the recipe whose run.json names `sweep` (recipes/runs/sweeps.py), oldest first."""
    trained = ArtifactPaths(RunSpec.of_catalog(recipe), settings).trained
    found = sorted((record.get("created") or "", name) for name, record in records_under(storage, trained).items()
                   if record and record.get("sweep") == sweep and record.get("recipe") in (None, recipe.name))
    if not found:
        raise UserError(f"--sweep {sweep}: no run of {recipe.name} in {trained} belongs to it: `tpu-rl runs "
                        f"{recipe.name}` names each sweep")
    return [name for _, name in found]


def collect(recipe: Recipe, runs: list[str], sources: list[str], cloud_settings: Callable[[], Settings],
            reach_seconds: float | None = None, sweep: str | None = None,
            say: Callable[[str], object] = print) -> list[Run]:
    """The runs asked for: each --run of the recipe from the bucket, and the runs of --sweep, then each
    --from location; with none, the recipe's default run. A run of the sweep without curves yet (queued,
    converting) is left out, and `say` names those in one line. Settings and the storage client are made
    only when the bucket or a gs:// location is read; `reach_seconds` bounds the first contact with the
    bucket (tpu_rl.scripts.cloud.reach)."""
    runs = [check_run_name(run) for run in _unique(runs)]
    sources = [_checked_source(source) for source in _unique(sources)]  # before anything is read
    settings = storage = None
    swept: list[str] = []  # the runs of --sweep not named by --run
    loaded, without_curves = [], []
    if runs or sweep or not sources or any(source.startswith("gs://") for source in sources):
        from tpu_rl.scripts.cloud.clients import Clients

        settings = cloud_settings()
        storage = Clients(settings).storage()
        runs = runs or ([] if sources or sweep else [ArtifactPaths(RunSpec.of_catalog(recipe), settings).run_name])
        from tpu_rl.scripts.cloud.gcs import require_bucket, require_source_bucket

        if runs or sweep:  # read from GCS_BUCKET: stop first, as preflight does, when it does not exist
            require_bucket(storage, settings, within=reach_seconds)
        if sweep:
            swept = [run for run in sweep_runs(recipe, settings, storage, sweep) if run not in runs]
            runs = [*runs, *swept]
        for source in sources:  # and each --from bucket, before anything is read
            if source.startswith("gs://"):
                require_source_bucket(storage, settings, source)
        for run in runs:  # none unless the bucket is read
            found = read_run(run, run_directory(recipe, settings, run), storage)
            if found is None and run in swept:
                without_curves.append(run)
                continue
            if found is None:
                raise missing_run(run, recipe, settings, storage)
            loaded.append(with_record(found, recipe, settings, storage))
    if without_curves:
        if not loaded and not sources:
            raise UserError(f"--sweep {sweep}: no curves yet in its {counted(len(without_curves), 'run')} (queued, "
                            f"or not training yet): `tpu-rl runs {recipe.name}` shows where each is")
        say(f"--sweep {sweep}: no curves yet for {', '.join(without_curves)}; left out")
    for source in sources:
        label = source_label(source)
        found = read_run(label if label not in {run.name for run in loaded} else source, source, storage)
        if found is None:
            raise UserError(f"--from {source}: no {EVENT_FILE_GLOB} files directly in it: pass the run's "
                            "tensorboard/ directory")
        loaded.append(found)
    return loaded
