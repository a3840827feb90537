"""`tpu-rl run/status/logs` for the VM recipe: progress markers in GCS and the serial console."""

from __future__ import annotations

from typer.testing import CliRunner

from test_cli_status_logs import fits_80_columns_with_whole_paths

from peers.fixtures import SETTINGS, TOKEN, put_step_output, peer_settings
from jobs.paths import ArtifactPaths, split_gs_url
from jobs.vm import DONE, LOG_TAG, STARTING
from recipes import get_recipe
from scripts.cli import app
from scripts.outcome import ExitCode

RECIPE = "llama31-v6e8"
VM = (SETTINGS["ZONE"], "rl-test-vm")
runner = CliRunner()
# How the guest agent reports a failed startup script on the console (GoogleCloudPlatform/guest-agent
# google_metadata_script_runner/main.go: "Script %q failed with error: %v", Go's "exit status N").
SCRIPT_FAILED_LINE = 'Script "startup-script" failed with error: exit status 1\n'


def progress(step: str, event: str) -> str:
    """A progress line of the startup script (jobs/vm.py log()) as the guest agent copies it to the console."""
    return f"startup-script: {LOG_TAG} 2026-11-30T00:00:00Z {step}: {event}\n"


def console(google, text: str):
    return lambda: google.serial.__setitem__(VM, google.serial.get(VM, "") + text)


def finish(google, gcs, step: str):
    """The startup script finishing a step: output, then the marker, then its log line."""
    recipe = get_recipe(RECIPE)

    def act():
        put_step_output(gcs, recipe, step)
        bucket, name = split_gs_url(ArtifactPaths(recipe, peer_settings()).progress_marker(step))
        gcs.bucket(bucket).blob(name).upload_from_string("2026-11-30T00:00:00Z")
        console(google, progress(step, DONE))()

    return act


def test_vm_run_follows_markers_and_verifies_each_output(settings_env, gcs, google):
    google.instances[VM] = "RUNNING"
    script = [console(google, "booting\n")]
    for step in ("convert", "train", "export"):
        script += [console(google, progress(step, STARTING)), finish(google, gcs, step)]
    google.on_serial_read += script
    result = runner.invoke(app, ["run", RECIPE, "--follow-logs"])
    assert result.exit_code == 0, result.output
    for step in ("convert", "train", "export"):
        assert f"{step}: running" in result.output and f"{step}: output verified" in result.output
    assert "vm| booting" in result.output


def test_vm_run_reports_a_failed_startup_script_with_its_last_console_line(settings_env, gcs, google):
    google.instances[VM] = "RUNNING"
    google.on_serial_read += [
        finish(google, gcs, "convert"),
        console(google, progress("train", STARTING) + "startup-script: RESOURCE_EXHAUSTED: Out of memory in HBM\n"
                + SCRIPT_FAILED_LINE)]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "step train failed on TPU VM rl-test-vm" in line and "exit status 1" in line
    assert f"tpu-rl logs {RECIPE} train" in line


def test_vm_run_reports_a_stopped_vm(settings_env, gcs, google):
    google.instances[VM] = "TERMINATED"
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    assert "TPU VM rl-test-vm is TERMINATED before convert finished" in result.output


def test_vm_run_without_the_vm_says_to_deploy_it(settings_env, gcs, google):
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "TPU VM 'rl-test-vm' not found in zone us-east5-b" in result.output


def test_vm_run_with_every_output_verified_does_nothing(settings_env, gcs, google):
    google.instances[VM] = "RUNNING"
    for step in ("convert", "train", "export"):
        put_step_output(gcs, get_recipe(RECIPE), step)
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0 and result.output.count("skipping") == 3
    assert not any("serialPort" in path for _, path, _ in google.requests)


def test_vm_status_and_logs(settings_env, gcs, google):
    google.instances[VM] = "RUNNING"
    finish(google, gcs, "convert")()
    google.serial[VM] = (progress("convert", STARTING) + "converting\n" + progress("convert", DONE)
                         + progress("train", STARTING) + "step 1\n")
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert "convert" in status.output and "done" in status.output and "running" in status.output
    logs = runner.invoke(app, ["logs", RECIPE, "convert"])
    assert logs.exit_code == 0, logs.output
    assert logs.output.splitlines() == [progress("convert", STARTING).strip(), "converting",
                                        progress("convert", DONE).strip()]
    tail = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "1"])
    assert tail.output.splitlines() == ["step 1"]
    not_yet = runner.invoke(app, ["logs", RECIPE, "export"])
    assert not_yet.exit_code == ExitCode.BAD_INPUT and "has not started yet" in not_yet.output


def test_vm_status_without_the_vm_shows_what_the_bucket_holds(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    finish(google, gcs, "convert")()  # the run got as far as convert, then the VM was deleted
    del google.serial[VM]
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    lines = status.output.splitlines()
    assert fits_80_columns_with_whole_paths(status.output), status.output
    assert [line.split()[:2] for line in lines if line.split()[:1] in (["convert"], ["train"], ["export"])] == [
        ["convert", "done"], ["train", "not"], ["export", "not"]]
    assert "output verified" in status.output
    assert [line for line in lines if line.startswith(("train ", "export "))] == [
        "train    not done, no output yet", "export   not done, no output yet"]  # one line each
    note = " ".join(" ".join(lines).split())
    assert "TPU VM 'rl-test-vm' does not exist in zone us-east5-b" in note
    assert f"`npx cdktf deploy {RECIPE}` creates it" in note
