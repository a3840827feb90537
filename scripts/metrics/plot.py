"""The picture: held-out accuracy, reward, loss, KL and completion length against the step, a 3x2 grid of
panels, every run overlaid on the same axes in its own colour and named in the legend with what it changed
from the recipe, so two settings compare at a glance."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tpu_rl.recipes import UserError
from tpu_rl.scripts.metrics import picture_format
from tpu_rl.scripts.rundata.evaluation import accuracy_points
from tpu_rl.scripts.rundata.events import Run
from tpu_rl.scripts.rundata.tags import PLOTTED_TAGS, paired_step

SIZE_INCHES = (10, 10)
DPI = 100  # 1000 x 1000 pixels
LEGEND_CHARS = 60  # a run's name and changes in the legend, cut beyond this
MARKERS_UP_TO = 30  # points per line; more than that, a plain line reads better


def legend_label(run: Run) -> str:
    """The run's name and, for a run that changed something, what: `qwen3-v6e32-3f2a1b9 (learning_rate=1e-5)`."""
    label = f"{run.name} ({', '.join(run.differs)})" if run.differs else run.name
    return label if len(label) <= LEGEND_CHARS else label[:LEGEND_CHARS - 1] + "…"


def _accuracy_panel(ax, runs: list[Run]) -> None:
    ax.set_title("held-out accuracy")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (%)")
    ax.grid(alpha=0.3)
    for index, run in enumerate(runs):
        steps, values = accuracy_points(run.evaluations)
        if steps:
            ax.plot(steps, values, color=f"C{index}", label=legend_label(run), linewidth=1.5, marker="o", markersize=4)
    if ax.get_lines():
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no evaluation in the run records", transform=ax.transAxes, ha="center", va="center",
                color="gray")


def figure(runs: list[Run], title: str) -> Figure:
    """The figure, drawn on the Agg canvas (no display, no pyplot state): the accuracy panel (from the run
    records), then one axes per PLOTTED_TAGS entry, one line per run that has the tag, the legend naming
    the runs. Every point sits at the train step it belongs to (tags.paired_step)."""
    fig = Figure(figsize=SIZE_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title)
    axes = list(fig.subplots(3, 2).flat)
    _accuracy_panel(axes[0], runs)
    axes[-1].set_axis_off()
    for ax, tag in zip(axes[1:], PLOTTED_TAGS):
        ax.set_title(tag.label)
        ax.set_xlabel("step")
        ax.set_ylabel(tag.name)
        ax.grid(alpha=0.3)
        for index, run in enumerate(runs):
            series = run.scalars.get(tag.name)
            if series and series.values:
                steps = [paired_step(tag.name, step) for step in series.steps]  # a reward at the step it fed
                ax.plot(steps, series.values, color=f"C{index}", label=legend_label(run), linewidth=1.5,
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
