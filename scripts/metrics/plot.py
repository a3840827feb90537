"""The picture: reward, loss, KL and completion length against the step, a 2x2 grid of panels, every run
overlaid on the same axes in its own colour, so two settings compare at a glance."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from recipes import UserError
from scripts.metrics import picture_format
from scripts.metrics.events import Run
from scripts.metrics.tags import PLOTTED_TAGS

SIZE_INCHES = (10, 7)
DPI = 100  # 1000 x 700 pixels
MARKERS_UP_TO = 30  # points per line; more than that, a plain line reads better


def figure(runs: list[Run], title: str) -> Figure:
    """The figure, drawn on the Agg canvas (no display, no pyplot state): one axes per PLOTTED_TAGS entry,
    one line per run that has the tag, the legend naming the runs."""
    fig = Figure(figsize=SIZE_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title)
    for ax, tag in zip(fig.subplots(2, 2).flat, PLOTTED_TAGS):
        ax.set_title(tag.label)
        ax.set_xlabel("step")
        ax.set_ylabel(tag.name)
        ax.grid(alpha=0.3)
        for index, run in enumerate(runs):
            series = run.scalars.get(tag.name)
            if series and series.values:
                ax.plot(series.steps, series.values, color=f"C{index}", label=run.name, linewidth=1.5,
                        marker="o" if len(series.values) <= MARKERS_UP_TO else None, markersize=3)
        if ax.get_lines():
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not in the event files", transform=ax.transAxes, ha="center", va="center",
                    color="gray")
    return fig


def write_picture(fig: Figure, path: Path) -> None:
    """The figure in the format the file's extension names (picture_format)."""
    file_format = picture_format(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=file_format)
    except OSError as error:
        raise UserError(f"--png: cannot write {path} ({error.strerror or type(error).__name__}): "
                        "pass a writable path") from None
