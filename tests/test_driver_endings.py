"""Which API endings the run's driver ends its Job with (exit 4, a FailJob code: asking again is answered
the same) and which it exits RETRY_EXIT_CODE for (the Job starts it again: the API may come back)."""

from __future__ import annotations

import io
import json

import pytest
from kubernetes.client.exceptions import ApiException

from peers.cluster_access import KUBECONFIG_TOKEN, start_as_pod
from peers.fixtures import peer_settings, spec_of
from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES, RETRY_EXIT_CODE
from tpu_rl.recipes import UserError
from tpu_rl.recipes.conventions import DRIVER_KSA
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.recipes.outcome import (ApiError, ClusterCredentialsRefused, CredentialsMissing, CredentialsRefused,
                                    ExitCode, Interrupted, OutputMissing, PreflightFailed, Reported, StepFailed)
from tpu_rl.scripts.cloud.reach import REACH_ENV


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
CLUSTER_POD_LINE = "error: the cluster's API server did not accept the driver pod's service-account token (HTTP 401)"
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
    (ClusterCredentialsRefused("no login: fix it", cause="no login"), 75, CLUSTER_POD_LINE),
    (RuntimeError("a bug"), 75, "error: the driver crashed (RuntimeError: a bug); its traceback is above"),
]


@pytest.mark.parametrize("error, code, line", ENDINGS, ids=[type(error).__name__ for error, _, _ in ENDINGS])
def test_each_ending_leaves_the_drivers_job_its_code_and_line(monkeypatch, tmp_path, error, code, line):
    ended, last = _drive_ending(monkeypatch, tmp_path, error)
    assert ended == code and last.startswith(line), (ended, last)


def test_no_retried_endings_line_promises_another_pod(monkeypatch, tmp_path):
    """The Job's last try gets none (its backoffLimit is the run's whole budget, jobs/driver.py): the attached
    `run` says whether another pod came or the driver gave up (scripts/pipeline/gke/attach.py)."""
    for error, code, _ in ENDINGS:
        if code == RETRY_EXIT_CODE:
            _, last = _drive_ending(monkeypatch, tmp_path, error)
            assert "starts it again" not in last and "Job starts" not in last, last


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


# --- a 401 from the cluster's API server: the kubeconfig's login on a laptop, the pod's own token in the driver ----
def _request(directory):
    """The request `run` mounts for its driver (jobs/driver.py run_request), as a file."""
    from tpu_rl.jobs.driver import REQUEST_FILE, run_request
    from tpu_rl.recipes import STEPS, get_recipe

    request = run_request(spec_of(get_recipe("qwen3-v6e32")), STEPS, replace=False, follow_logs=False, version="0")
    directory.mkdir()
    (directory / REQUEST_FILE).write_text(json.dumps(request))
    return directory / REQUEST_FILE


def test_a_driver_whose_pods_token_the_api_server_refuses_is_started_again_in_a_new_pod(
        settings_env, gcs, google, tmp_path, monkeypatch):
    """In a pod a 401 refuses the pod's service-account token, bound to the pod and its ServiceAccount: no login
    of a person fixes it, the new pod the Job starts gets a new token. Through the driver's own in-cluster client
    (peers/cluster_access.py), with no kubeconfig at all."""
    from tpu_rl.scripts.cli import drive
    from tpu_rl.scripts.cloud.cluster import Cluster
    from tpu_rl.scripts.cloud.kubeconfig import in_cluster_api_client

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    kube = start_as_pod(tmp_path / "pod", monkeypatch, token="token-of-a-recreated-service-account")
    try:
        Cluster(in_cluster_api_client(), peer_settings()).check_ready()  # the pod reaches its API with its token
        kube.refused_tokens.add("token-of-a-recreated-service-account")
        out = io.StringIO()
        code = drive.drive_to(out, _request(tmp_path / "request"), in_cluster=True)
    finally:
        kube.stop()
    last = out.getvalue().splitlines()[-1]
    assert code == RETRY_EXIT_CODE and code not in OUTCOME_EXIT_CODES, (code, out.getvalue())
    assert last.startswith(CLUSTER_POD_LINE) and f"service account {DRIVER_KSA}" in last, last
    assert "gcloud" not in last and "kubeconfig" not in last, last  # no person's login in a pod


def test_a_kubeconfig_the_api_server_refuses_is_bad_input_naming_the_fix(cloud):
    """On a laptop a 401 refuses the kubeconfig's login: one line with the fix, exit 2, nothing submitted."""
    from typer.testing import CliRunner

    from tpu_rl.scripts.cli import app

    kube = cloud["kube"]
    kube.refused_tokens.add(KUBECONFIG_TOKEN)
    result = CliRunner().invoke(app, ["run", "qwen3-v6e32", "--detach"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: cluster 'rl-test' did not accept your credentials (HTTP 401): "), line
    assert "gcloud container clusters get-credentials" in line, line
    assert not kube.jobs and not kube.jobsets, "something was submitted"


# Authorized networks never restrict the cluster's own nodes and pods (cloud.google.com/kubernetes-engine/docs/
# how-to/authorized-networks), and the pod is given no tuning setting: a laptop's fix is no pod's.
LAPTOP_FIXES = ("AUTHORIZED_CIDR", "your address", "your account", "roles/container.developer", REACH_ENV, "gcloud",
                "kubeconfig")


@pytest.mark.parametrize("status, code, line", [("drop", RETRY_EXIT_CODE, "error: cannot reach cluster 'rl-test' at "),
                                                (403, ExitCode.BAD_INPUT, "error: cluster 'rl-test' refused access "
                                                 f"(HTTP 403) to the driver's service account {DRIVER_KSA}: ")])
def test_a_cluster_api_away_or_refusing_the_driver_says_the_pods_fix_not_a_laptops(
        settings_env, gcs, google, tmp_path, monkeypatch, status, code, line):
    """Through the driver's own in-cluster client (peers/cluster_access.py): an API server that does not answer
    is retried by the Job (it may be an upgrade); one that refuses the pod's service account is the GKE stack's
    Role, not retried."""
    from peers.http import Fault
    from tpu_rl.scripts.cli import drive

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv(REACH_ENV, "1")
    kube = start_as_pod(tmp_path / "pod", monkeypatch, token="the-pods-token")
    kube.faults.append(Fault("GET", "/apis/jobset.x-k8s.io/v1alpha2", status, times=1000))
    try:
        out = io.StringIO()
        ended = drive.drive_to(out, _request(tmp_path / "request"), in_cluster=True)
    finally:
        kube.stop()
    last = out.getvalue().splitlines()[-1]
    assert ended == code and last.startswith(line), (ended, out.getvalue())
    assert not [fix for fix in LAPTOP_FIXES if fix in last], last
    assert status != "drop" or "from the driver's pod, its control plane may be away" in last, last
