"""A run's TensorBoard scalars, read with the `tensorboard` package's reader from a local directory or
from a gs:// prefix (downloaded to a temporary directory first: the reader does not speak GCS).

tensorboardX names each file `events.out.tfevents.<unix time, 10 digits>.<hostname>`
(tensorboardX 2.6.5 event_file_writer.py EventsWriter.__init__, EventFileWriter.__init__), so the names sort in the order the files were
started; a restarted run adds a second file to the same directory, read after the first.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from tpu_rl.recipes import Recipe, Settings, UserError
from tpu_rl.recipes.runs.spec import RunSpec

EVENT_FILE_GLOB = "events.out.tfevents.*"


def run_directory(recipe: Recipe, settings: Settings, run: str) -> str:
    """Where train_rl writes a run's event files (ArtifactPaths.tensorboard of that run). The name is taken
    as given, not checked against today's run-name rule: it reads runs already in the bucket."""
    return ArtifactPaths(RunSpec.in_bucket(recipe, run), settings).tensorboard


@dataclass(frozen=True)
class Series:
    """One tag's points in the order they were written (a restarted run may repeat steps)."""

    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Run:
    name: str  # what the table and the legend call it
    source: str  # where its event files were read: gs://... or a local directory
    event_files: tuple[str, ...]  # their names, in reading order
    scalars: dict[str, Series]
    evaluations: tuple[dict, ...] = ()  # the held-out evaluations in its run.json (bucket runs only)
    differs: tuple[str, ...] = ()  # what it changed from the recipe (--set items, reward file, capacity)


def is_event_file(name: str) -> bool:
    """The reader's own test for an event file (a "tfevents" basename), so we download what it would read."""
    from tensorboard.backend.event_processing.io_wrapper import IsSummaryEventsFile

    return IsSummaryEventsFile(name)


def _as_float32_text(value: float) -> float:
    """The files store float32 (the summary's simple_value): 0.1 comes back as 0.10000000149011612. Give the
    shortest decimal that is the same float32, which is what the trainer logged (9 digits always are)."""
    if not math.isfinite(value):
        return value
    stored = struct.pack("<f", value)
    return next(candidate for digits in range(1, 10)
                if struct.pack("<f", candidate := float(f"{value:.{digits}g}")) == stored)


def read_scalars(files: Iterable[Path]) -> dict[str, Series]:
    """Every scalar tag in `files`, read in the order given, one point per step: when a tag's step goes
    back (a run resumed from a checkpoint writes steps 21-25 again), the earlier points from that step on
    are dropped, as TensorBoard's purge_orphaned_data does (EventAccumulator._MaybePurgeOrphanedData:
    an event whose step is below the most recent one purges the tag's events at or after its step), so
    the latest attempt's values stay."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    points: dict[str, tuple[list[int], list[float]]] = {}
    for path in files:
        # Keep every point (size_guidance 0: no reservoir sampling); the reader's own purge compares the
        # steps of all tags, which count differently (actor/* from 1, rewards/* from 0; orbax's tags always
        # 0), so the purge is done per tag below, across the files, instead.
        reader = EventAccumulator(str(path), size_guidance={SCALARS: 0}, purge_orphaned_data=False)
        reader.Reload()
        for tag in reader.Tags()[SCALARS]:
            steps, values = points.setdefault(tag, ([], []))
            for event in reader.Scalars(tag):
                if steps and event.step < steps[-1]:
                    keep = next((i for i, step in enumerate(steps) if step >= event.step), len(steps))
                    del steps[keep:], values[keep:]
                steps.append(event.step)
                values.append(_as_float32_text(event.value))
    return {tag: Series(tuple(steps), tuple(values)) for tag, (steps, values) in points.items()}


def local_event_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.is_file() and is_event_file(path.name))


def download_event_files(storage, url: str, into: Path) -> list[Path]:
    """The event files directly under the gs:// prefix `url`, downloaded into `into`, in name order."""
    bucket, prefix = split_gs_url(url)
    blobs = [blob for blob in storage.list_blobs(bucket, prefix=prefix, delimiter="/")
             if is_event_file(blob.name.rpartition("/")[2])]
    files = []
    for blob in sorted(blobs, key=lambda blob: blob.name):
        path = into / blob.name.rpartition("/")[2]
        blob.download_to_filename(str(path))
        files.append(path)
    return files


def runs_under(storage, url: str) -> list[str]:
    """The names of the directories directly under a gs:// prefix (the runs under `trained/`)."""
    bucket, prefix = split_gs_url(url)
    pages = storage.list_blobs(bucket, prefix=prefix, delimiter="/")
    for _ in pages:  # the prefixes are filled in as the pages are read
        pass
    return sorted(name[len(prefix):].rstrip("/") for name in pages.prefixes)


def read_run(name: str, location: str, storage=None) -> Run | None:
    """The run whose event files are directly in `location` (a gs:// prefix or a local directory), or None
    when there are none there. A gs:// location needs `storage` (google.cloud.storage.Client)."""
    if location.startswith("gs://"):
        url = location.rstrip("/") + "/"
        with tempfile.TemporaryDirectory(prefix="tpu-rl-metrics-") as tmp:
            files = download_event_files(storage, url, Path(tmp))
            return Run(name, url, tuple(path.name for path in files), read_scalars(files)) if files else None
    directory = Path(location)
    files = local_event_files(directory)
    return Run(name, str(directory), tuple(path.name for path in files), read_scalars(files)) if files else None


def _event_files(event_dir_or_files: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(event_dir_or_files, (str, os.PathLike)):
        path = Path(event_dir_or_files)
        return local_event_files(path) if path.is_dir() else [path]
    return sorted((Path(file) for file in event_dir_or_files), key=lambda path: path.name)


def latest_scalars(event_dir_or_files: str | os.PathLike | Iterable[str | os.PathLike], tags: Iterable[str]
                   ) -> dict[str, tuple[int, float]]:
    """(step, value) of the last point of each of `tags` that has one, the files read once (in name order)."""
    scalars = read_scalars(_event_files(event_dir_or_files))
    return {tag: (series.steps[-1], series.values[-1]) for tag in tags
            if (series := scalars.get(tag)) and series.steps}


def latest_scalar(event_dir_or_files: str | os.PathLike | Iterable[str | os.PathLike], tag: str
                  ) -> tuple[int, float] | None:
    """(step, value) of the last point of `tag` in a local event directory or in the given event files (read
    in name order), or None when the tag has no point yet: for showing progress while a run goes on."""
    return latest_scalars(event_dir_or_files, (tag,)).get(tag)


def latest_scalars_in_bucket(storage, url: str, tags: Iterable[str]) -> dict[str, tuple[int, float]]:
    """latest_scalars of the event files directly under a gs:// prefix (a run's tensorboard/), downloading
    those files only; {} when there are none yet."""
    with tempfile.TemporaryDirectory(prefix="tpu-rl-events-") as tmp:
        files = download_event_files(storage, url.rstrip("/") + "/", Path(tmp))
        return latest_scalars(files, tags) if files else {}


def missing_run(run: str, recipe: Recipe, settings: Settings, storage) -> UserError:
    """The one line for a run with no event files: where we looked, and which runs there are."""
    url = run_directory(recipe, settings, run)
    trained = ArtifactPaths(RunSpec.of_catalog(recipe), settings).trained
    found = runs_under(storage, trained)
    there = f"runs under {trained}: {', '.join(found)}" if found else f"no run under {trained} yet"
    return UserError(f"run '{run}' of {recipe.name}: no {EVENT_FILE_GLOB} files under {url} ({there}): pass one of "
                     "those with --run, or --from a directory with the event files")
