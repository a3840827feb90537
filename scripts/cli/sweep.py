"""`tpu-rl sweep`: several runs of one recipe from one command, checked whole before any is started, then
each started detached (its driver runs in the cluster) and queued by Kueue for the slice."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import typer

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import STEPS, UserError, get_recipe
from tpu_rl.recipes.costs.consent import COSTLY_RATIO, Spend, checked_max_cost
from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.outcome import Interrupted, Outcome
from tpu_rl.recipes.runs.identity import conversion_key
from tpu_rl.recipes.runs.schedule import schedule_warning
from tpu_rl.recipes.runs.spec import run_identity, run_name
from tpu_rl.recipes.runs.sweeps import (SWEEP_MAX_RUNS, check_distinct, check_size, check_sweep_name, check_sweepable,
                                        derived_name, parse_grid, read_sweep_file, sweep_name)
from tpu_rl.scripts.cli.core import (DATA_PROCESSOR_HELP, MAX_COST_HELP, REWARDS_HELP, SKIPPED_FIT, SKIP_FIT_HELP,
                                     UNCHECKED_IMPORTS_HELP, UNUSUAL_HELP, YES_HELP, app, cloud_recipe, handled,
                                     make_console, say, table_or_lines)
from tpu_rl.scripts.pipeline.platforms import platform_for
from tpu_rl.scripts.words import counted

if TYPE_CHECKING:
    from tpu_rl.recipes import Recipe, Settings
    from tpu_rl.recipes.runs.spec import RunSpec


@dataclass(frozen=True)
class PricedRun:
    spec: RunSpec
    minutes: int
    usd: float  # its train and export: the conversion is the sweep's, priced once (SweepPlan)

    @property
    def name(self) -> str:
        return run_name(self.spec)  # the name plan_sweep gave it, or the file's


@dataclass(frozen=True)
class SweepPlan:
    name: str
    runs: list[PricedRun]
    convert_usd: float
    convert_minutes: int = 0

    @property
    def minutes(self) -> list[int]:
        """How long each run's turn lasts, in order; the shared convert, before the first train, in the first's."""
        return [run.minutes + (self.convert_minutes if number == 0 else 0) for number, run in enumerate(self.runs)]

    @property
    def total(self) -> float:
        return self.convert_usd + sum(run.usd for run in self.runs)


class SweepNotStarted(Outcome):
    """Run k of a sweep could not be started: the line names the runs that were, and how to stop them."""


def _runs_of(grid: Optional[list[str]], file: Optional[str]):
    if bool(grid) == bool(file):
        raise UserError("tpu-rl sweep takes its runs from --grid KEY=V1,V2 (repeatable) or from --file "
                        "sweep.toml: give one of them")
    return read_sweep_file(file) if file else (None, parse_grid(grid or []))


def plan_sweep(recipe: Recipe, settings: Settings, grid: Optional[list[str]], file: Optional[str],
               name: Optional[str], rewards: Optional[str], data_processor: Optional[str],
               unchecked_imports: bool, unusual_values: bool, max_runs: int = SWEEP_MAX_RUNS) -> SweepPlan:
    """Every run of the sweep as `run` would train it, each --set checked as `run` checks it
    (run_input.run_of), the runs distinct and sharing one conversion, and priced; UserError naming the
    run for the first that fails. Nothing reaches a cloud."""
    from tpu_rl.recipes.costs.run import pipeline_run_estimate
    from tpu_rl.scripts.cli.run_input import run_of

    check_sweepable(recipe)
    if name is not None:
        check_sweep_name(name)
    file_name, wanted = _runs_of(grid, file)
    check_size(len(wanted), max_runs, "--grid" if grid else f"--file {file}")  # before any run is checked
    platform = platform_for(recipe)
    specs: list[RunSpec] = []
    for number, run in enumerate(wanted, 1):
        try:
            spec = run_of(recipe, settings, list(run.sets), run.name, rewards, data_processor,
                          unchecked_imports, usual_only=not unusual_values)
            if run.name is None:  # named from what it trains, the files included
                taken = {run_name(earlier) for earlier in specs}
                spec = spec.with_run(derived_name(run.sets, run_identity(spec), taken))
            platform.check_run_request(spec)
        except UserError as error:
            given = " ".join(f"--set {item}" for item in run.sets) or "no --set"
            raise UserError(f"sweep run {number} of {len(wanted)} ({given}): {error}; nothing was started") from None
        specs.append(spec)
    check_distinct(specs, f"--file {file}" if file else "--grid")
    keys = {conversion_key(spec.recipe) for spec in specs}
    if len(keys) > 1:  # no --set may change the model (recipes/runs/identity.py PIPELINE_KEYS): a guard, not a path
        raise UserError(f"the sweep's runs need {len(keys)} conversions ({', '.join(sorted(keys))}): a sweep "
                        "shares one; sweep only keys that leave the model as it is")
    swept = name or file_name or sweep_name(recipe.name, [run_name(spec) for spec in specs])
    priced = []
    convert_usd, convert_minutes = 0.0, 0
    for spec in specs:
        estimate = pipeline_run_estimate(spec)
        convert_usd, convert_minutes = estimate.step("convert").usd, estimate.step("convert").minutes
        own = [estimate.step(step) for step in STEPS if step != "convert"]
        priced.append(PricedRun(spec.with_sweep(swept), sum(step.minutes for step in own),
                                sum(step.usd for step in own)))
    return SweepPlan(swept, priced, convert_usd, convert_minutes)


def check_cap(plan: SweepPlan, max_cost: Optional[float]) -> None:
    if max_cost is not None and plan.total > max_cost:
        raise UserError(f"sweep {plan.name} is estimated at {usd(plan.total)} for {counted(len(plan.runs), 'run')}, "
                        f"over --max-cost {usd(max_cost)}: drop values from the grid or raise --max-cost; nothing was "
                        "started")


def show_plan(console, plan: SweepPlan) -> None:
    from rich.markup import escape
    from rich.table import Table

    title = f"sweep {plan.name}: {counted(len(plan.runs), 'run')}, trained one after another on one slice"
    table = Table(title=title, title_justify="left")
    for column in ("#", "run", "--set", "minutes", "cost"):
        table.add_column(column, no_wrap=column == "run")
    lines = []
    for number, run in enumerate(plan.runs, 1):
        sets = ", ".join(run.spec.sets) or "-"
        table.add_row(str(number), escape(run.name), escape(sets), str(run.minutes), usd(run.usd))
        lines.append(f"{number}. {escape(run.name)}: {escape(sets)}; {run.minutes} min, {usd(run.usd)}")
    table_or_lines(console, table, title, lines)
    console.print(f"shared convert: {usd(plan.convert_usd)}, once for every run")
    console.print(f"expected: {usd(plan.total)} in all (train and export of each run, one convert)")


@app.command()
@handled
def sweep(recipe_name: str = typer.Argument(..., metavar="RECIPE"),
          grid: Optional[list[str]] = typer.Option(
              None, "--grid", metavar="KEY=V1,V2,...",
              help="KEY=V1,V2,...: one more axis of the sweep (a MaxText key of the train step, as --set takes it); "
                   "the runs are the product of the axes; repeatable."),
          file: Optional[str] = typer.Option(None, "--file", metavar="SWEEP.toml",
                                             help="The runs as [[runs]] tables, each with set = [...] and an "
                                                  "optional name (docs/experiments.md)."),
          name: Optional[str] = typer.Option(None, "--name", help="The sweep's name, in each run's run.json "
                                             "(default: <recipe>-sweep-<hash of its runs>)."),
          max_cost: Optional[float] = typer.Option(None, "--max-cost", metavar="USD", help=MAX_COST_HELP),
          yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
          max_runs: int = typer.Option(SWEEP_MAX_RUNS, "--max-runs", metavar="N",
                                       help="Refuse a sweep of more runs than this (the bound that keeps a "
                                            "mistyped grid from queueing weeks of runs)."),
          dry_run: bool = typer.Option(False, "--dry-run", help="Print the runs and their price; start nothing."),
          rewards: Optional[str] = typer.Option(None, "--rewards", metavar="FILE.py:FN,...", help=REWARDS_HELP),
          data_processor: Optional[str] = typer.Option(None, "--data-processor", metavar="FILE.py",
                                                       help=DATA_PROCESSOR_HELP),
          unchecked_imports: bool = typer.Option(False, "--unchecked-imports", help=UNCHECKED_IMPORTS_HELP),
          unusual_values: bool = typer.Option(False, "--unusual-values", help=UNUSUAL_HELP),
          skip_fit_check: bool = typer.Option(False, "--skip-fit-check", help=SKIP_FIT_HELP)) -> None:
    """Start several runs of a recipe, a grid of --set values or a file's list, each detached; Kueue trains
    them one after another on the first capacity mode's slice. Checked and priced whole before any is
    started."""
    from rich.markup import escape

    check_sweepable(get_recipe(recipe_name))  # before the settings are read: no setting changes this
    max_cost = checked_max_cost(max_cost)
    recipe, settings = cloud_recipe("sweep", recipe_name)
    plan = plan_sweep(recipe, settings, grid, file, name, rewards, data_processor, unchecked_imports,
                      unusual_values, max_runs)
    check_cap(plan, max_cost)
    spend = sweep_spend(plan, yes, max_cost)
    from tpu_rl.scripts.cli import core

    if not dry_run and spend.large and not spend.consented and core.asker() is None:
        spend.require(None)  # refused now, before the fit check compiles for minutes, not after it
    console = make_console()
    console.print(plan_headline(plan))  # size and total first, whatever the table's length
    plan, fit_line = judged(plan, settings, skip_fit_check)
    console.print(fit_line)
    show_plan(console, plan)
    for warning in run_warnings(plan):
        console.print(f"[yellow]{escape(warning)}[/]")
    if dry_run:
        if spend.large and not spend.consented:
            console.print(f"{spend.what} is {COSTLY_RATIO} times the recipe's own run or more: started "
                          "without a dry run, it asks first (or takes --yes, or a --max-cost it fits)")
        console.print("system nodes: the room for the sweep's drivers is read from the cluster when it starts, "
                      "and the nodes they add priced then (a dry run reads no cluster)")
        console.print("dry run: nothing is started; start them with the same command without --dry-run")
        console.print(f"best run: `tpu-rl runs {recipe.name}` names it by held-out accuracy once they are evaluated")
        return
    check_names_free(plan, settings)
    extra = price_system_nodes(plan, settings, console, max_cost)
    # asked once for the whole sweep; its runs, started next and later by their drivers, ask nothing
    consent = dataclasses.replace(spend, estimate=plan.total + extra).require(core.asker())
    start_runs(plan, settings, console, consent)


def sweep_spend(plan: SweepPlan, yes: bool, max_cost: Optional[float]):
    """The sweep's estimate against its recipe's own run (recipes/costs/consent.py)."""
    from tpu_rl.recipes.costs.run import own_run_total

    own = own_run_total(plan.runs[0].spec)
    return Spend(f"sweep {plan.name} ({counted(len(plan.runs), 'run')})", plan.total, own, yes=yes, max_cost=max_cost)


def plan_headline(plan: SweepPlan) -> str:
    return (f"sweep {plan.name}: {counted(len(plan.runs), 'run')}, estimated at "
            f"{usd(plan.total)} in all")


def judged(plan: SweepPlan, settings: Settings, skip: bool) -> tuple[SweepPlan, str]:
    """Every run judged by the TPU compiler before any is started (a memory shape compiled once): the
    plan with each run's verdict for its record, and the line of the run with the least room left."""
    import dataclasses

    from tpu_rl.scripts.fit.check import require_fits

    if skip:
        runs = [dataclasses.replace(run, spec=run.spec.with_fit({"skipped": True})) for run in plan.runs]
        return dataclasses.replace(plan, runs=runs), f"[yellow]{SKIPPED_FIT}[/]"

    try:
        fits = require_fits([run.spec for run in plan.runs], settings, say=lambda line: say(f"fit: {line}", err=True))
    except UserError as error:
        raise UserError(f"sweep {plan.name}: {error}; nothing was started") from None
    runs = [dataclasses.replace(run, spec=run.spec.with_fit(fits[run.name].record())) for run in plan.runs]
    tightest = min(fits.values(), key=lambda fit: fit.limit - fit.known_peak)
    shapes = len({id(fit) for fit in fits.values()})
    line = f"{tightest.summary()} (the tightest of {shapes} memory shape{'s' if shapes != 1 else ''})"
    return dataclasses.replace(plan, runs=runs), line


