"""`tpu-rl`: the operator CLI. Thin on purpose: parse, call scripts/* and recipes/*, print.

Every command ends through `_handled`: bad input prints one line and exits 2 without a traceback, other
outcomes get their own exit code (scripts.outcome.ExitCode, documented in the README). Usage errors
(a missing argument, an unknown option) are one line too, exit 2 (`_OneLineErrors`).

Start-up is what the offline commands cost (`make bench-cli`), so the kubernetes and Google clients,
rich and the retry machinery are imported inside the commands that use them, never at module level.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from typer.core import TyperGroup

from recipes import STEPS, UserError, all_recipes, get_recipe, load_settings
from scripts.outcome import EXIT_CODES_HELP, ExitCode, Interrupted, Outcome, PreflightFailed, foreign_ending

if TYPE_CHECKING:
    from rich.console import Console

    from recipes import Recipe, Settings

POLL_ENV = "TPU_RL_POLL_SECONDS"  # how often `run` polls while waiting (default 15)
RETRY_DELAY_ENV = "TPU_RL_RETRY_BASE_SECONDS"  # first backoff delay of API retries (default 1)
REQUEST_TIMEOUT_ENV = "TPU_RL_REQUEST_TIMEOUT_SECONDS"  # per Kubernetes API request (default 30)
PIPED_WIDTH = 200  # output that is neither a terminal nor sized by COLUMNS (a file, CI logs)


def _usage_error_types() -> tuple[type[Exception], type[Exception] | tuple, type[Exception]]:
    """UsageError, NoArgsIsHelpError and Abort of the click that typer runs on (typer 0.29 vendors its
    own copy as typer._click; earlier releases use click): found through typer's public BadParameter.
    Click before 8.2 has no NoArgsIsHelpError (it printed the help itself): `except ()` catches nothing."""
    import importlib

    exceptions = importlib.import_module(typer.BadParameter.__module__)
    return exceptions.UsageError, getattr(exceptions, "NoArgsIsHelpError", ()), typer.Abort


class _OneLineErrors(TyperGroup):
    """Click's usage errors as one line, `error: <what>; see <command> --help`, exit 2, like every other
    refusal; Ctrl-C at a prompt (click's Abort) exits 130 like any interruption."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        usage_error, no_args_is_help, abort = _usage_error_types()
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else ExitCode.OK
        except no_args_is_help as error:  # a bare `tpu-rl` or `tpu-rl secret`: the help, as click shows it
            error.show()
            code = error.exit_code
        except usage_error as error:
            message = error.format_message().rstrip(".")
            command = error.ctx.command_path if error.ctx is not None else "tpu-rl"
            typer.echo(f"error: {message[:1].lower()}{message[1:]}; see `{command} --help`", err=True)
            code = ExitCode.BAD_INPUT
        except abort:
            typer.echo("error: interrupted", err=True)
            code = ExitCode.INTERRUPTED
        if not standalone_mode:
            return int(code)
        sys.exit(int(code))


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"tpu-rl {version('tpu-rl')}")
        raise typer.Exit()


