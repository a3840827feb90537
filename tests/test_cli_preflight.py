"""`tpu-rl preflight` against the Compute, TPU, Secret Manager peers and the GCS emulator."""

from __future__ import annotations

from typer.testing import CliRunner

from peers.fixtures import SETTINGS, _free_port, make_bucket, gcs, gcs_server, google, settings_env  # noqa: F401
from scripts.cli import app
from scripts.outcome import ExitCode

runner = CliRunner()
ZONE = SETTINGS["ZONE"]


def preflight(recipe: str = "qwen3-v6e32"):
    return runner.invoke(app, ["preflight", recipe])


def failed_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("FAIL")]


def test_preflight_passes_when_capacity_bucket_and_token_are_in_place(settings_env, gcs, google):
    result = preflight()
    assert result.exit_code == 0, result.output
    for check in ("reservation", "machine type", "accelerator type", "bucket", "token secret"):
        assert f"pass  {check}:" in result.output
    assert "16 of 16 ct6e-standard-4t free, 8 needed" in result.output
    assert "v6e-32 offered in us-east5-b" in result.output


def test_preflight_of_the_vm_recipe_checks_its_own_shape(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    result = preflight("llama31-v6e8")
    assert result.exit_code == 0, result.output
    assert "1 of 1 ct6e-standard-8t free, 1 needed" in result.output and "v6e-8 offered" in result.output


def test_preflight_reports_every_failure_with_its_fix(settings_env, gcs, google):
    google.reservations.clear()
    google.machine_types.clear()
    google.accelerator_types.clear()
    google.secrets["hf-token"] = []
    gcs.get_bucket(SETTINGS["GCS_BUCKET"]).delete()
    result = preflight()
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED
    lines = failed_lines(result)
    assert len(lines) == 5, result.output
    assert "reservation 'v6e-reservation' not found in zone us-east5-b" in lines[0]
    assert "ct6e-standard-4t is not offered in zone us-east5-b" in lines[1]
    assert "v6e-32 is not offered in zone us-east5-b" in lines[2]
    assert "bucket gs://rl-test-artifacts does not exist: deploy the artifacts stack" in lines[3]
    assert "no enabled version" in lines[4] and "tpu-rl secret set" in lines[4]
    assert "error: 5 of 5 preflight checks failed" in result.output
    assert "Traceback" not in result.output


def test_preflight_fails_a_reservation_for_another_machine_type(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 16, 0)
    [line] = failed_lines(preflight())
    assert "is for ct6e-standard-8t, recipe 'qwen3-v6e32' needs ct6e-standard-4t" in line


def test_preflight_fails_a_reservation_without_enough_free_hosts(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-4t", 8, 3)
    result = preflight()
    [line] = failed_lines(result)
    assert "has 5 of 8 ct6e-standard-4t free, recipe 'qwen3-v6e32' needs 8" in line
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED


def test_preflight_tells_a_reservation_smaller_than_the_slice_from_a_busy_one(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-4t", 4, 0)
    result = preflight()
    [line] = failed_lines(result)
    assert ("reservation 'v6e-reservation' has 4 ct6e-standard-4t hosts in all, recipe 'qwen3-v6e32' needs 8 for "
            "its slice: use a reservation of at least 8 hosts") in line
    assert "idle node pools" not in line and result.exit_code == ExitCode.PREFLIGHT_FAILED


def test_preflight_fails_a_bucket_in_another_region(settings_env, gcs, google):
    gcs.get_bucket(SETTINGS["GCS_BUCKET"]).delete()
    make_bucket(gcs, SETTINGS["GCS_BUCKET"], "europe-west4")
    [line] = failed_lines(preflight())
    assert "is in europe-west4, not REGION us-east5" in line


def test_preflight_needs_a_reservation_setting_for_reservation_recipes(settings_env, gcs, google, monkeypatch):
    monkeypatch.delenv("RESERVATION")
    result = preflight()
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "RESERVATION is not set" in result.output and google.requests == []


def test_an_api_error_is_a_failed_check_not_a_crash(settings_env, gcs, google):
    from peers.http import Fault

    google.faults.append(Fault("GET", "/acceleratorTypes/", 403))
    [line] = failed_lines(preflight())
    assert line.startswith("FAIL  accelerator type: permission denied")


def test_expired_google_credentials_are_one_line_naming_the_login(settings_env, monkeypatch):
    from google.auth.exceptions import RefreshError

    import scripts.pipeline.preflight

    def expired(*args):  # what google-auth raises when the stored login expired or was revoked
        raise RefreshError("Reauthentication is needed. Please run `gcloud auth application-default login`.")

    monkeypatch.setattr(scripts.pipeline.preflight, "run_checks", expired)
    result = preflight()
    assert result.exit_code == ExitCode.API_ERROR, result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: Google did not accept your credentials (RefreshError: Reauthentication")
    assert line.endswith("run `gcloud auth application-default login`")


def test_an_unreachable_google_api_is_one_line(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("TPU_RL_COMPUTE_ENDPOINT", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    result = preflight()
    assert result.exit_code == ExitCode.API_ERROR, result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: cannot reach a Google API (ConnectionError") and "check the network" in line
