"""Which API endings the run's driver ends its Job with (exit 4, a FailJob code: asking again is answered
the same) and which it exits RETRY_EXIT_CODE for (the Job starts it again: the API may come back)."""

from __future__ import annotations

import io

import pytest
from kubernetes.client.exceptions import ApiException

from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES, RETRY_EXIT_CODE
from tpu_rl.scripts.outcome import ExitCode


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
    from tpu_rl.scripts.cloud.kube import JobSetExists
    from tpu_rl.scripts.outcome import ApiError

    conflict = JobSetExists("x", {"metadata": {"name": "x"}})
    reworded = ApiError(f"lost contact with the cluster while waiting for train ({conflict})",
                        transient=conflict.transient)  # as submit.py's wait rewords it
    for error in (conflict, reworded, ApiError("no read of the head's log worked for 0:10:00", transient=False)):
        code, _ = _drive_ending(monkeypatch, tmp_path, error)
        assert code == ExitCode.API_ERROR, error


def test_an_unclassified_api_error_is_retried(monkeypatch, tmp_path):
    from tpu_rl.scripts.outcome import ApiError

    code, _ = _drive_ending(monkeypatch, tmp_path, ApiError("writing gs://b/run.json failed: ServiceUnavailable"))
    assert code == RETRY_EXIT_CODE
    code, _ = _drive_ending(monkeypatch, tmp_path, ApiException(status=404))  # a library's own, unwrapped
    assert code == RETRY_EXIT_CODE
