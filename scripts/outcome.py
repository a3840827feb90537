"""How a `tpu-rl` command ends: one exception type per outcome, one exit code each.

The codes are documented in docs/pipeline.md ("Exit codes") and printed by `tpu-rl --help`.
"""

from __future__ import annotations

import sys
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    JOB_FAILED = 1  # a step failed on the cluster or the VM (JobSet failed, pod OOMKilled, evicted, ...)
    BAD_INPUT = 2  # rejected before anything was created or submitted (UserError, bad arguments)
    OUTPUT_MISSING = 3  # a step reported success but its output is not in GCS; the next step did not start
    API_ERROR = 4  # a cloud or cluster API kept failing after retries; what was submitted keeps running
    PREFLIGHT_FAILED = 5  # `tpu-rl preflight` found at least one failed check
    INTERRUPTED = 130  # Ctrl-C while waiting; submitted jobs keep running


EXIT_CODES_HELP = (
    "Exit codes: 0 success, 1 a step failed, 2 bad input (nothing submitted), 3 a step's output is missing "
    "in GCS, 4 cloud/cluster API error after retries, 5 preflight check failed, 130 interrupted (jobs keep running)."
)


class Outcome(Exception):
    """A non-success ending with a one-line explanation; the CLI prints it and exits with `code`."""

    code: ExitCode = ExitCode.API_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class StepFailed(Outcome):
    code = ExitCode.JOB_FAILED


class OutputMissing(Outcome):
    code = ExitCode.OUTPUT_MISSING


class ApiError(Outcome):
    """`transient`: asking again later may work (the API away, a 5xx or 429 past the retries); False when
    the answer will not change (the server rejected the request, a conflict, a bound the run enforces),
    which the run's driver ends with rather than being started again (scripts/cli/drive.py)."""

    code = ExitCode.API_ERROR
    transient = True

    def __init__(self, message: str, *, transient: bool | None = None) -> None:
        super().__init__(message)
        if transient is not None:
            self.transient = transient


class PreflightFailed(Outcome):
    code = ExitCode.PREFLIGHT_FAILED


class Interrupted(Outcome):
    code = ExitCode.INTERRUPTED


class Reported(Outcome):
    """An ending already said where it happened: the run's driver printed its line, which the attached
    `run` showed. The CLI exits with its code and prints nothing more."""

    def __init__(self, code: int) -> None:
        super().__init__("")
        self.code = ExitCode(code)


_KUBE_API_EXCEPTION = ("kubernetes.client.exceptions", "ApiException")

# Exceptions the cloud libraries raise past our own handling, tried in this order: (module, class, exit
# code, the line's start; `{what}` is describe(error), `{text}` the error's own message).
_FOREIGN: tuple[tuple[str, str, ExitCode, str], ...] = (
    (*_KUBE_API_EXCEPTION, ExitCode.API_ERROR, "Kubernetes API error: {what}"),
    ("google.api_core.exceptions", "GoogleAPIError", ExitCode.API_ERROR, "Google API error: {text}"),
    # e.g. RefreshError: the stored login expired or was revoked
    ("google.auth.exceptions", "GoogleAuthError", ExitCode.API_ERROR,
     "Google did not accept your credentials ({what}): run `gcloud auth application-default login`"),
    # the REST clients (Compute, and any redirected API) could not connect
    ("requests", "RequestException", ExitCode.API_ERROR,
     "cannot reach a Google API ({what}): check the network and run the command again"),
    # a followed log stream broke midway (requests are retried in tpu_rl.scripts.cloud.retry)
    ("urllib3.exceptions", "HTTPError", ExitCode.API_ERROR,
     "lost the connection to the cluster ({what}): run the command again"),
)


def _is_a(error: BaseException, module_name: str, class_name: str) -> bool:
    """isinstance against a library's class, looked up only in a module that is already imported: an
    exception cannot be an instance of a class that was never loaded, and importing the kubernetes and
    Google clients here would cost every command (`--help`, `recipes`, `render`) their start-up."""
    cls = getattr(sys.modules.get(module_name), class_name, None)
    return cls is not None and isinstance(error, cls)


def clip(text: str, limit: int) -> str:
    """`text` on one line in at most about `limit` characters, cut at a space and marked with "…", never
    mid-word (a URL or an endpoint stays whole or goes)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > 0 else text.split(" ")[0]).rstrip(" ,;:(") + " …"


def describe(error: BaseException) -> str:
    """A library's exception in a few words: a Kubernetes API error as its HTTP status, others by type."""
    if _is_a(error, *_KUBE_API_EXCEPTION):
        return f"HTTP {error.status} {error.reason or ''}".strip()
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {clip(text, 160)}" if text else type(error).__name__


def foreign_ending(error: BaseException) -> tuple[ExitCode, str] | None:
    """The exit code and one line for a cloud library's exception, or None when it is none of them."""
    for module_name, class_name, code, template in _FOREIGN:
        if _is_a(error, module_name, class_name):
            return code, template.format(what=describe(error),
                                         text=f"{type(error).__name__}: {clip(str(error), 200)}")
    return None
