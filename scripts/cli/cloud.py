"""The commands that reach the cloud: `tpu-rl preflight`, `secret set`, `run`, `eval`, `check-rewards` (which
only runs the file locally), `cancel`, `status`, `runs`, `down` and `logs`."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Literal, Optional

import typer

from tpu_rl.recipes import STEPS, UserError, all_recipes, get_recipe
from tpu_rl.recipes.costs.consent import Spend, checked_max_cost
from tpu_rl.recipes.outcome import ApiError, PreflightFailed
from tpu_rl.recipes.runs.schedule import schedule_warning
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.user_files import read_user_files
from tpu_rl.recipes.settings.specs import needs
from tpu_rl.recipes.settings.tuning import MAINTENANCE_GRACE, POLL, REACH, retry_policy
from tpu_rl.scripts.cli import core
from tpu_rl.scripts.cli.core import (DATA_PROCESSOR_HELP, EVAL_SET_HELP, REWARDS_HELP, RUN_HELP, SELECT_SET_HELP,
                              MAX_COST_HELP, REPLACE_HELP, SET_HELP, SKIP_FIT_HELP, YES_HELP, SKIPPED_FIT, UNCHECKED_IMPORTS_HELP, UNUSUAL_HELP, app,
                              cloud_recipe, cloud_settings,
                              handled, make_console, parse_step, parse_steps, say, secret_app, table_or_lines)
from tpu_rl.scripts.cli.views import RUN_COLUMNS, preflight_line, run_cells, runs_stacked, status_json, status_view
from tpu_rl.scripts.pipeline.platforms import platform_for
from tpu_rl.scripts.words import counted

if TYPE_CHECKING:
    from tpu_rl.recipes import Settings
    from tpu_rl.recipes.runs.spec import RunSpec


def reach_seconds() -> float:
    """How long the first contact with an endpoint may take in all (tpu_rl.scripts.cloud.reach)."""
    return REACH.seconds()


BucketUse = Literal["reads", "writes", "none"]


def make_session(spec: RunSpec, settings: Settings, bucket: BucketUse = "reads"):
    """The one place a pipeline Session is built, with the tuning settings (recipes/settings/tuning.py: tests
    shorten the sleeps through them).

    A command that reads the bucket stops first, as `preflight` does, when GCS_BUCKET does not exist; one
    that writes checkpoints there (`run`) also when it is in another region (tpu_rl.scripts.cloud.gcs)."""
    from tpu_rl.scripts.cloud import gcs
    from tpu_rl.scripts.cloud.clients import Clients
    from tpu_rl.scripts.pipeline.session import Session

    policy = retry_policy()
    clients = Clients(settings, reach_seconds=policy.reach_seconds)
    session = Session(spec, settings, clients, console=make_console(), policy=policy,
                      poll_interval=POLL.seconds(), sleep=policy.sleep, maintenance_grace=MAINTENANCE_GRACE.seconds(),
                      confirm=core.asker())
    if bucket != "none":
        gcs.require_bucket(session.clients.storage(), settings, writes=bucket == "writes",
                           within=policy.reach_seconds)
    return session


@app.command()
@handled
def preflight(recipe_name: str = typer.Argument(..., metavar="RECIPE")) -> None:
    """Check capacity, bucket and token before spending money; every failed check says how to fix it."""
    recipe, settings = cloud_recipe("preflight", recipe_name)  # refused before the clouds' libraries load
    from tpu_rl.scripts.cloud.clients import Clients
    from tpu_rl.scripts.pipeline.preflight import run_checks

    results = run_checks(Clients(settings, reach_seconds=reach_seconds()), recipe, settings)
    console = make_console()
    for check in results:
        console.print(preflight_line(check, console.width))
    failed = [check for check in results if not check.ok]
    if failed:
        raise PreflightFailed(f"{len(failed)} of {len(results)} preflight checks failed for {recipe.name}")
    console.print(f"[green]preflight passed[/] for {recipe.name}")


@secret_app.command("set")
@handled
def secret_set() -> None:
    """Add the Hugging Face token from stdin as a new Secret Manager version (never pass it as an argument)."""
    import getpass

    from tpu_rl.scripts.cloud import hf_hub, hf_token
    from tpu_rl.scripts.cloud.clients import Clients

    settings = cloud_settings("secret set")
    raw = getpass.getpass("Hugging Face token: ") if sys.stdin.isatty() else sys.stdin.read(hf_token.TOKEN_READ_CHARS)
    token = hf_token.clean_token(raw)
    clients = Clients(settings, reach_seconds=reach_seconds())
    clients.secrets()  # no Google credentials: said before the Hub is asked
    models = sorted({recipe.model.hf_repo for recipe in all_recipes().values()})
    hf_hub.before_storing(token, models, clients.endpoints.hub, say)
    version = hf_token.add_version(clients, settings, token)
    say(f"added {version} ({len(token)} characters); `tpu-rl run` copies it into the cluster")


def run_session(command: str, recipe_name: str, sets: Optional[list[str]], run_name: Optional[str],
                bucket: BucketUse = "reads", rewards: Optional[str] = None, data_processor: Optional[str] = None,
                unchecked_imports: bool = False, unusual_values: bool = False):
    """The Session of one run of `command`: the RunSpec the settings, --set, --run, --rewards and
    --data-processor make; a reward file is checked (scripts/rewards/check.py) before anything reaches
    the cloud. The settings are what `command` needs (core.cloud_recipe); a command that needs the bucket
    stops first when it does not exist (make_session). A --run names a run that exists, except in `run`
    (tpu_rl.scripts.pipeline.runs.require_run)."""
    from tpu_rl.scripts.cli.run_input import run_recipe

    spec, settings = run_recipe(command, recipe_name, sets, run_name, rewards, data_processor, unchecked_imports,
                                unusual_values)
    uses_bucket = "gcs_bucket" in needs(command, spec.recipe.platform)
    session = make_session(spec, settings, bucket if uses_bucket else "none")
    if run_name is not None and command != "run":  # only `run` starts a run; the others read one
        from tpu_rl.scripts.pipeline.runs import require_run

        require_run(session, uses_bucket)
    return session


@app.command()
@handled
def run(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
        steps: str = typer.Option(",".join(STEPS), "--steps", help="Comma-separated subset of the steps."),
        follow_logs: bool = typer.Option(False, "--follow-logs", help="Stream the main pod's logs while waiting."),
        replace: bool = typer.Option(False, "--replace", help=REPLACE_HELP),
        sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
        run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME", help=RUN_HELP),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, each step's expected time and "
                                     "cost; submit and write nothing."),
        show_manifests: bool = typer.Option(False, "--show-manifests", help="With --dry-run, also print the "
                                            "JobSets it would submit."),
        rewards: Optional[str] = typer.Option(None, "--rewards", metavar="FILE.py:FN,...", help=REWARDS_HELP),
        data_processor: Optional[str] = typer.Option(None, "--data-processor", metavar="FILE.py",
                                                     help=DATA_PROCESSOR_HELP),
        unchecked_imports: bool = typer.Option(False, "--unchecked-imports", help=UNCHECKED_IMPORTS_HELP),
        unusual_values: bool = typer.Option(False, "--unusual-values", help=UNUSUAL_HELP),
        detach: bool = typer.Option(False, "--detach", help="Start the run (or find it) and return at once with "
                                    "the commands that follow it."),
        skip_fit_check: bool = typer.Option(False, "--skip-fit-check", help=SKIP_FIT_HELP),
        yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
        max_cost: Optional[float] = typer.Option(None, "--max-cost", metavar="USD", help=MAX_COST_HELP)) -> None:
    """Run the pipeline: its driver (GKE: a Job in the cluster; VM: the startup script) submits each step,
    waits, verifies its output in GCS; this follows it (Ctrl-C detaches); rerun to reattach or resume."""
    from tpu_rl.recipes.costs.run import costly_run_warning, run_spend
    from tpu_rl.recipes.runs.datasets import data_warning
    from tpu_rl.scripts.cli.run_input import run_recipe

    wanted, max_cost = parse_steps(steps), checked_max_cost(max_cost)
    if show_manifests and not dry_run:
        raise UserError(f"--show-manifests prints what a dry run would submit: add --dry-run, or see the manifests "
                        f"with `tpu-rl render {recipe_name} --out -`")
    spec, settings = run_recipe("run", recipe_name, sets, run_name, rewards, data_processor, unchecked_imports,
                                unusual_values, allow_example=dry_run)
    platform = platform_for(spec.recipe)
    platform.check_run_request(spec)
    spend = run_spend(spec, yes, max_cost)
    spend.check_cap()  # before the fit check compiles anything
    if not dry_run:
        refuse_unaskable_now(spec, settings, spend)
    console, fit_line = make_console(), None
    warnings = [line for line in (data_warning(spec.recipe), schedule_warning(spec.recipe)) if line]
    if "train" in wanted and skip_fit_check:
        console.print(f"[yellow]{SKIPPED_FIT}[/]")
        spec = spec.with_fit({"skipped": True})
    elif "train" in wanted:  # before anything is submitted, or any capacity asked for
        from tpu_rl.scripts.fit.check import require_fit

        fit = require_fit(spec, settings, say=lambda line: say(f"fit: {line}", err=True))
        spec = spec.with_fit(fit.record())  # run.json keeps it; a dry run shows it after its plan
        fit_line = fit.summary()
    for warning in warnings:
        console.print(f"[yellow]{warning}[/]")
    if dry_run:  # with no credentials, bucket, cluster or VM too: priced from the recipe (pipeline/dry_run.py)
        from tpu_rl.scripts.pipeline.dry_run import EXAMPLE_NOTICE, EXAMPLE_REASON, dry_run as show_plan, offline_plan

        if settings.is_example:  # nothing set: priced as `make synth` synthesizes, never compared with a cloud
            why = "no settings are set" if settings.source == "example" else "the settings are the example's"
            console.print(f"[yellow]{EXAMPLE_NOTICE.format(why=why, project=settings.project)}[/]")
            offline_plan(spec, settings, console, wanted, EXAMPLE_REASON, show_manifests)
        else:
            show_plan(spec, settings, lambda: make_session(spec, settings, "writes"), console, wanted,
                      replace=replace, show_manifests=show_manifests)
        if fit_line:  # after manifests, a YAML comment: the printed stream stays one YAML document list
            console.print(f"# {fit_line}" if show_manifests else fit_line)
    else:
        costly = costly_run_warning(spec)  # a dry run prints it with its total; a run before it submits
        if costly:
            console.print(f"[yellow]{costly}[/]")
        session = make_session(spec, settings, "writes")
        # asked once, where a new run is first known new (RunRecord.open), before anything is made
        session.spend, session.spend_ask = run_spend_of(session, spend), session.confirm
        platform.run(session, wanted, replace=replace, follow_logs=follow_logs, dry_run=False,
                     show_manifests=False, detach=detach)



def run_spend_of(session, spend: Spend) -> Spend:
    """`spend`, said of the session's run by its name."""
    return dataclasses.replace(spend, what=f"run {session.paths.run_name}")


