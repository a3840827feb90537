"""`tpu-rl drive` (hidden): what the run's driver runs in its pod on GKE (jobs/driver.py). It reads the
request `run` mounted, builds the Session as `run` did (in the cluster, with its pod's service account
and Workload Identity for the bucket) and runs the same pipeline (Platform.drive, submit.run_gke), with a
plain console: no terminal, no colours, no live display, one line per event, each flushed. Its exit code
and its last line are the run's outcome; `run` shows both.

Its exit code tells the driver's Job what to do (jobs/driver.py podFailurePolicy, from recipes/outcome.py):
an ending the run decided (a step failed, bad input, an output missing, an API's answer that will not
change, an interrupt that was no SIGTERM: `drive` run by hand) ends the Job; any other (a transient API
error: unreachable, 5xx or 429 after its retries; the pod's credentials missing or refused, a crash inside
`drive`, SIGTERM) exits DRIVER_RETRY, which the Job counts toward its backoffLimit, a run's whole budget,
and starts a new pod for until that is spent. Which is which is the table _RETRIED, by type. A crash before
`drive` runs, the package failing to import, is the staged runtime's or the image's: the same files fail
the same way, so the container's script ends it with bad input, never retried (jobs/driver_runtime.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, TextIO

import typer

from tpu_rl.recipes import STEPS, UserError
from tpu_rl.recipes.conventions import DRIVER_KSA, NAMESPACE
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.recipes.outcome import (DRIVER_RETRY, RUN_DECIDED, ApiError, ClusterCredentialsRefused, CredentialsFailure,
                                    Outcome, exit_code)
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.user_files import UserFile
from tpu_rl.scripts.cli.core import PIPED_WIDTH, app, cloud_recipe, outcome_of, without_tokens
from tpu_rl.scripts.pipeline.platforms import platform_for

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # set by the kubelet in every pod


class Terminated(KeyboardInterrupt):
    """SIGTERM: the pod is being deleted (`cancel`) or evicted. A KeyboardInterrupt, so the pipeline ends
    as on Ctrl-C (nothing more submitted, the record says interrupted) within the pod's grace period."""


_sigterm = threading.Event()  # set once SIGTERM came: the interrupted ending is the pod's, retried


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the unwinding's own writes are not cut short
    _sigterm.set()
    raise Terminated()


@app.command("drive", hidden=True)
def drive(request: Path = typer.Option(..., "--request", metavar="FILE",
                                       help="The request `run` mounted (jobs/driver.py).")) -> None:
    """Run the pipeline of a run's request, as its driver in the cluster (started by `tpu-rl run`)."""
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    # PID 1 of its container: without a handler SIGTERM is ignored and the pod lives its whole grace period
    signal.signal(signal.SIGTERM, _on_sigterm)
    raise typer.Exit(drive_to(sys.stdout, request))


def plain_console(out: TextIO):
    from rich.console import Console

    return Console(file=out, force_terminal=False, force_interactive=False, no_color=True, highlight=False,
                   soft_wrap=True, width=PIPED_WIDTH, emoji=False)


def drive_to(out: TextIO, request: Path, in_cluster: bool | None = None) -> int:
    """Drive the request's run, writing every line to `out`; the exit code. The last line of a run that
    did not succeed is its `error: ` line, as the CLI prints it."""
    console = plain_console(out)
    try:
        _drive(console, request, bool(os.environ.get(IN_CLUSTER_ENV)) if in_cluster is None else in_cluster)
        return 0
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 -- every failure ends the Job with its code
        code, message = _ending(console, error)
        console.print(f"error: {without_tokens(message)}", markup=False)
        return code
    finally:
        out.flush()


