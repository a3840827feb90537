"""The terminal view: per run, each summary tag's step count, first, last and best value and a sparkline,
in at most 80 columns; and the same numbers as JSON."""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass

from tpu_rl.scripts.rundata.evaluation import accuracy_change
from tpu_rl.scripts.rundata.events import Run, Series
from tpu_rl.scripts.rundata.tags import BY_NAME, SUMMARY_TAGS, paired_step

WIDTH = 80
SPARK_WIDTH = 20  # the sparkline's width when the numbers leave room; never less than MIN_SPARK_WIDTH
MIN_SPARK_WIDTH = 8
BARS = "▁▂▃▄▅▆▇█"
# Two spaces between columns; one between the numbers when two would leave the trend less than SPARK_WIDTH.
# With the widest cells (tag 29, steps 5, numbers 9, best 13) the trend keeps 8 columns.
# tensorboardX writes what it holds every flush_secs=120 s and on close (event_file_writer.py
# _EventLoggerThread.run), on GCS by re-uploading the object (record_writer.py GCSRecordWriter.flush); metrax also flushes every 20th step.
NO_SCALARS = "no scalars in the event files yet: they are written at flushes (every 120 s and at the end)"


@dataclass(frozen=True)
class Summary:
    count: int
    first: float
    last: float
    best: float | None  # None for a tag with no better direction, or no finite value
    best_is: str | None  # "max" or "min"


def summarize(tag: str, series: Series) -> Summary:
    direction = BY_NAME[tag].best if tag in BY_NAME else None
    finite = [value for value in series.values if math.isfinite(value)]
    best = (max if direction == "max" else min)(finite) if direction and finite else None
    return Summary(len(series.values), series.values[0], series.values[-1], best, direction if best is not None else None)


def resample(values: tuple[float, ...], width: int) -> list[float]:
    """At most `width` values: the mean of each of `width` equal runs of points (NaN where a run has none
    finite); fewer points than `width` are kept one for one."""
    if len(values) <= width:
        return list(values)
    out = []
    for i in range(width):
        chunk = [v for v in values[i * len(values) // width:(i + 1) * len(values) // width] if math.isfinite(v)]
        out.append(sum(chunk) / len(chunk) if chunk else math.nan)
    return out


def sparkline(values: tuple[float, ...], width: int) -> str:
    """One bar per value after resampling, lowest ▁ to highest █; a flat series is a row of ▄; no value
    (NaN or infinite) is a blank."""
    points = resample(values, width)
    finite = [v for v in points if math.isfinite(v)]
    if not finite:
        return " " * len(points)
    low, high = min(finite), max(finite)
    top = len(BARS) - 1

    def bar(value: float) -> str:
        if not math.isfinite(value):
            return " "
        if math.isclose(high, low, rel_tol=1e-6):  # equal values whose means differ by rounding
            return BARS[top // 2]
        return BARS[round((value - low) / (high - low) * top)]

    return "".join(bar(v) for v in points)


def number(value: float | None) -> str:
    """Three significant digits, at most 9 characters (-1.23e-05)."""
    return "-" if value is None else f"{value:.3g}"


def _rows(run: Run) -> list[tuple[str, Summary]]:
    return [(tag.name, summarize(tag.name, run.scalars[tag.name])) for tag in SUMMARY_TAGS
            if tag.name in run.scalars and run.scalars[tag.name].values]


def run_lines(run: Run) -> list[str]:
    """One run's block: a header, the table of the summary tags it has, and what it lacks or has besides."""
    files = f"{len(run.event_files)} event file{'s' if len(run.event_files) != 1 else ''}"
    lines = [f"{run.name}: {files} in", f"  {run.source}"]
    rows = _rows(run)
    if not rows:
        return lines + [f"  {NO_SCALARS}"]
    cells = [(tag, str(s.count), number(s.first), number(s.last),
              f"{s.best_is} {number(s.best)}" if s.best_is else "-") for tag, s in rows]
    header = ("tag", "steps", "first", "last", "best")
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    gap = "  "

    def line(row: tuple[str, ...], trend: str) -> str:
        tag, *numbers = row
        columns = gap.join(cell.rjust(width) for cell, width in zip(numbers, widths[1:]))
        return f"{tag.ljust(widths[0])}  {columns}  {trend}".rstrip()

    if WIDTH - len(line(header, "-")) + 1 < SPARK_WIDTH:
        gap = " "  # right-aligned numbers keep apart by their own padding; the trend needs the room
    spark_width = max(MIN_SPARK_WIDTH, min(SPARK_WIDTH, WIDTH - len(line(header, "-")) + 1))

    lines.append(line(header, "trend"))
    lines += [line(cell, sparkline(run.scalars[cell[0]].values, spark_width)) for cell in cells]
    shown = {tag for tag, _ in rows}
    absent = [tag.name for tag in SUMMARY_TAGS if tag.name not in shown]
    if absent:
        lines += textwrap.wrap(f"not written: {', '.join(absent)}", WIDTH, subsequent_indent="  ",
                               break_on_hyphens=False)
    others = len(set(run.scalars) - shown)
    if others:
        lines.append(f"and {others} other tag{'s' if others != 1 else ''} (--json lists every tag)")
    return lines


def accuracy_line(run: Run) -> str | None:
    """`held-out accuracy 40.6% → 59.4% (+18.8), 4 evaluations` for a run whose record has evaluations, and a
    second line naming the step of the second figure when it is not after training."""
    change = accuracy_change(run.evaluations)
    if change.before is None and change.after is None:
        return None
    shown = " → ".join("-" if e is None else f"{e.accuracy:.1f}%" for e in (change.before, change.after))
    delta = f" ({change.delta:+.1f})" if change.delta is not None else ""
    # issue 37: an evaluation during training is named by its step, never taken for the one after it
    during = (f"\n  (the second at train step {change.after.step}; none after training yet)"
              if change.after is not None and change.after.phase != "post" else "")
    return f"held-out accuracy {shown}{delta}, {len(run.evaluations)} evaluations{during}"


def text(runs: list[Run]) -> str:
    """One block per run (scripts/metrics/compare.py puts several side by side when they fit)."""
    blocks = []
    for run in runs:
        lines = run_lines(run)
        accuracy = accuracy_line(run)
        blocks.append("\n".join(lines[:2] + ([accuracy] if accuracy else []) + lines[2:]))
    return "\n\n".join(blocks) + "\n"


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None  # JSON has no NaN


def as_json(runs: list[Run]) -> dict:
    return {"runs": [{
        "run": run.name,
        "source": run.source,
        "event_files": list(run.event_files),
        "differs": list(run.differs),
        "evaluations": [{key: entry.get(key) for key in ("phase", "step", "corr", "total", "accuracy",
                                                          "partial_accuracy", "format_accuracy", "mean_reward")}
                        for entry in run.evaluations],
        "tags": {tag: {"steps": list(series.steps),
                       "train_steps": [paired_step(tag, step) for step in series.steps],
                       "values": [_finite_or_none(v) for v in series.values],
                       "summary": {key: _finite_or_none(value) if isinstance(value, float) else value
                                   for key, value in asdict(summarize(tag, series)).items()}}
                 for tag, series in sorted(run.scalars.items()) if series.values},
    } for run in runs]}
