"""Which API endings the run's driver ends its Job with (exit 4, a FailJob code: asking again is answered
the same) and which it exits RETRY_EXIT_CODE for (the Job starts it again: the API may come back)."""

from __future__ import annotations

import io

import pytest
from kubernetes.client.exceptions import ApiException

from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES, RETRY_EXIT_CODE
from tpu_rl.recipes import UserError
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.recipes.outcome import (ApiError, ClusterCredentialsRefused, CredentialsMissing, CredentialsRefused,
                                    ExitCode, Interrupted, OutputMissing, PreflightFailed, Reported, StepFailed)


def _drive_ending(monkeypatch, tmp_path, error: BaseException) -> tuple[int, str]:
    from tpu_rl.scripts.cli import drive

    def fail(console, path, in_cluster):
        raise error

    monkeypatch.setattr(drive, "_drive", fail)
    out = io.StringIO()
    code = drive.drive_to(out, tmp_path / "request.json", in_cluster=True)
    return code, out.getvalue().splitlines()[-1]


# HTTP statuses (RFC 9110 section 15.5; 429: RFC 6585 section 4) of a request the server refused as such
@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_a_request_the_server_rejected_ends_the_drivers_job(monkeypatch, tmp_path, status):
    from tpu_rl.scripts.cloud.retry import failed

    code, last = _drive_ending(monkeypatch, tmp_path, failed("creating JobSet x", ApiException(status=status)))
    assert code == ExitCode.API_ERROR and code in OUTCOME_EXIT_CODES
    assert last.startswith("error: creating JobSet x failed with HTTP ") and str(status) in last, last


# a token not valid yet (Workload Identity on a new node), a timeout, a conflict of our own retried
# create, throttling, and the server's own failures: the same request may work later
@pytest.mark.parametrize("status", [0, 401, 408, 409, 429, 500, 503])
def test_an_api_error_that_may_pass_is_retried_by_the_drivers_job(monkeypatch, tmp_path, status):
    from tpu_rl.scripts.cloud.retry import failed

    code, last = _drive_ending(monkeypatch, tmp_path, failed("reading JobSet x", ApiException(status=status)))
    assert code == RETRY_EXIT_CODE and code not in OUTCOME_EXIT_CODES
    assert last.startswith("error: reading JobSet x failed with "), last


def test_a_conflicting_jobset_and_a_stall_bound_are_final_and_stay_so_when_reworded(monkeypatch, tmp_path):
    from tpu_rl.scripts.cloud.cluster import JobSetExists

    conflict = JobSetExists("x", {"metadata": {"name": "x"}})
    reworded = ApiError(f"lost contact with the cluster while waiting for train ({conflict})",
                        transient=conflict.transient)  # as submit.py's wait rewords it
    for error in (conflict, reworded, ApiError("no read of the head's log worked for 0:10:00", transient=False)):
        code, _ = _drive_ending(monkeypatch, tmp_path, error)
        assert code == ExitCode.API_ERROR, error


def test_an_unclassified_api_error_is_retried(monkeypatch, tmp_path):

    code, _ = _drive_ending(monkeypatch, tmp_path, ApiError("writing gs://b/run.json failed: ServiceUnavailable"))
    assert code == RETRY_EXIT_CODE
    code, _ = _drive_ending(monkeypatch, tmp_path, ApiException(status=404))  # a library's own, unwrapped
    assert code == RETRY_EXIT_CODE


# --- drive's endings are a table (scripts/cli/drive.py _RETRIED, _LINES), by type, never by text ------------
POD_LINE = "error: the driver's pod has no Google credentials yet (no login): GKE's metadata server"
ENDINGS = [  # (the ending, its exit code, how its last line starts)
    (StepFailed("train failed"), 1, "error: train failed"),
    (UserError("bad value"), 2, "error: bad value"),
    (OutputMissing("no checkpoint"), 3, "error: no checkpoint"),
    (ApiError("refused", transient=False), 4, "error: refused"),
    (Interrupted("interrupted"), 130, "error: interrupted"),
    (KeyboardInterrupt(), 130, "error: interrupted"),
    (Reported(1), 1, "error:"),
    (ApiError("away"), 75, "error: away"),
    (NotDeployed("no bucket yet"), 75, "error: no bucket yet"),
    (PreflightFailed("2 of 9 checks failed"), 75, "error: 2 of 9 checks failed"),  # no run's ending
    # a text that names the person's fix is no credentials failure: it keeps its own line
    (StepFailed("run `gcloud auth login`"), 1, "error: run `gcloud auth login`"),
    (CredentialsMissing("no login: fix it", cause="no login"), 75, POD_LINE),
    (CredentialsRefused("no login: fix it", cause="no login"), 75, POD_LINE),
    (ClusterCredentialsRefused("no login: fix it", cause="no login"), 2, POD_LINE),
    (RuntimeError("a bug"), 75, "error: the driver crashed (RuntimeError: a bug); its Job starts it again"),
]


@pytest.mark.parametrize("error, code, line", ENDINGS, ids=[type(error).__name__ for error, _, _ in ENDINGS])
def test_each_ending_leaves_the_drivers_job_its_code_and_line(monkeypatch, tmp_path, error, code, line):
    ended, last = _drive_ending(monkeypatch, tmp_path, error)
    assert ended == code and last.startswith(line), (ended, last)


def test_every_row_of_drives_tables_is_exercised():
    from tpu_rl.scripts.cli import drive
    from tpu_rl.scripts.cli.core import outcome_of

    errors = [error for error, _, _ in ENDINGS] + [drive.Terminated()]
    for table in (drive._RETRIED, drive._LINES):
        for kind, _ in table:
            assert any(isinstance(error, kind) or isinstance(_safe(outcome_of, error), kind) for error in errors), kind


def _safe(fn, error):
    try:
        return fn(error)
    except Exception:  # noqa: BLE001 - a bug's own: no ending
        return None
