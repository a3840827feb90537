"""How a `tpu-rl` command ends: one exception type per outcome, one exit code each.

The codes are documented in the README ("Exit codes") and printed by `tpu-rl --help`.
"""

from __future__ import annotations

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
    code = ExitCode.API_ERROR


class PreflightFailed(Outcome):
    code = ExitCode.PREFLIGHT_FAILED


class Interrupted(Outcome):
    code = ExitCode.INTERRUPTED
