"""Several runs side by side in 80 columns: one column per run, one row per figure (held-out accuracy
before and after training, then the first, last and best of the summary tags), so runs compare line by
line instead of in stacked tables. Runs are numbered in the header and named (with what they changed from
the recipe) under the table."""

from __future__ import annotations

import math
import textwrap

from tpu_rl.scripts.metrics.table import WIDTH, number, summarize, text
from tpu_rl.scripts.rundata.evaluation import accuracy_change
from tpu_rl.scripts.rundata.events import Run
from tpu_rl.scripts.rundata.tags import COMPLETION_LENGTH, KL, LOSS, REWARD_MEAN, paired_step

LABEL_WIDTH = 18
MIN_COLUMN = 9  # "-1.23e-05" and "40.6→59.4" fit
MAX_COLUMNS = (WIDTH - LABEL_WIDTH) // (MIN_COLUMN + 1)  # beyond this, runs are shown one block each
COMPARED_TAGS = (REWARD_MEAN, LOSS, KL, COMPLETION_LENGTH)


def fits(runs: list[Run]) -> bool:
    return 1 < len(runs) <= MAX_COLUMNS


# issue 37: an evaluation during training is not the one after it; its cell carries its step (`51.6@20`).
DURING_NOTE = "@N: the evaluation at train step N, none after training yet"


def _accuracy(run: Run) -> tuple[str, str, str]:
    change = accuracy_change(run.evaluations)
    before = "-" if change.before is None else f"{change.before.accuracy:.1f}"
    after = "-" if change.after is None else f"{change.after.accuracy:.1f}"
    if change.after is not None and change.after.phase != "post":
        after += f"@{change.after.step}"
    delta = "-" if change.delta is None else f"{change.delta:+.1f}"
    return before, after, delta


def _rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    accuracy = [_accuracy(run) for run in runs]
    rows = [("accuracy before %", [cell[0] for cell in accuracy]), ("accuracy after %", [cell[1] for cell in accuracy]),
            ("accuracy change", [cell[2] for cell in accuracy])]
    for tag in COMPARED_TAGS:
        summaries = [summarize(tag.name, run.scalars[tag.name]) if run.scalars.get(tag.name) and
                     run.scalars[tag.name].values else None for run in runs]
        if not any(summaries):
            continue
        rows.append((f"{tag.row_label} first", [number(s.first) if s else "-" for s in summaries]))
        rows.append((f"{tag.row_label} last", [number(s.last) if s else "-" for s in summaries]))
        if tag.best:
            rows.append((f"{tag.row_label} {tag.best}", [number(s.best) if s and s.best is not None and
                                                     math.isfinite(s.best) else "-" for s in summaries]))
    steps = [max((paired_step(tag, max(series.steps)) for tag, series in run.scalars.items() if series.steps),
                 default=None) for run in runs]
    rows.append(("last step", ["-" if step is None else str(step) for step in steps]))
    return rows


def side_by_side(runs: list[Run]) -> str:
    """The comparison of 2..MAX_COLUMNS runs, every line at most WIDTH columns."""
    width = min(12, (WIDTH - LABEL_WIDTH) // len(runs))
    header = " " * LABEL_WIDTH + "".join(f"run {i + 1}".rjust(width) for i in range(len(runs)))
    lines = [header]
    rows = _rows(runs)
    for label, cells in rows:
        lines.append(label[:LABEL_WIDTH - 1].ljust(LABEL_WIDTH) + "".join(cell[:width - 1].rjust(width) for cell in cells))
    if any("@" in cell for cell in rows[1][1]):  # the row of the accuracy after training
        lines.append(DURING_NOTE)
    lines.append("")
    for index, run in enumerate(runs):
        changed = f" ({', '.join(run.differs)})" if run.differs else ""
        lines += textwrap.wrap(f"run {index + 1}: {run.name}{changed}", WIDTH, subsequent_indent="  ",
                               break_on_hyphens=False)
        lines += textwrap.wrap(run.source, WIDTH, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def view(runs: list[Run]) -> str:
    """What `tpu-rl metrics` prints: several runs side by side when they fit 80 columns, else a block each."""
    return side_by_side(runs) if fits(runs) else text(runs)
