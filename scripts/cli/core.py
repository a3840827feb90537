"""The `tpu-rl` Typer app, and how every command ends.

Every command ends through `handled`: bad input prints one line and exits 2 without a traceback, other
outcomes get their own exit code (tpu_rl.recipes.outcome.ExitCode, documented in docs/pipeline.md). Usage errors
(a missing argument, an unknown option) are one line too, exit 2 (`_OneLineErrors`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from tpu_rl.recipes import STEPS, Step, UserError, get_recipe, load_settings
from tpu_rl.recipes.catalog.said import shown, what_it_takes
from tpu_rl.recipes.costs.consent import COSTLY_RATIO
from tpu_rl.recipes.outcome import EXIT_CODES_HELP, ExitCode, Interrupted, Outcome, Reported, exit_code
from tpu_rl.recipes.settings.specs import needs
from tpu_rl.scripts.cloud.foreign import foreign_outcome

if TYPE_CHECKING:
    from rich.console import Console

    from tpu_rl.recipes import Recipe, Settings

PIPED_WIDTH = 200  # output that is neither a terminal nor sized by COLUMNS (a file, CI logs)


def _usage_error_types() -> tuple[type[Exception], type[Exception] | tuple, type[Exception]]:
    """UsageError, NoArgsIsHelpError and Abort of the click that typer runs on (typer 0.29 vendors its
    own copy as typer._click; earlier releases use click): found through typer's public BadParameter.
    Click before 8.2 has no NoArgsIsHelpError (it printed the help itself): `except ()` catches nothing."""
    import importlib

    exceptions = importlib.import_module(typer.BadParameter.__module__)
    return exceptions.UsageError, getattr(exceptions, "NoArgsIsHelpError", ()), typer.Abort


# A Hugging Face user access token (hf_ and a long run of letters and digits; not a key such as
# hf_access_token): an error line never repeats one, whatever argument it came as (`tpu-rl status hf_...`).
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
SECRET_AS_ARGUMENT = ("`tpu-rl secret set` takes no argument: it reads the token from stdin, as an argument "
                      "stays in your shell history and the process list; run `tpu-rl secret set < token-file` "
                      "and, if you typed a token on the command line, revoke it on huggingface.co")


def without_tokens(text: str) -> str:
    return _HF_TOKEN.sub("hf_…", text)


def _command_names(ctx) -> tuple[str, ...]:
    """The subcommands' names, without the program's: that is `tpu-rl`, `python -m tpu_rl.scripts.cli`'s
    `__main__.py`, or whatever a wrapper calls it."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return tuple(reversed(names))


def _in_our_words(error) -> str | None:
    """An option's value typer's pydantic refused (`--max-cost abc`: "Input should be a valid number, unable to
    parse string as a number"), said as the option, what it takes and the value given; None for another."""
    from pydantic import ValidationError

    cause, param = error.__cause__, getattr(error, "param", None)
    rule = what_it_takes(cause) if isinstance(cause, ValidationError) else None
    if rule is None or param is None:
        return None
    option = max(param.opts, key=len) if param.opts else param.human_readable_name
    given = shown(cause.errors()[0].get("input"), quoted=False)
    return f"{option} {given}: {option} takes {rule}, not {given}"


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
            message = _in_our_words(error) or error.format_message().rstrip(".")
            command = error.ctx.command_path if error.ctx is not None else "tpu-rl"
            if _command_names(error.ctx) == ("secret", "set") and "unexpected extra argument" in message:
                typer.echo(error_text(SECRET_AS_ARGUMENT), err=True)  # never the argument: it may be the token
            else:
                typer.echo(error_text(f"{message[:1].lower() + message[1:]}; see `{command} --help`"), err=True)
            code = ExitCode.BAD_INPUT
        except abort:
            typer.echo(error_text("interrupted"), err=True)
            code = ExitCode.INTERRUPTED
        if not standalone_mode:
            return int(code)
        sys.exit(int(code))


def _print_version(value: bool) -> None:
    if value:
        from tpu_rl.scripts.version import package_version

        typer.echo(f"tpu-rl {package_version()}")
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


# `make sandbox` (tests/peers/sandbox.py) sets it to its directory: every command then says first that it runs
# against the local sandbox, and refuses to run when an API or the cluster points anywhere else.
SANDBOX_ENV = "TPU_RL_SANDBOX"
SIMULATION_LINE = "simulation: local sandbox, nothing billed (`make sandbox-stop` ends it)"


def simulation_notice() -> None:
    """The simulation's line on stderr (stdout stays the command's, for --json and pipes), or the refusal
    of a sandbox environment that would reach beyond it."""
    root = os.environ.get(SANDBOX_ENV)
    if not root:
        return
    from tpu_rl.scripts.cloud.clients import outside_sandbox

    outside = outside_sandbox(os.environ, root)
    if outside:
        typer.echo(error_text(f"{SANDBOX_ENV} is set, but {', '.join(outside)} not the sandbox's: source the "
                              f"sandbox's environment again (`make sandbox`), or unset {SANDBOX_ENV}"), err=True)
        raise typer.Exit(int(ExitCode.BAD_INPUT))
    typer.echo(SIMULATION_LINE, err=True)


