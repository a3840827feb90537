"""How a `tpu-rl` command and a run end, and what is worth asking again: the one home of exit codes, outcomes,
transient-or-final, the retry policy, the run's driver's contract with its Job, and the retry rules of the TPU
VM's startup script.

It sits in the bottom layer so that every layer reads it: the driver's Job (jobs/driver.py) derives its
podFailurePolicy from RUN_DECIDED and DRIVER_RETRY, the VM's script renderer (jobs/vm.py) its retries from
VM_SCRIPT_RETRIES, and the CLI (scripts/) raises these outcomes and ends with their codes. The codes are documented in docs/pipeline.md ("Exit codes") and printed by `tpu-rl --help`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

from tpu_rl.recipes.errors import NotDeployed, UserError


class ExitCode(IntEnum):
    OK = 0
    JOB_FAILED = 1  # a step failed on the cluster or the VM (JobSet failed, pod OOMKilled, evicted, ...)
    BAD_INPUT = 2  # rejected before anything was created or submitted (UserError, bad arguments)
    OUTPUT_MISSING = 3  # a step reported success but its output is not in GCS; the next step did not start
    API_ERROR = 4  # a cloud or cluster API kept failing after retries; what was submitted keeps running
    PREFLIGHT_FAILED = 5  # `tpu-rl preflight` found at least one failed check
    INTERRUPTED = 130  # Ctrl-C while waiting; submitted jobs keep running


# Each code in `tpu-rl --help`'s few words.
MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.JOB_FAILED: "a step failed",
    ExitCode.BAD_INPUT: "bad input (nothing submitted)",
    ExitCode.OUTPUT_MISSING: "a step's output is missing in GCS",
    ExitCode.API_ERROR: "cloud/cluster API error after retries",
    ExitCode.PREFLIGHT_FAILED: "preflight check failed",
    ExitCode.INTERRUPTED: "interrupted (jobs keep running)",
}
EXIT_CODES_HELP = "Exit codes: " + ", ".join(f"{int(code)} {MEANINGS[code]}" for code in ExitCode) + "."

# The endings a run decides (a step failed, bad input, an output missing, an API's answer that will not change,
# an interrupt that was no SIGTERM): its driver's Job fails at once on them and never runs it again. Success
# ends no Job in failure, and only `preflight` finds a failed check, which no run does.
RUN_DECIDED: tuple[ExitCode, ...] = tuple(code for code in ExitCode
                                          if code not in (ExitCode.OK, ExitCode.PREFLIGHT_FAILED))
# Every other ending of the run's driver (a transient API error, its pod's credentials missing or refused, a
# crash inside `drive`, SIGTERM), and of its install, exits with this code (EX_TEMPFAIL of sysexits.h): it matches
# no FailJob rule and so counts toward the Job's backoffLimit (kubernetes.io/docs/tasks/job/pod-failure-policy:
# rules in order, an unmatched failure counts), and the Job starts the driver again while that budget, the run's
# whole life's, lasts (DRIVER_BACKOFF_LIMIT).
DRIVER_RETRY = 75
# The driver Job's backoffLimit: its retried failures count for the Job's whole life, each after a back-off
# doubling from 10 s to 10 min, so this is a run's whole budget (eight ~20-min API outages, or ~10 h of a
# failure that always comes back); spent, the Job fails and `run` again starts a new driver. Sources and
# what runs on unwatched: docs/pipeline.md, "The run's driver (GKE)".
DRIVER_BACKOFF_LIMIT = 64


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


class PermissionRefused(ApiError):
    """An API refused the caller (HTTP 403): a role it lacks, which asking again does not grant."""

    transient = False


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


def exit_code(ending: UserError | Outcome) -> ExitCode:
    """The exit code of an expected ending: bad input, or the outcome's own."""
    return ExitCode.BAD_INPUT if isinstance(ending, UserError) else ending.code


