"""The commands that report on what was done: `tpu-rl metrics` (a run's scalars) and `tpu-rl plan-review`
(what a change does to the stacks, manifests and costs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli.cloud import reach_seconds
from tpu_rl.scripts.cli.core import app, cloud_settings, handled, say, write_file
from tpu_rl.scripts.metrics import PICTURE_FORMATS

PICTURES = ", ".join(f".{name}" for name in PICTURE_FORMATS)


@app.command()
@handled
def metrics(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
            runs: Optional[list[str]] = typer.Option(None, "--run", metavar="NAME",
                                                     help="A run of the recipe in the bucket; repeat to compare."),
            sweep: Optional[str] = typer.Option(None, "--sweep", metavar="NAME",
                                                help="Every run of this sweep (tpu-rl sweep), side by side."),
            sources: Optional[list[str]] = typer.Option(
                None, "--from", metavar="DIR_OR_GS_URL", help="A directory of event files copied elsewhere; repeatable."),
            png: Optional[Path] = typer.Option(None, "--png", metavar="FILE",
                                               help="Also draw accuracy, reward, loss, KL and completion length to this "
                                               f"file, in the format its extension names ({PICTURES})."),
            as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """A run's held-out accuracy and TensorBoard scalars (first, last, best, sparkline); several runs side by
    side; --png for curves (PNG, SVG or PDF by the file's extension)."""
    from tpu_rl.scripts.metrics import collect, compare, picture_format, table

    recipe = get_recipe(recipe_name)
    if png is not None:  # a format it cannot write is refused before anything is read
        picture_format(png)
    loaded = collect(recipe, runs or [], sources or [], lambda: cloud_settings("metrics", recipe.platform),
                     reach_seconds(), sweep, lambda line: say(line, err=as_json))
    if png is not None:
        from tpu_rl.scripts.metrics import plot

        plot.write_picture(plot.figure(loaded, f"{recipe.name}: TensorBoard scalars"), png)
    if as_json:
        typer.echo(json.dumps(table.as_json(loaded), indent=2))
    else:
        typer.echo(compare.view(loaded), nl=False)
    if png is not None:
        say(f"wrote {png}", err=as_json)


@app.command("plan-review")
@handled
def plan_review(
        base: Optional[str] = typer.Option(None, "--base", help="Git ref to compare with (default: merge base with main)."),
        changed_stacks: Optional[Path] = typer.Option(
            None, "--changed-stacks", help="Also write the names of the changed stacks to this file, one a line."),
) -> None:
    """Show what this change does to the stacks, manifests and cost estimates (Markdown)."""
    from tpu_rl.scripts.plan_review import review

    result = review(base)
    if changed_stacks is not None:
        write_file(changed_stacks, "".join(f"{name}\n" for name in result.changed_stacks), "--changed-stacks")
    typer.echo(result.markdown, nl=False)