# Plain (not rich) help: it fits any terminal, costs no rich import, and shows flags as flags (typer
# 0.29's rich help prints `<bool>` after every flag, --help included).
_APP_SETTINGS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(cls=_OneLineErrors, help=f"GRPO post-training with MaxText on Cloud TPU v6e. {EXIT_CODES_HELP}",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings=_APP_SETTINGS)
secret_app = typer.Typer(help="The Hugging Face token in Secret Manager.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(secret_app, name="secret")


@app.callback()
def _app(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    pass


def _console() -> Console:
    from rich.console import Console

    # A terminal, or COLUMNS, sets the width; other output (a file, CI logs) is not cut at 80 columns.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH
    return Console(soft_wrap=True, highlight=False, width=width)


def _fail(code: int, message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(int(code))


def _handled(command):
    """Turn every expected ending into one line on stderr and a distinct exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except UserError as error:
            raise _fail(ExitCode.BAD_INPUT, str(error)) from None
        except Outcome as error:
            raise _fail(error.code, str(error)) from None
        except KeyboardInterrupt:
            raise _fail(ExitCode.INTERRUPTED, "interrupted") from None
        except Exception as error:  # a cloud library's own exception: classified without importing any
            ending = foreign_ending(error)
            if ending is None:
                raise
            raise _fail(*ending) from None

    return wrapper


def _cloud_settings(recipe: Recipe | None = None) -> Settings:
    """Settings for a command that talks to a cloud: never the example."""
    settings = load_settings()
    if settings.is_example:
        raise UserError(f"settings are the embedded example (PROJECT={settings.project}), which can never reach a "
                        "cloud: export your own PROJECT, REGION, ZONE, CLUSTER_NAME and GCS_BUCKET")
    return settings.for_recipe(recipe) if recipe else settings


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise UserError(f"{name}='{raw}' is not a number of seconds") from None


def _stdin_is_a_terminal() -> bool:
    return sys.stdin.isatty()


def _ask(question: str) -> bool:
    """A yes/no question in the terminal. Ctrl-C (or Ctrl-D) there is an interruption, exit 130, not a
    failed step: typer.confirm turns both into Abort. Questions come before anything is submitted."""
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:
        raise Interrupted("interrupted at the prompt; nothing was submitted or deleted") from None


def make_session(recipe: Recipe, settings: Settings):
    """The one place a pipeline Session is built (tests replace sleeps through the env knobs above)."""
    from scripts.cloud.clients import Clients
    from scripts.pipeline.session import Session
    from scripts.cloud.retry import RetryPolicy

    policy = RetryPolicy(base_delay=_float_env(RETRY_DELAY_ENV, 1.0),
                         request_timeout=_float_env(REQUEST_TIMEOUT_ENV, 30.0))
    return Session(recipe, settings, Clients(settings), console=_console(), policy=policy,
                   poll_interval=_float_env(POLL_ENV, 15.0), sleep=policy.sleep,
                   confirm=_ask if _stdin_is_a_terminal() else None)


def _write(path: Path, text: str, option: str) -> None:
    """Write a file the user asked for; a path that cannot be written is bad input, not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise UserError(f"{option}: cannot write {path} ({error.strerror or type(error).__name__}): "
                        "pass a writable path") from None


# -- offline commands ---------------------------------------------------------------------------------
def recipe_facts(recipe: Recipe) -> dict:
    from recipes.cost import hourly_estimate

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
        "image": recipe.maxtext.image if recipe.is_gke else None,
        "pip": None if recipe.is_gke else recipe.maxtext.pip,
        "maxtext_version": recipe.maxtext_version,
        "capacity": recipe.capacity,
        "hourly_usd_estimate": round(estimate.total, 2),
        "hourly_estimate": estimate.summary(),
        "description": recipe.description,
    }


RECIPE_COLUMNS = ("recipe", "model", "platform", "chips", "hosts", "machine type", "image / pip", "MaxText", "$/h")


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
            _image_or_pip(item), item["maxtext_version"], item["hourly_estimate"])))
    return table


def _recipes_stacked(facts: list[dict]) -> list[str]:
    """The table's facts, one recipe per block of short lines: for a terminal too narrow for the table."""
    from rich.markup import escape

    lines = []
    for item in facts:
        slices = f"{item['slices']} × " if item["slices"] > 1 else ""
        runs = "gke with Pathways" if item["pathways"] else item["platform"]
        lines += [f"[bold]{escape(item['name'])}[/]  {escape(item['hourly_estimate'])}",
                  f"  model  {escape(item['model'])}",
                  f"  TPU    {slices}{item['accelerator_type']} {item['topology']}: {item['chips']} chips, "
                  f"{item['hosts']} host{'s' if item['hosts'] != 1 else ''} of {item['machine_type']}",
                  f"  runs   {runs}: {escape(_image_or_pip(item))} (MaxText {item['maxtext_version']})"]
    return lines