def refuse_unaskable_now(spec: RunSpec, settings: Settings, spend: Spend) -> None:
    """Refuse now, before the fit check compiles for minutes, a new run that consent (RunRecord.open) would
    refuse for want of a terminal: large, not consented on the command line, and none to ask in. A run the
    bucket already records asks nothing; with a terminal the question stays where it is, once."""
    from tpu_rl.scripts.cloud import gcs

    if not spend.large or spend.consented:
        return
    session = make_session(spec, settings, "writes")
    if session.confirm is None and not gcs.read_json(session.clients.storage(), session.paths.run_record):
        run_spend_of(session, spend).require(None)


@app.command("eval")
@handled
def eval_command(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
                 run_name: str = typer.Option(..., "--run", metavar="NAME", help="The run whose checkpoint to evaluate."),
                 step: Optional[int] = typer.Option(None, "--step", min=1, help="The checkpoint (default: the latest)."),
                 sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                                          help=EVAL_SET_HELP),
                 yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
                 max_cost: Optional[float] = typer.Option(None, "--max-cost", metavar="USD", help=MAX_COST_HELP)
                 ) -> None:
    """Evaluate a saved checkpoint of a run on the held-out set, on the run's slice shape, into its run.json."""
    recipe = get_recipe(recipe_name)
    platform_for(recipe).check_eval(recipe)  # refused before any cloud is asked
    from tpu_rl.jobs.evaluate import model_items

    # it spends TPU time as `run` does: weighed by the same rule, at the most the platform's evaluation can bill
    spend = platform_for(recipe).eval_spend(recipe, run_name, yes, checked_max_cost(max_cost))
    spend.check_cap()

    session = run_session("eval", recipe_name, None, run_name)  # the run's --set items first (its record), then these
    models = model_items(session.recipe, tuple(sets or ()))  # weighed against the run's values (eval_sets)
    session.spec.with_sets(tuple(item for item in sets or () if item not in models))  # before any cloud is asked
    session.spend, session.spend_ask = spend, session.confirm  # asked before the evaluation's JobSet is made
    platform_for(session.recipe).evaluate(session, step, tuple(sets or ()))


