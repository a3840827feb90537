"""`tpu-rl`: the operator CLI. Thin on purpose: parse, call scripts/* and recipes/*, print.

Every command ends through `_handled`: bad input prints one line and exits 2 without a traceback, other
outcomes get their own exit code (scripts.outcome.ExitCode, documented in the README).
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from recipes import STEPS, Recipe, Settings, UserError, all_recipes, get_recipe, load_settings
from recipes.cost import ESTIMATE_NOTE
from scripts.clients import Clients
from scripts.outcome import EXIT_CODES_HELP, ExitCode, Outcome, PreflightFailed
from scripts.retry import RetryPolicy

POLL_ENV = "TPU_RL_POLL_SECONDS"  # how often `run` polls while waiting (default 15)
RETRY_DELAY_ENV = "TPU_RL_RETRY_BASE_SECONDS"  # first backoff delay of API retries (default 1)
REQUEST_TIMEOUT_ENV = "TPU_RL_REQUEST_TIMEOUT_SECONDS"  # per Kubernetes API request (default 30)

app = typer.Typer(help=f"GRPO post-training with MaxText on Cloud TPU v6e. {EXIT_CODES_HELP}",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
secret_app = typer.Typer(help="The Hugging Face token in Secret Manager.", no_args_is_help=True)
app.add_typer(secret_app, name="secret")


def _console() -> Console:
    # Piped output (a file, CI logs) is not cut at 80 columns.
    width = None if sys.stdout.isatty() else 200
    return Console(soft_wrap=True, highlight=False, width=width)


def _fail(code: int, message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(int(code))


def _handled(command):
    """Turn every expected ending into one line on stderr and a distinct exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError
        from kubernetes.client.exceptions import ApiException
        from requests import RequestException
        from urllib3.exceptions import HTTPError

        from scripts.retry import describe

        try:
            return command(*args, **kwargs)
        except UserError as error:
            raise _fail(ExitCode.BAD_INPUT, str(error)) from None
        except Outcome as error:
            raise _fail(error.code, str(error)) from None
        except ApiException as error:
            raise _fail(ExitCode.API_ERROR, f"Kubernetes API error: {describe(error)}") from None
        except GoogleAPIError as error:
            raise _fail(ExitCode.API_ERROR, f"Google API error: {type(error).__name__}: {str(error)[:200]}") from None
        except GoogleAuthError as error:  # e.g. RefreshError: the stored login expired or was revoked
            raise _fail(ExitCode.API_ERROR, f"Google did not accept your credentials ({describe(error)}): run "
                                            "`gcloud auth application-default login`") from None
        except RequestException as error:  # the REST clients (Compute, and any redirected API) could not connect
            raise _fail(ExitCode.API_ERROR, f"cannot reach a Google API ({describe(error)}): check the network "
                                            "and run the command again") from None
        except HTTPError as error:  # a followed log stream broke midway (requests are retried in scripts.retry)
            raise _fail(ExitCode.API_ERROR, f"lost the connection to the cluster ({describe(error)}): "
                                            "run the command again") from None
        except KeyboardInterrupt:
            raise _fail(ExitCode.INTERRUPTED, "interrupted") from None

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


def make_session(recipe: Recipe, settings: Settings):
    """The one place a pipeline Session is built (tests replace sleeps through the env knobs above)."""
    from scripts.pipeline import Session

    policy = RetryPolicy(base_delay=_float_env(RETRY_DELAY_ENV, 1.0),
                         request_timeout=_float_env(REQUEST_TIMEOUT_ENV, 30.0))
    return Session(recipe, settings, Clients(settings), console=_console(), policy=policy,
                   poll_interval=_float_env(POLL_ENV, 15.0), sleep=policy.sleep,
                   confirm=(lambda question: typer.confirm(question, default=False)) if sys.stdin.isatty() else None)


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


@app.command("recipes")
@_handled
def recipes_command(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the recipes with chips, hosts, machine type, image, MaxText version and an hourly estimate."""
    facts = [recipe_facts(recipe) for recipe in all_recipes().values()]
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    table = Table(title=f"tpu-rl recipes (cost: {ESTIMATE_NOTE})")
    for column in ("recipe", "platform", "chips", "hosts", "machine type", "image / pip", "MaxText"):
        # Names are copied into commands: never cut them; a narrow terminal wraps the cost column instead.
        table.add_column(column, no_wrap=True)
    table.add_column("$/h", overflow="fold")
    for item in facts:
        image = item["image"].rsplit("/", 1)[-1] if item["image"] else item["pip"]  # full reference in --json
        table.add_row(*(escape(str(cell)) for cell in (
            item["name"], item["platform"], item["chips"], item["hosts"], item["machine_type"], image,
            item["maxtext_version"], item["hourly_estimate"])))
    _console().print(table)


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
    from scripts.preflight import run_checks

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
    from scripts import hf_token

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
    from scripts.pipeline import parse_steps, run_gke

    recipe = get_recipe(recipe_name)
    wanted = parse_steps(steps)
    settings = _cloud_settings()
    session = make_session(recipe, settings)
    if recipe.is_gke:
        run_gke(session, wanted, replace=replace, follow_logs=follow_logs)
    else:
        from scripts.vm import run_vm

        run_vm(session, wanted, follow_logs=follow_logs)


@app.command()
@_handled
def status(recipe_name: str = typer.Argument(..., metavar="RECIPE")) -> None:
    """Each step's JobSet (or VM marker), pods and whether its output is verified in GCS."""
    from scripts.pipeline import status_gke

    recipe = get_recipe(recipe_name)
    session = make_session(recipe, _cloud_settings())
    if recipe.is_gke:
        rows = status_gke(session)
    else:
        from scripts.vm import status_vm

        rows = status_vm(session)
    table = Table(title=f"{recipe.name} in gs://{session.settings.gcs_bucket}")
    for column in ("step", "job", "state", "pods", "output"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in (row.step, row.where, row.state, row.pods, row.output)))
    session.console.print(table)


@app.command()
@_handled
def logs(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
         step: str = typer.Argument(..., metavar="STEP", help="convert, train or export"),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming."),
         tail: Optional[int] = typer.Option(200, "--tail", min=0, help="Lines from the end (0 = all).")) -> None:
    """The main container's log of a step (the Pathways head for train), or the VM's serial console."""
    from scripts.pipeline import logs_gke, parse_step

    recipe = get_recipe(recipe_name)
    parse_step(step)
    session = make_session(recipe, _cloud_settings())
    if recipe.is_gke:
        lines = logs_gke(session, step, follow, tail or None)
    else:
        from scripts.vm import logs_vm

        lines = logs_vm(session, step, tail or None)
    for line in lines:
        typer.echo(line)


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