def run_warnings(plan: SweepPlan) -> list[str]:
    """The warnings `run` prints before it starts (an odd schedule, a run far dearer than the recipe's),
    each once for the whole sweep rather than once per run."""
    from tpu_rl.recipes.costs.run import COSTLY_RATIO, costly_run_warning
    from tpu_rl.recipes.runs.datasets import data_warning

    lines: list[str] = []
    for run in plan.runs:
        for line in (data_warning(run.spec.recipe), schedule_warning(run.spec.recipe)):
            if line and line not in lines:
                lines.append(line)
    costly = [run.name for run in plan.runs if costly_run_warning(run.spec)]
    if costly:
        lines.append(f"warning: {len(costly)} of the sweep's runs ({', '.join(costly)}) "
                     f"{'is' if len(costly) == 1 else 'are'} estimated at "
                     f"{COSTLY_RATIO:g} times the recipe's own run or more: check the --set items that change "
                     "their steps or their evaluation")
    return lines


def check_names_free(plan: SweepPlan, settings: Settings) -> None:
    """The guard `run` applies to its name (record.py RunRecord.open), to every run of the sweep before any
    is started: a run whose name a record in the bucket holds for other settings is refused."""
    from tpu_rl.scripts.cli.cloud import make_session
    from tpu_rl.scripts.pipeline.record import run_records, settings_clash

    records = run_records(make_session(plan.runs[0].spec, settings, "reads"))
    for run in plan.runs:
        changes = settings_clash(run.spec, records.get(run.name))
        if changes:
            raise UserError(f"sweep {plan.name}: run '{run.name}' was started with other settings ({changes}; "
                            f"see {ArtifactPaths(run.spec, settings).run_record}): give it another name in the "
                            "sweep file, or leave its name out; nothing was started")