# The endings the driver's Job starts a new pod for while its backoffLimit lasts (they exit DRIVER_RETRY): a row
# matches an exception, or the ending it is (core.outcome_of), of its type when its rule holds. Every other
# ending exits with its own code, which RUN_DECIDED makes one the Job fails on; after a SIGTERM every ending is
# the pod's, retried.
_RETRIED: tuple[tuple[type[BaseException], Callable[[Any], bool]], ...] = (
    (Terminated, lambda error: True),  # the pod is deleted (`cancel`) or evicted
    (NotDeployed, lambda error: True),  # not there yet: credentials on a new node, the bucket's mount
    # the pod's own credentials, Google's or its service-account token the API server refused (401): no person
    # can log in for it, and a new pod gets them anew (its token is bound to the pod; recipes/outcome.py)
    (CredentialsFailure, lambda error: True),
    (ApiError, lambda error: error.transient),  # the API may answer otherwise later
    (Outcome, lambda error: error.code not in RUN_DECIDED),  # no run's ending (preflight's)
)
# The last line of the endings that say something else in a pod than in a terminal: the first type that
# matches; any other ending's line is its own. None promises a new pod: on the Job's last try there is none,
# and the attached `run` says which (scripts/pipeline/gke/attach.py).
_LINES: tuple[tuple[type[BaseException], Callable[[Any], str]], ...] = (
    (Terminated, lambda error: "the driver's pod was stopped (SIGTERM); what it submitted keeps running"),
    # the person's fix (`gcloud …`) is no pod's: the cluster knows it by its service account's token, Google
    # through Workload Identity
    (ClusterCredentialsRefused, lambda error: (
        "the cluster's API server did not accept the driver pod's service-account token (HTTP 401), which a new "
        f"pod gets anew; if this repeats, check that the service account {DRIVER_KSA} exists in namespace "
        f"{NAMESPACE} (deploy the GKE stack)")),
    (CredentialsFailure, lambda error: (
        f"the driver's pod has no Google credentials yet ({error.cause}): GKE's metadata server may not be ready "
        f"on a new node; if this repeats, check the Workload Identity binding of the service account {DRIVER_KSA} "
        "(deploy the GKE stack)")),
)


def _line(error: BaseException, outcome: BaseException) -> str:
    """The ending's last line: the first row of _LINES whose type the exception or its ending is, else its own."""
    for kind, line in _LINES:
        for candidate in (error, outcome):
            if isinstance(candidate, kind):
                return line(candidate)
    return str(outcome)


def _retried(error: BaseException, outcome: BaseException) -> bool:
    """Whether the driver's Job may start the driver again after this ending (_RETRIED)."""
    return _sigterm.is_set() or any(isinstance(candidate, kind) and when(candidate)
                                    for kind, when in _RETRIED for candidate in (error, outcome))


def _ending(console, error: BaseException) -> tuple[int, str]:
    """The exit code for the driver's Job (an outcome of the run, or DRIVER_RETRY) and the last line."""
    try:
        outcome = outcome_of(error)
    except Exception:  # noqa: BLE001 -- a bug: its traceback in the log, and the Job tries again
        console.print(traceback.format_exc(), markup=False)
        return DRIVER_RETRY, f"the driver crashed ({type(error).__name__}: {error}); its traceback is above"
    return (DRIVER_RETRY if _retried(error, outcome) else int(exit_code(outcome))), _line(error, outcome)


def _drive(console, path: Path, in_cluster: bool) -> None:
    from tpu_rl.scripts.cli import cloud
    from tpu_rl.scripts.version import package_version

    try:
        request = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"the driver's request {path} cannot be read ({error}): start the run with `tpu-rl run`")
    recipe, settings = cloud_recipe("run", request["recipe"])
    # Checked by the `run` that created this driver: the same items make the same run.
    spec = (RunSpec.requested(recipe, request["sets"], request["run"]).with_sweep(request.get("sweep"))
            .with_fit(request.get("fit")))
    files = tuple(UserFile(kind=f["kind"], name=f["name"], content=(path.parent / f["name"]).read_text(),
                           functions=tuple(f["functions"]), source=f["source"], unchecked=f["unchecked"])
                  for f in request["user_files"])
    spec = spec.with_user_files(files)
    steps = tuple(step for step in STEPS if step in request["steps"])
    session = cloud.make_session(spec, settings, "writes")
    session.console, session.confirm, session.driven = console, None, True  # no terminal: nothing is asked
    session.clients.in_cluster = in_cluster
    session.argv = request.get("command")  # run.json records the attaching `run`'s command line
    session.consent = request.get("consent")  # what the attaching `run` was given (recipes/costs/consent.py)
    console.print(f"driver: tpu-rl {package_version()} drives run {session.paths.run_name} ({', '.join(steps)})")
    platform_for(spec.recipe).drive(session, steps, replace=request["replace"], follow_logs=request["follow_logs"])