@app.callback()
def _app(ctx: typer.Context,
         version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    if ctx.invoked_subcommand != "drive":  # the driver's lines are shown by the `run` that follows it
        simulation_notice()


def _columns() -> int | None:
    """COLUMNS when it is a width (a positive whole number); 0, -5 or `abc` count as unset."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _sized() -> bool:
    """Whether a terminal, or COLUMNS, sets the output's width; other output (a file, CI logs) is not cut
    at 80 columns."""
    return sys.stdout.isatty() or _columns() is not None


def make_console() -> Console:
    """The console a command prints through: messages fitted to a sized terminal (tpu_rl.scripts.cli.width)."""
    from rich.console import Console

    from tpu_rl.scripts.cli.width import FittedConsole

    environ = {key: value for key, value in os.environ.items() if key != "COLUMNS"}  # rich would take COLUMNS=0
    width = _columns() or (None if sys.stdout.isatty() else PIPED_WIDTH)
    kind = FittedConsole if _sized() else Console
    return kind(soft_wrap=True, highlight=False, width=width, _environ=environ)


def table_or_lines(console: Console, table, title: str, lines: list[str]) -> bool:
    """The table when a terminal (or COLUMNS) is wide enough for it whole; else the title and the lines,
    one fact each: for a narrow terminal, and for output piped to a file or a program, which reads plain
    lines, not a box as wide as the longest row. True when the table was printed."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum  # nothing cut
    if _sized() and natural <= console.width:
        console.print(table)
        return True
    console.print(title, soft_wrap=False)
    for line in lines:
        console.print(line, soft_wrap=False)
    return False


def say(message: str, err: bool = False) -> None:
    """typer.echo of one message, wrapped like the console's lines (`fitted`)."""
    import shutil

    typer.echo(fitted(message, _columns() or shutil.get_terminal_size().columns), err=err)


def fitted(text: str, width: int, indent: int = 0) -> str:
    """`text` wrapped at spaces to `width` columns when a terminal (or COLUMNS) sets the width, the lines
    after the first indented by `indent` (tpu_rl.scripts.cli.width.fit_text); other output keeps one line per
    message, for grep. A word is never broken, so a path or URL longer than the line stays whole."""
    from rich.text import Text

    from tpu_rl.scripts.cli.width import fit_text

    if not _sized():
        return text
    return fit_text(Text(text), width, indent).plain


def _stderr_is_a_terminal() -> bool:
    return sys.stderr.isatty()


def _terminal_width(stream) -> int:
    """COLUMNS, else the width of the terminal `stream` is (a pty nobody sized says 0), else 80."""
    try:
        return _columns() or os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):  # not a terminal, or no file (a test's stream)
        return 80


def error_text(message: str) -> str:
    """`error: <message>`, tokens masked: one line where stderr is no terminal (a file, a program, CI logs
    read it, and grep finds it whole); in a terminal, wrapped at spaces to its width, a command in backquotes
    kept whole on a line of its own (tpu_rl.scripts.cli.width)."""
    line = f"error: {without_tokens(message)}"
    if not _stderr_is_a_terminal():
        return line
    from rich.text import Text

    from tpu_rl.scripts.cli.width import fit_text

    return fit_text(Text(line), _terminal_width(sys.stderr), indent=2).plain


def _fail(code: int, message: str) -> typer.Exit:
    typer.echo(error_text(message), err=True)
    return typer.Exit(int(code))