# --- credentials --------------------------------------------------------------------------------------
class CredentialsFailure(Exception):
    """Google or the cluster found no credentials of the caller, or refused them. `cause` says which, without
    the person's fix (`gcloud auth …`): the run's driver has no person to log in, its credentials are its
    pod's Workload Identity (scripts/cli/drive.py). Each kind below is also the ending it always was."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class CredentialsMissing(CredentialsFailure, NotDeployed):
    """No Google credentials at all (google.auth's DefaultCredentialsError): exit 2, like anything not there yet."""


class CredentialsRefused(CredentialsFailure, ApiError):
    """Google refused the stored credentials (e.g. RefreshError: the login expired or was revoked): exit 4."""


class ClusterCredentialsRefused(CredentialsFailure, UserError):
    """The cluster's API server answered 401: on the user's machine to the kubeconfig's login (expired, or no
    auth plugin), exit 2 with the person's fix; in the run's driver to its pod's service-account token, which
    is bound to the pod and its ServiceAccount (kubernetes.io/docs/reference/access-authn-authz/
    service-accounts-admin) and no login fixes: the driver exits DRIVER_RETRY, a new pod gets a new token."""


# --- what is worth asking again --------------------------------------------------------------------------
# HTTP statuses (RFC 9110 section 15; 429: RFC 6585 section 4) of an answer that may change: throttled, or
# the server's own failure. Status 0: the Kubernetes client's for no answer at all.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
THROTTLED = 429  # the server certainly did nothing, so even a create may be repeated
# 4xx that are no refusal of the request itself: 401 Unauthorized refuses the caller's credentials, which fresh
# ones may pass (a person's new login; the driver's next pod, which its Job starts, has a new token:
# ClusterCredentialsRefused), 408 Request Timeout, 409 Conflict, 429 Too Many Requests.
NOT_REFUSALS = frozenset({401, 408, 409, THROTTLED})


def transient_status(status: int) -> bool:
    """An API's answer (or none, 0) that the same request may not get again."""
    return status in RETRYABLE_STATUS or status == 0


def refused_for_good(status: int) -> bool:
    """The server refused the request itself: the same request is refused again."""
    return 400 <= status < 500 and status not in NOT_REFUSALS


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a repeatable request is tried (scripts/cloud/retry.py applies it)."""

    attempts: int = 6
    base_delay: float = 1.0  # seconds before the second try; doubled each time (TPU_RL_RETRY_BASE_SECONDS)
    max_delay: float = 30.0
    request_timeout: float = 30.0  # seconds per request, connect and read (TPU_RL_REQUEST_TIMEOUT_SECONDS)
    reach_seconds: float = 20.0  # the first contact with an endpoint, in all (TPU_RL_REACH_SECONDS)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds before the next try after `attempt` (0-based); a throttling server's Retry-After wins."""
        if retry_after and retry_after.isdigit():
            return min(float(retry_after), self.max_delay)
        return min(self.base_delay * 2**attempt, self.max_delay)


# --- what the TPU VM's startup script tries again --------------------------------------------------------
@dataclass(frozen=True)
class ScriptSeconds:
    """Seconds of the VM's startup script that a test replaces through `env` (the guest agent sets none): the
    script reads `${env:-seconds}` (jobs/vm_preamble.py Knob)."""

    seconds: int
    env: str


@dataclass(frozen=True)
class CountedRetry:
    """A command of the VM's startup script run again after it failed: `tries` times in all, `pause` times the
    try apart (one pause, then two, ...)."""

    tries: int
    pause: ScriptSeconds


@dataclass(frozen=True)
class TimedRetry:
    """A command of the VM's startup script run again while it fails, every `pause`, until `within` has passed
    since its first try."""

    within: ScriptSeconds
    pause: ScriptSeconds


@dataclass(frozen=True)
class VmScriptRetries:
    """Every retry rule of the VM's startup script (jobs/vm_script/*.sh), which its renderer writes into the
    script's readonly values (jobs/vm.py, jobs/vm_install.py, named below) and `run`'s own bounds of the
    script's phases derive from (scripts/pipeline/vm/phase_watch.py)."""

    # A bucket upload or check (records.sh put, list_objects) that fails for another reason than "no such
    # object": a transient error at boot must not rerun a finished step. GCS_TRIES, GCS_RETRY_SECONDS.
    bucket: CountedRetry
    # A failed `apt-get update` (its mirrors; install.sh apt_update), each try within its own bound. APT_TRIES;
    # the part pauses by GCS_RETRY_SECONDS, the bucket's pause, so the two share it.
    apt_update: CountedRetry
    # `apt-get update` and dpkg, which do not wait for a lock another process holds (the image's apt-daily at
    # first boot), run while they fail on it (bounded.sh lock_retry), for as long as apt-get install waits for
    # the dpkg lock (APT_LOCK_SECONDS; docs/provenance.md#apt-and-dpkg-locks). LOCK_WAIT_SECONDS, LOCK_RETRY_SECONDS.
    lock: TimedRetry
    # How long the script waits for snapd's seeding, then gcloud on PATH (records.sh wait_for_gcloud), before its
    # first record: docs/provenance.md#gcloud-at-first-boot. GCLOUD_WAIT_SECONDS.
    gcloud_wait: ScriptSeconds

    def __post_init__(self) -> None:
        if self.apt_update.pause != self.bucket.pause:
            raise ValueError("install.sh pauses apt-get update by GCS_RETRY_SECONDS: give apt_update the bucket's "
                             "pause, or the part a variable of its own")


_BUCKET_PAUSE = ScriptSeconds(10, "TPU_RL_GCS_RETRY_SECONDS")
VM_SCRIPT_RETRIES = VmScriptRetries(
    bucket=CountedRetry(tries=5, pause=_BUCKET_PAUSE),
    apt_update=CountedRetry(tries=3, pause=_BUCKET_PAUSE),
    lock=TimedRetry(within=ScriptSeconds(600, "TPU_RL_LOCK_WAIT_SECONDS"),
                    pause=ScriptSeconds(10, "TPU_RL_LOCK_RETRY_SECONDS")),
    gcloud_wait=ScriptSeconds(300, "TPU_RL_GCLOUD_WAIT_SECONDS"),
)