@app.command("check-rewards")
@handled
def check_rewards_command(rewards: str = typer.Argument(..., metavar="FILE.py:FN,..."),
                          recipe: Optional[str] = typer.Option(None, help="its data template, settings and "
                                                               "cached tokenizer"),
                          data_processor: Optional[str] = typer.Option(None, "--data-processor", metavar="FILE.py",
                                                                       help="rows from your process_data"),
                          tokenizer: Optional[str] = typer.Option(None, "--tokenizer", metavar="DIR",
                                                                  help="the chat template of this tokenizer")) -> None:
    """Import a reward file in a clean subprocess and call each function on sample gsm8k rows and
    completions, as MaxText's trainer will; refuses a missing function, a raise, or the wrong number or
    type of values."""
    from pathlib import Path

    from tpu_rl.scripts.rewards.check import (check_inputs, check_processor, check_rewards, parse_data_processor,
                                       parse_rewards, sample_completions)

    option = parse_rewards(rewards, "check-rewards")
    processor = parse_data_processor(data_processor) if data_processor else None
    chosen = get_recipe(recipe) if recipe else None
    read_user_files(chosen, processor, (option.path, option.functions))  # what `run --rewards` refuses
    inputs = check_inputs(chosen, Path(tokenizer) if tokenizer else None)
    rows = check_processor(processor, inputs) if processor else None
    scores = check_rewards(option, inputs, rows)
    for name, values in scores.items():
        typer.echo(f"{name}: {', '.join(f'{value:g}' for value in values)}")
    say(f"ok: {counted(len(scores), 'function')} of {option.path} return{'s' if len(scores) == 1 else ''} one float "
        "per completion")
    say(f"({len(sample_completions(inputs))} prompts x {inputs.generations} generations, in training "
        "and one at a time as in evaluation)")
    say(inputs.describe())


