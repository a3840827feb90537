"""The commands that need no cloud: `tpu-rl recipes` and `tpu-rl render`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from tpu_rl.recipes import UserError, all_recipes, example_settings, get_recipe, load_settings
from tpu_rl.recipes.runs.schedule import schedule_warning
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.settings.specs import needs
from tpu_rl.scripts.cli.core import (DATA_PROCESSOR_HELP, REWARDS_HELP, RUN_HELP, SET_HELP, UNCHECKED_IMPORTS_HELP,
                              UNUSUAL_HELP, app, handled, make_console, say, table_or_lines, write_file)
from tpu_rl.scripts.pipeline.platforms import platform_for

if TYPE_CHECKING:
    from tpu_rl.recipes import Recipe


def recipe_facts(recipe: Recipe) -> dict:
    from tpu_rl.recipes.costs.run import hourly_estimate
    from tpu_rl.recipes.costs.run import evaluation_estimate

    shape = recipe.shape
    estimate = hourly_estimate(recipe)
    return {
        "name": recipe.name,
        "platform": recipe.platform,
        "pathways": recipe.pathways,
        "model": recipe.model.hf_repo,
        "accelerator_type": shape.accelerator_type,
        "topology": shape.topology,
        "slices": shape.slices,
        "chips": shape.total_chips,
        "hosts": shape.total_hosts,
        "machine_type": shape.machine_type,
        **platform_for(recipe).runtime(recipe),  # "image" and "pip", one of them None
        "maxtext_version": recipe.maxtext_version,
        "capacity": recipe.capacity,
        "hourly_usd_estimate": round(estimate.total, 2),
        "hourly_estimate": estimate.summary(),
        **_standing_facts(recipe),
        "evaluation_estimate": evaluation_estimate(recipe).summary(),
        "description": recipe.description,
        **_fit_facts(recipe),
    }


def _standing_facts(recipe: Recipe) -> dict:
    """What the recipe's stack bills with no run, in the account `run`, `runs` and `down` give
    (recipes/costs/standing.py; a TPU VM as its run leaves it by default, stopped)."""
    from tpu_rl.recipes.costs.standing import account, idle_bill

    bill = idle_bill(recipe)
    return {"idle_usd_per_hour": round(bill.total, 2), "idle": account(bill, recipe)}


def _fit_facts(recipe: Recipe) -> dict:
    """What one chip holds at the peak of the recipe's own plan (its shipped compile, scripts/fit), and the
    settings changed from the seed's so that it fits."""
    from tpu_rl.scripts.fit.account import gib
    from tpu_rl.scripts.fit.check import shipped_fit

    fit = shipped_fit(RunSpec.of_catalog(recipe), example_settings())
    chip = "-" if fit is None or fit.peak is None else f"{gib(fit.peak).removesuffix(' GiB')}/{gib(fit.limit)}"
    changed = {key: {"recipe": value, "seed": seed} for key, (value, seed) in recipe.rl.changed_to_fit().items()}
    return {"hbm_per_chip": chip, "fits": None if fit is None else fit.fits, "changed_to_fit": changed}


# What the leading $/h of `recipes` is: the stack while a run is active, above the account of what it bills with
# none (recipes/costs/standing.py account), so that the screen's two sets of figures each say what they are.
DURING_RUN = "$/h during a run"
RECIPE_COLUMNS = ("recipe", "model", "platform", "chips", "hosts", "machine type", "image / pip", "MaxText",
                  "HBM a chip", DURING_RUN)


def _image_or_pip(item: dict) -> str:
    return item["image"].rsplit("/", 1)[-1] if item["image"] else item["pip"]  # full reference in --json


def _recipes_table(facts: list[dict], title: str):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    for column in RECIPE_COLUMNS:  # names and models are copied into commands: never cut
        table.add_column(column, no_wrap=True)
    for item in facts:
        table.add_row(*(escape(str(cell)) for cell in (
            item["name"], item["model"], item["platform"], item["chips"], item["hosts"], item["machine_type"],
            _image_or_pip(item), item["maxtext_version"], item["hbm_per_chip"], item["hourly_estimate"])))
    return table


def _recipes_stacked(facts: list[dict]) -> list[str]:
    """The table's facts, one recipe per block of short lines: for a terminal too narrow for the table."""
    from rich.markup import escape

    lines = []
    for item in facts:
        slices = f"{item['slices']} × " if item["slices"] > 1 else ""
        runs = "gke with Pathways" if item["pathways"] else item["platform"]
        lines += [f"[bold]{escape(item['name'])}[/]  during a run: {escape(item['hourly_estimate'])}",
                  f"  model  {escape(item['model'])}",
                  f"  TPU    {slices}{item['accelerator_type']} {item['topology']}: {item['chips']} chips, "
                  f"{item['hosts']} host{'s' if item['hosts'] != 1 else ''} of {item['machine_type']}",
                  f"  runs   {runs}: {escape(_image_or_pip(item))} (MaxText {item['maxtext_version']})",
                  f"  HBM    {item['hbm_per_chip']} a chip at the peak (`tpu-rl fit {escape(item['name'])}`)"]
    return lines