def handled(command):
    """Turn every expected ending into one line on stderr and a distinct exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except Reported as error:
            raise typer.Exit(int(error.code)) from None
        except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 -- every failure ends as one line and its code
            code, message = ending_of(error)
            raise _fail(code, message) from None

    return wrapper


def outcome_of(error: BaseException) -> UserError | Outcome:
    """The expected ending an exception is (bad input, an outcome, Ctrl-C, a cloud library's exception,
    classified by type without importing any); anything else is raised again, a bug to see whole."""
    if isinstance(error, (UserError, Outcome)):
        return error
    if isinstance(error, KeyboardInterrupt):
        return Interrupted("interrupted")
    outcome = foreign_outcome(error)
    if outcome is None:
        raise error
    return outcome


def ending_of(error: BaseException) -> tuple[int, str]:
    """The exit code and one line of an expected ending (outcome_of)."""
    outcome = outcome_of(error)
    return exit_code(outcome), str(outcome)


def cloud_settings(command: str, platform: str | None = None, allow_example: bool = False) -> Settings:
    """Settings for a command that talks to a cloud, with what it needs on `platform` (None: a command that
    needs the same on every platform; recipes/settings/specs.py needs); never the example, but where
    `allow_example` (a dry run, which then reaches no cloud) and nothing is set."""
    settings = load_settings(needs=needs(command, platform), allow_example=allow_example)
    if settings.is_example and not allow_example:
        raise UserError(f"settings are the embedded example (PROJECT={settings.project}), which can never reach a "
                        "cloud: export your own PROJECT, REGION, ZONE, CLUSTER_NAME and GCS_BUCKET")
    for warning in settings.warnings:
        print(warning, file=sys.stderr)
    return settings


def parse_steps(text: str) -> tuple[Step, ...]:
    """--steps: a comma-separated subset of the steps, in pipeline order whatever the order given."""
    wanted = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [step for step in wanted if step not in STEPS]
    if unknown or not wanted:
        raise UserError(f"--steps '{text}' names {', '.join(unknown) or 'no step'}: use a comma-separated "
                        f"subset of {','.join(STEPS)}")
    return tuple(step for step in STEPS if step in wanted)


def parse_step(step: str) -> Step:
    if step not in STEPS:
        raise UserError(f"unknown step '{step}': choose one of {', '.join(STEPS)}")
    return step


# The options that choose a run (recipes/runs/identity.py), on every command that renders or reaches one.
SET_HELP = ("Override a MaxText key of the train step, e.g. learning_rate=1e-5; repeatable, later wins. "
            "Changes the run name.")
# Commands that read a run (status, logs, cancel) take its --set items only to find its name.
SELECT_SET_HELP = ("Select the run started with this --set item (as given to `run`, e.g. learning_rate=1e-5): "
                   "it chooses the run's name and changes nothing; repeatable.")
EVAL_SET_HELP = ("An evaluation key for this evaluation only, e.g. num_test_batches=10, applied after the run's "
                 "own --set items; --run chooses the run, whose training keys stay as they were; repeatable.")
UNUSUAL_HELP = ("Submit --set values MaxText takes but no run means (a boolean for a number, a negative size, "
                "a magnitude far from MaxText's own value) as they are.")
RUN_HELP = "The run's name (default: <recipe>-<hash of the settings that change the weights>)."
SKIP_FIT_HELP = ("Submit without XLA's TPU compiler judging whether the plan fits the chips (docs/fit.md): "
                 "one that does not fails on the slice, after the capacity wait.")
# Consent before a large spend (recipes/costs/consent.py): the same words on `run` and `sweep`.
YES_HELP = (f"Start without asking when the estimate is {COSTLY_RATIO} times the recipe's own run or more "
            "(asked once, when the work is submitted; without a terminal, refused unless --yes or --max-cost).")
REPLACE_HELP = ("Delete this run's JobSet that failed, finished without its output or has another spec, or its "
                "driver running another request, and submit again; the bucket's outputs and checkpoints are "
                "kept, so it resumes, and a run already started is not asked about again.")
MAX_COST_HELP = "Refuse an estimate above this many US dollars; one within it is started without asking."
SKIPPED_FIT = ("warning: not judged by the TPU compiler (--skip-fit-check): a plan that does not fit its chips "
               "fails on the slice, after the capacity wait")
# The files a run brings (recipes/runs/user_files.py), on `run` and on `render`, which writes what `run` submits.
REWARDS_HELP = "Your reward functions instead of MaxText's (0.2.4+). Changes the run name."
DATA_PROCESSOR_HELP = "Your process_data for the dataset. Changes the run name."
UNCHECKED_IMPORTS_HELP = ("Take a --rewards/--data-processor file that imports what this Python lacks (maxtext, "
                          "tunix, ...) unchecked; run.json records it.")


def cloud_recipe(command: str, recipe_name: str, allow_example: bool = False) -> tuple[Recipe, Settings]:
    """The recipe as the user's settings run it (CAPACITY applied, the per-recipe rules of what `command`
    reads checked), and those settings, with what `command` needs (recipes/settings/specs.py); never the example.
    A teammate who only looks at runs needs the project and the bucket, and the cluster or the VM for
    the commands that reach them; RESERVATION and AUTHORIZED_CIDR only what reads them."""
    recipe = get_recipe(recipe_name)
    settings = cloud_settings(command, recipe.platform, allow_example)
    recipe = settings.with_capacity(recipe)
    settings.for_recipe(recipe, needs(command, recipe.platform))
    return recipe, settings


def write_file(path: Path, text: str, option: str) -> None:
    """Write a file the user asked for; a path that cannot be written is bad input, not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise UserError(f"{option}: cannot write {path} ({error.strerror or type(error).__name__}): "
                        "pass a writable path") from None


def _stdin_is_a_terminal() -> bool:
    return sys.stdin.isatty()


def _ask(question: str) -> bool:
    """A yes/no question in the terminal. Ctrl-C (or Ctrl-D) there is an interruption, exit 130, not a
    failed step: typer.confirm turns both into Abort. Questions come before anything is submitted."""
    from rich.text import Text

    from tpu_rl.scripts.cli.width import fit_text

    fitted_question = fit_text(Text(question), _terminal_width(sys.stdout) - len(" [y/N]: ")).plain
    try:
        return typer.confirm(fitted_question, default=False)
    except typer.Abort:
        raise Interrupted("interrupted at the prompt; nothing was submitted or deleted") from None


def asker():
    """The terminal's yes/no question, or None where there is no terminal to ask in."""
    return _ask if _stdin_is_a_terminal() else None