@app.command()
@handled
def cancel(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
           step: Optional[str] = typer.Argument(None, metavar="[STEP]", help="convert, train or export (default: all)"),
           yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
           sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SELECT_SET_HELP),
           run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME", help=RUN_HELP)) -> None:
    """Stop a run: delete its running JobSets, or stop the VM's startup script (outputs are kept); asks
    first unless --yes."""
    chosen = parse_step(step) if step is not None else None
    session = run_session("cancel", recipe_name, sets, run_name)
    platform_for(session.recipe).cancel(session, chosen, yes)


@app.command()
@handled
def status(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
           sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SELECT_SET_HELP),
           run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME", help=RUN_HELP),
           as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Each step's state (JobSet or VM progress), pods, time and whether its output is verified in GCS."""
    session = run_session("status", recipe_name, sets, run_name)
    recipe = session.recipe
    report = platform_for(recipe).status(session)
    if as_json:
        typer.echo(json.dumps(status_json(session, report), indent=2))
        return
    session.console.print(status_view(recipe.name, session.settings.gcs_bucket, report, session.console.width),
                          soft_wrap=True)


@app.command("runs")
@handled
def runs_command(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
                 as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The recipe's runs in the bucket: each step's status, last step, held-out accuracy before and after,
    mean reward, start, duration and what differs from the recipe."""
    import dataclasses

    from rich.markup import escape
    from rich.table import Table

    recipe, settings = cloud_recipe("runs", recipe_name)  # refused before the clouds' libraries load
    from tpu_rl.scripts.pipeline.runs import RESUMED_NOTE, best_of_sweep, list_runs, with_queue

    session = make_session(RunSpec.of_catalog(recipe), settings)
    listing, queue_note = with_queue(session, list_runs(session))
    name = session.recipe.name
    if as_json:
        idle, unknown = _idle(session)
        cluster = idle.as_record() if idle is not None else {"unknown": unknown} if unknown else None
        typer.echo(json.dumps({"recipe": name, "trained": listing.trained, "other_recipes": listing.other_recipes,
                               "runs": [dataclasses.asdict(run) for run in listing.runs], "cluster": cluster},
                              indent=2))
        return
    console = session.console
    if not listing.runs:
        console.print(f"no run of {name} in {listing.trained} yet: start one with `tpu-rl run {name}`")
    else:
        title = f"{name}: runs in {listing.trained}"
        table = Table(title=title, title_justify="left")
        for column in RUN_COLUMNS:  # run names are copied into commands: never cut
            table.add_column(column, no_wrap=True)
        for run in listing.runs:
            table.add_row(*(escape(cell) for cell in run_cells(run)))
        as_table = table_or_lines(console, table, title, runs_stacked(listing.runs))
        if as_table and any(run.accuracy_resumed is not None for run in listing.runs):
            console.print(RESUMED_NOTE)
        for sweep in dict.fromkeys(run.sweep for run in listing.runs if run.sweep):
            console.print(escape(best_of_sweep(listing.runs, sweep)))
        for run in listing.runs:  # a driver that ended under a running step: the line `status` gives
            if run.left_running:
                console.print(escape(run.left_running))
        if queue_note:
            console.print(escape(queue_note))
    if listing.other_recipes:
        console.print(f"({counted(listing.other_recipes, 'run')} of other recipes with the same model "
                      f"{'is' if listing.other_recipes == 1 else 'are'} not shown)")
    idle, unknown = _idle(session)
    if idle is not None:
        for line in idle.lines(session.recipe, session.settings.gcs_bucket):
            console.print(escape(line))
    elif unknown:
        console.print(escape(f"(what the stack still bills is not shown: {unknown})"))


def _idle(session):
    """What the recipe's stack still bills with no run (scripts/pipeline/gke/billing.py), or why that is
    unknown: `runs` lists the bucket's runs whether or not the cluster answers."""
    try:
        return platform_for(session.recipe).idle(session), None
    except (UserError, ApiError) as error:
        return None, str(error)


@app.command()
@handled
def down(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
         yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")) -> None:
    """Stop what a finished GKE recipe bills: destroy its stack (`npx cdktf destroy RECIPE`) once no run of it
    is active or queued, keeping the bucket; asks first unless --yes."""
    recipe, settings = cloud_recipe("down", recipe_name)

    platform_for(recipe).down(make_session(RunSpec.of_catalog(recipe), settings, "none"), yes)


@app.command()
@handled
def logs(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
         step: str = typer.Argument(..., metavar="STEP", help="convert, train or export"),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming."),
         tail: Optional[int] = typer.Option(200, "--tail", min=0, help="Lines from the end (0 = all)."),
         sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SELECT_SET_HELP),
         run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME", help=RUN_HELP)) -> None:
    """The main container's log of a step (the Pathways head for train); on the VM, the step's log in the
    bucket once it ended, its serial console while it runs."""
    chosen = parse_step(step)
    session = run_session("logs", recipe_name, sets, run_name)  # on GKE the cluster only; a VM's ended step: the bucket
    for line in platform_for(session.recipe).logs(session, chosen, follow, tail or None):
        typer.echo(line)