@app.command("recipes")
@handled
def recipes_command(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the recipes: model, chips, hosts, machine type, image, MaxText version, what the stack bills an hour
    during a run, and what it bills with no run and who can stop that."""
    from rich.markup import escape

    from tpu_rl.recipes.costs.run import ESTIMATE_NOTE

    settings = load_settings(allow_example=True, needs=needs("recipes"))  # CAPACITY changes what a recipe costs
    facts = [_listed_facts(settings, recipe) for recipe in all_recipes().values()]
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    console = make_console()
    title = f"tpu-rl recipes (cost: {ESTIMATE_NOTE})"
    table_or_lines(console, _recipes_table(facts, title), title, _recipes_stacked(facts))
    for item in facts:
        for line in item["idle"]:  # what still bills between runs, and who can stop it
            console.print(escape(line))
        if item["unavailable"]:
            console.print(f"{item['name']}: {item['unavailable']}")
        for key, values in item["changed_to_fit"].items():
            console.print(f"{item['name']}: {key}={values['recipe']} (the seed's: {values['seed']}) so that it "
                          "fits its chips (docs/fit.md)")


def _listed_facts(settings, recipe: Recipe) -> dict:
    """A recipe's facts under CAPACITY; one CAPACITY leaves nothing to run on is listed as written, with no
    estimate and the reason (its commands refuse with the same line)."""
    problem = settings.capacity_problem(recipe)
    if problem is None:
        return {**recipe_facts(settings.with_capacity(recipe)), "unavailable": None}
    return {**recipe_facts(recipe), "hourly_usd_estimate": None, "hourly_estimate": "- (see below)",
            "unavailable": problem}


STDOUT = "-"  # --out - writes to stdout


@app.command()
@handled
def render(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
           out_text: str = typer.Option(..., "--out", help="Directory for the rendered files, or - for stdout (one "
                                        "YAML stream of the JobSets and ConfigMap, or the VM's startup script)."),
           sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
           run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME", help=RUN_HELP),
           unusual_values: bool = typer.Option(False, "--unusual-values", help=UNUSUAL_HELP),
           rewards: Optional[str] = typer.Option(None, "--rewards", metavar="FILE.py:FN,...", help=REWARDS_HELP),
           data_processor: Optional[str] = typer.Option(None, "--data-processor", metavar="FILE.py",
                                                        help=DATA_PROCESSOR_HELP),
           unchecked_imports: bool = typer.Option(False, "--unchecked-imports", help=UNCHECKED_IMPORTS_HELP)) -> None:
    """Write what `run` submits with the same options and current settings: convert.yaml, train.yaml and
    export.yaml (GKE), with user-files.yaml, the ConfigMap of --rewards/--data-processor; or startup.sh (VM)."""
    from tpu_rl.recipes.runs.spec import run_name as name_of
    from tpu_rl.scripts.cli.run_input import run_of

    if not out_text.strip():  # Path("") is the working directory: an empty --out names nothing
        raise UserError(f"--out '{out_text}' names no directory: pass a directory for the rendered files, "
                        "or - for stdout")
    out = Path(out_text)

    recipe = get_recipe(recipe_name)
    needed = needs("render", recipe.platform)
    settings = load_settings(allow_example=True, needs=needed)
    recipe = settings.with_capacity(recipe)
    settings.for_recipe(recipe, needed)
    spec = run_of(recipe, settings, sets, run_name, rewards, data_processor, unchecked_imports,
                  usual_only=not unusual_values)
    rendered = platform_for(recipe).render(spec, settings)
    warning = schedule_warning(spec.recipe)
    if warning:
        typer.echo(warning, err=True)
    note = " (example settings: export your own before `run`)" if settings.is_example else ""
    what = f"for {recipe.name}, run {name_of(spec)}, with settings from {settings.source}{note}"
    if str(out) == STDOUT:
        typer.echo(rendered.stream, nl=False)
        say(f"rendered {rendered.what} {what}", err=True)
        return
    files = rendered.files
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory: pass a directory")
    for name, text in files.items():
        write_file(out / name, text, "--out")
    say(f"wrote {', '.join(str(out / name) for name in files)} {what}")


@app.command("fit")
@handled
def fit_command(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
                sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
                unusual_values: bool = typer.Option(False, "--unusual-values", help=UNUSUAL_HELP),
                as_json: bool = typer.Option(False, "--json", help="Machine-readable output: the account and "
                                             "the compiler's figures.")) -> None:
    """Compile the run's trainer programs for the recipe's TPU topology on this machine (XLA's TPU
    compiler; no TPU, cloud or settings needed) and show what one chip holds at its peak. Exit 2 if the
    plan cannot fit with the margin; `run` and `sweep` refuse it the same way."""
    from tpu_rl.scripts.cli.run_input import run_of
    from tpu_rl.scripts.fit.check import fit_of

    recipe = get_recipe(recipe_name)
    settings = load_settings(allow_example=True, needs=needs("fit", recipe.platform))
    spec = run_of(settings.with_capacity(recipe), settings, sets, None, usual_only=not unusual_values)
    fit = fit_of(spec, settings, say=lambda line: say(f"fit: {line}", err=True))
    if as_json:
        typer.echo(json.dumps({"recipe": recipe.name, "fits": fit.fits, "peak_bytes": fit.peak,
                               "limit_bytes": fit.limit, "margin_bytes": fit.margin, "compiled": fit.result}, indent=2))
    else:
        console = make_console()
        width = max(len(name) for name, _ in fit.rows())
        for name, text in fit.rows():
            console.print(f"{name.ljust(width)}  {text}")
        if fit.fits:
            console.print(fit.summary())
    if not fit.fits:
        raise UserError(fit.refusal(recipe.name))
