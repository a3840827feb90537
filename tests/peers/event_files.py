"""TensorBoard event files as a run's train step leaves them in its tensorboard/ prefix."""

from __future__ import annotations

from pathlib import Path


def write_events(directory: Path, scalars: dict[str, list[tuple[int, float]]]) -> list[Path]:
    """Event files as train_rl writes them: metrax's TensorboardBackend is a tensorboardX SummaryWriter
    calling add_scalar(tag, value, step) (metrax 0.2.3/0.2.4 metrax/logging/tensorboard_backend.py L25-33,
    L49-59); the tags are tunix's (scripts/rundata/tags.py has their source)."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(logdir=str(directory))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    return sorted(directory.glob("events.out.tfevents.*"))


def put_event_files(client, url: str, scalars: dict[str, list[tuple[int, float]]], tmp: Path) -> None:
    """Write event files with `scalars` and upload them under the gs:// prefix `url` (a run's tensorboard/)."""
    from tpu_rl.jobs.paths import split_gs_url

    bucket, prefix = split_gs_url(url)
    for path in write_events(tmp, scalars):
        client.bucket(bucket).blob(prefix + path.name).upload_from_filename(str(path))