@app.command("recipes")
@_handled
def recipes_command(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the recipes: model, chips, hosts, machine type, image, MaxText version and an hourly estimate."""
    from rich.measure import Measurement

    from recipes.cost import ESTIMATE_NOTE

    facts = [recipe_facts(recipe) for recipe in all_recipes().values()]
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    console = _console()
    title = f"tpu-rl recipes (cost: {ESTIMATE_NOTE})"
    table = _recipes_table(facts, title)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum  # nothing cut
    if natural <= console.width:
        console.print(table)
        return
    console.print(title)
    for line in _recipes_stacked(facts):
        console.print(line)


@app.command()
@_handled
def render(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
           out: Path = typer.Option(..., "--out", help="Directory for the rendered files.")) -> None:
    """Write convert.yaml, train.yaml and export.yaml (GKE) or startup.sh (VM) with the current settings."""
    import jobs

    recipe = get_recipe(recipe_name)
    settings = load_settings(allow_example=True)
    if recipe.is_gke:
        files = {f"{step}.yaml": jobs.manifest_yaml(manifest)
                 for step, manifest in jobs.render_manifests(recipe, settings).items()}
    else:
        files = {"startup.sh": jobs.render_startup_script(recipe, settings)}
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory: pass a directory")
    for name, text in files.items():
        _write(out / name, text, "--out")
    note = " (example settings: export your own before `run`)" if settings.is_example else ""
    typer.echo(f"wrote {', '.join(str(out / name) for name in files)} for {recipe.name} with settings from "
               f"{settings.source}{note}")


# -- cloud commands -----------------------------------------------------------------------------------
@app.command()
@_handled
def preflight(recipe_name: str = typer.Argument(..., metavar="RECIPE")) -> None:
    """Check capacity, bucket and token before spending money; every failed check says how to fix it."""
    from scripts.cloud.clients import Clients
    from scripts.pipeline.preflight import run_checks

    recipe = get_recipe(recipe_name)
    settings = _cloud_settings(recipe)
    results = run_checks(Clients(settings), recipe, settings)
    console = _console()
    for check in results:
        mark = "[green]pass[/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{mark}  {check.name}: {check.detail}")
    failed = [check for check in results if not check.ok]
    if failed:
        raise PreflightFailed(f"{len(failed)} of {len(results)} preflight checks failed for {recipe.name}")
    console.print(f"[green]preflight passed[/] for {recipe.name}")


@secret_app.command("set")
@_handled
def secret_set() -> None:
    """Add the Hugging Face token from stdin as a new Secret Manager version (never pass it as an argument)."""
    import getpass

    from scripts.cloud import hf_token
    from scripts.cloud.clients import Clients

    settings = _cloud_settings()
    raw = getpass.getpass("Hugging Face token: ") if sys.stdin.isatty() else sys.stdin.read()
    token = hf_token.clean_token(raw)
    version = hf_token.add_version(Clients(settings).secrets(), settings, token)
    typer.echo(f"added {version} ({len(token)} characters); `tpu-rl run` copies it into the cluster")


@app.command()
@_handled
def run(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
        steps: str = typer.Option(",".join(STEPS), "--steps", help="Comma-separated subset of the steps."),
        follow_logs: bool = typer.Option(False, "--follow-logs", help="Stream the main pod's logs while waiting."),
        replace: bool = typer.Option(False, "--replace",
                                     help="Delete a finished or failed JobSet of an earlier run and submit again.")) -> None:
    """Run the pipeline: submit each step, wait, verify its output in GCS; rerun to resume or reattach."""
    from scripts.pipeline.gke import run_gke
    from scripts.pipeline.session import parse_steps

    recipe = get_recipe(recipe_name)
    wanted = parse_steps(steps)
    settings = _cloud_settings()
    session = make_session(recipe, settings)
    if recipe.is_gke:
        run_gke(session, wanted, replace=replace, follow_logs=follow_logs)
    else:
        from scripts.pipeline.vm import run_vm

        run_vm(session, wanted, follow_logs=follow_logs)


def status_view(recipe_name: str, bucket: str, report):
    """The status report in any terminal width: one block per step, the step's name beside its state
    (pods, time) and its output; long lines (an output's paths) wrap inside the block, nothing is cut."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for row in report.rows:
        state = ", ".join(part for part in (row.state, row.pods and f"pods {row.pods}", row.time) if part)
        grid.add_row(Text(row.step, style="bold"), Text(f"{state}\noutput {row.output}"))
    title = Text(f"{recipe_name}: {report.where}, outputs in gs://{bucket}")
    return Group(title, grid, *([Text(report.note)] if report.note else []))


@app.command()
@_handled
def status(recipe_name: str = typer.Argument(..., metavar="RECIPE")) -> None:
    """Each step's state (JobSet or VM progress), pods, time and whether its output is verified in GCS."""
    recipe = get_recipe(recipe_name)
    session = make_session(recipe, _cloud_settings())
    if recipe.is_gke:
        from scripts.pipeline.gke import status_gke

        report = status_gke(session)
    else:
        from scripts.pipeline.vm import status_vm

        report = status_vm(session)
    session.console.print(status_view(recipe.name, session.settings.gcs_bucket, report), soft_wrap=False)


@app.command()
@_handled
def logs(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
         step: str = typer.Argument(..., metavar="STEP", help="convert, train or export"),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming."),
         tail: Optional[int] = typer.Option(200, "--tail", min=0, help="Lines from the end (0 = all).")) -> None:
    """The main container's log of a step (the Pathways head for train), or the VM's serial console."""
    from scripts.pipeline.gke import logs_gke
    from scripts.pipeline.session import parse_step

    recipe = get_recipe(recipe_name)
    parse_step(step)
    session = make_session(recipe, _cloud_settings())
    if recipe.is_gke:
        lines = logs_gke(session, step, follow, tail or None)
    else:
        from scripts.pipeline.vm import logs_vm

        lines = logs_vm(session, step, tail or None)
    for line in lines:
        typer.echo(line)


@app.command()
@_handled
def metrics(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
            runs: Optional[list[str]] = typer.Option(None, "--run", metavar="NAME",
                                                     help="A run of the recipe in the bucket; repeat to compare."),
            sources: Optional[list[str]] = typer.Option(
                None, "--from", metavar="DIR_OR_GS_URL", help="A directory of event files copied elsewhere; repeatable."),
            png: Optional[Path] = typer.Option(None, "--png", metavar="FILE",
                                               help="Also draw reward, loss, KL and completion length to this PNG."),
            as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """A run's TensorBoard scalars: first, last and best value and a sparkline per tag; --png for curves."""
    from scripts.metrics import collect, table

    recipe = get_recipe(recipe_name)
    loaded = collect(recipe, runs or [], sources or [], _cloud_settings)
    if png is not None:
        from scripts.metrics import plot

        plot.write_png(plot.figure(loaded, f"{recipe.name}: TensorBoard scalars"), png)
    if as_json:
        typer.echo(json.dumps(table.as_json(loaded), indent=2))
    else:
        typer.echo(table.text(loaded), nl=False)
    if png is not None:
        typer.echo(f"wrote {png}", err=as_json)


@app.command("plan-review")
@_handled
def plan_review(
        base: Optional[str] = typer.Option(None, "--base", help="Git ref to compare with (default: merge base with main)."),
        changed_stacks: Optional[Path] = typer.Option(
            None, "--changed-stacks", help="Also write the names of the changed stacks to this file, one a line."),
) -> None:
    """Show what this change does to the stacks, manifests and cost estimates (Markdown)."""
    from scripts.plan_review import review

    result = review(base)
    if changed_stacks is not None:
        _write(changed_stacks, "".join(f"{name}\n" for name in result.changed_stacks), "--changed-stacks")
    typer.echo(result.markdown, nl=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