def price_system_nodes(plan: SweepPlan, settings: Settings, console, max_cost: Optional[float]) -> float:
    """What the sweep's drivers add on the platform (Platform.sweep_overhead: GKE's system nodes, read
    from the cluster), said, and held to --max-cost with the rest before any run is started."""
    from rich.markup import escape

    from tpu_rl.scripts.cli.cloud import make_session

    spec = plan.runs[0].spec
    extra, line = platform_for(spec.recipe).sweep_overhead(make_session(spec, settings, "reads"), plan.minutes)
    if line:
        console.print(escape(line))
    if extra and max_cost is not None and plan.total + extra > max_cost:
        raise UserError(f"sweep {plan.name} is estimated at {usd(plan.total + extra)} for "
                        f"{counted(len(plan.runs), 'run')} with the system nodes its drivers add, over --max-cost "
                        f"{usd(max_cost)}: drop values from the grid or raise --max-cost; nothing was started")
    if extra:
        console.print(f"expected with them: {usd(plan.total + extra)} in all")
    return extra


def start_runs(plan: SweepPlan, settings: Settings, console, consent: dict | None = None) -> None:
    """Each run started detached through the platform (Platform.run(detach=True)), in the plan's order. When
    run k cannot be started, the line names those that were, and how to stop them. `consent`: the sweep's
    (Spend.record), kept in each run's run.json as the yes that run was given."""
    from rich.markup import escape

    from tpu_rl.scripts.cli.cloud import make_session

    started: list[str] = []
    for run in plan.runs:
        spec, recipe = run.spec, run.spec.recipe
        try:
            session = make_session(spec, settings, "writes")
            session.consent = {**consent, "at": session.now().isoformat(timespec="seconds")} if consent else None
            platform_for(recipe).run(session, STEPS, replace=False, follow_logs=False, dry_run=False,
                                     show_manifests=False, detach=True)
        except (Outcome, UserError, KeyboardInterrupt) as error:
            interrupted = isinstance(error, KeyboardInterrupt)
            done = _started_line(recipe.name, started)
            line = f"sweep {plan.name}: run {run.name} was not started ({'interrupted' if interrupted else error}); "
            if isinstance(error, KeyboardInterrupt):
                raise Interrupted(line + done) from None
            if isinstance(error, UserError):
                raise UserError(line + done) from None
            ending = SweepNotStarted(line + done)
            ending.code = error.code  # the exit code of what stopped it
            raise ending from None
        except BaseException:  # anything else: the runs already started are named, then it goes on up
            console.print(escape(f"sweep {plan.name}: run {run.name} was not started; "
                                 + _started_line(recipe.name, started)))
            raise
        started.append(run.name)
        console.print(f"started run {run.name} ({len(started)} of {len(plan.runs)})")
    console.print(f"sweep {plan.name}: {counted(len(started), 'run')} started; Kueue trains them one after another, in "
                  f"the order their drivers submit train. Follow them with `tpu-rl runs {spec.recipe.name}`")
    console.print(escape(sweep_summary(session, plan)))


def _started_line(recipe_name: str, started: list[str]) -> str:
    """The runs of a sweep that were started before one was not, and how to stop them."""
    stop = "; ".join(f"`tpu-rl cancel {recipe_name} --run {name} --yes`" for name in started)
    return (f"{counted(len(started), 'run')} {'was' if len(started) == 1 else 'were'} started ({', '.join(started)}); "
            f"stop {'it' if len(started) == 1 else 'them'} with {stop}" if started
            else "no run was started")


def sweep_summary(session, plan: SweepPlan) -> str:
    """The best run of the sweep by held-out accuracy, from the runs' records in the bucket (a sweep started
    again after some of its runs trained); the same line `runs` prints."""
    from tpu_rl.scripts.pipeline.runs import best_of_sweep, summarize_run
    from tpu_rl.scripts.pipeline.record import run_records

    records = run_records(session)
    runs = [summarize_run(session, run.name, {**(records.get(run.name) or {}), "sweep": plan.name})
            for run in plan.runs]
    return best_of_sweep(runs, plan.name)
