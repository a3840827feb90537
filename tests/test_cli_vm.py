"""`tpu-rl run/status/logs` for the VM recipe against the fake Compute API and the GCS emulator: the
bucket's records (written here by the real startup script under bash, tests/peers/vm_guest.py, or as it
writes them) decide, the serial console is a live view."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from cli_helpers import error_line, fits_80_columns_with_whole_paths
from tpu_rl.jobs import render_startup_script
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm import DONE, STARTING
from peers.fixtures import put_step_output, peer_settings, spec_of
from peers.google_apis import SERIAL_BUFFER
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from vm_helpers import ATTEMPT, PATHS, RECIPE, RUN, VM, ago, begin, boot_and_show, console, every_step, finish, line, progress, put, run_fails, run_finds_it_ended

runner = CliRunner()


def test_vm_run_follows_the_records_and_verifies_each_output(settings_env, gcs, vm):
    vm.on_serial_read += [console(vm, "startup-script: booting\n"), *every_step(vm, gcs)]
    result = runner.invoke(app, ["run", RECIPE, "--follow-logs"])
    assert result.exit_code == 0, result.output
    for step in ("convert", "train", "export"):
        assert f"{step}: running" in result.output and f"{step}: output verified" in result.output
    assert "vm| startup-script: booting" in result.output


# --- 1. a script that fails, in any phase, or ends without a record ----------------------------------------


def test_vm_run_stops_with_the_record_of_a_step_that_failed(settings_env, gcs, vm, guest, clock):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl") == 1
    message = run_finds_it_ended(clock)
    assert message.startswith("error: step train failed on TPU VM rl-test-vm (exit 1, attempt ")
    assert "maxtext.trainers.post_train.rl.train_rl: stand-in error, exiting 1" in message
    assert f"tpu-rl logs {RECIPE} train" in message and "sudo reboot" in message
    logs = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "0"])  # the whole step log, from the bucket
    assert logs.exit_code == 0 and logs.output.splitlines()[0].endswith(f"{RUN} train: starting")
    assert "train: failed (exit 1)" in logs.output


def test_vm_run_refuses_a_secret_without_a_version_before_following(settings_env, gcs, vm):
    vm.secrets["hf-token"] = []
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert error_line(result).startswith("error: secret 'hf-token' has no enabled version: add one with "
                                         "`tpu-rl secret set < token-file`")
    assert not any("serialPort" in path for _, path, _ in vm.requests)


def test_vm_run_refuses_a_secret_whose_latest_version_is_disabled(settings_env, gcs, vm):
    # An older version is enabled, but the script reads `latest`, the newest, which is disabled.
    vm.secrets["hf-token"] = [{"data": b"hf_old", "state": "ENABLED"}, {"data": b"hf_new", "state": "DISABLED"}]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result).startswith("error: the latest version of secret 'hf-token' is disabled, and the "
                                         "VM's startup script reads the latest: add one with `tpu-rl secret set")
    assert not any("serialPort" in path for _, path, _ in vm.requests)


def test_vm_run_ends_on_the_token_phase_of_a_missing_secret_version(settings_env, gcs, vm, guest, clock):
    # The version went away after run's own check: the script's token phase fails and says how to fix it.
    assert boot_and_show(guest, gcs, vm, FAKE_TOKEN="") == 1
    message = run_finds_it_ended(clock)
    assert message.startswith("error: the startup script's token failed on TPU VM rl-test-vm (exit 1")
    assert "add a version with `tpu-rl secret set` (secret hf-token)" in message
    assert f"`gcloud storage cat {PATHS.vm_failure}`" in message


def test_vm_run_ends_on_an_install_failure(settings_env, gcs, vm, guest, clock):
    guest.install_marker.unlink()
    assert boot_and_show(guest, gcs, vm, FAIL_TOOL="apt-get", TPU_RL_GCS_RETRY_SECONDS="0") == 100
    message = run_finds_it_ended(clock)
    assert message.startswith("error: the startup script's install failed on TPU VM rl-test-vm (exit 100")
    assert "E: stand-in failure of apt-get update -q" in message
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0 and "install failed" in " ".join(status.output.split())


def test_vm_run_ends_on_an_install_command_that_hung_past_its_bound(settings_env, gcs, vm, guest, clock):
    # The extra deps' download never ends; the script's `timeout` stops it at its bound (1 s here).
    guest.install_marker.unlink()
    assert boot_and_show(guest, gcs, vm, HANG_TOOL="install_tpu_post_train_extra_deps",
                         TPU_RL_INSTALL_TIMEOUT_SECONDS="1", TPU_RL_GCS_RETRY_SECONDS="0") == 124
    message = run_finds_it_ended(clock)
    assert message.startswith("error: the startup script's install failed on TPU VM rl-test-vm (exit 124")
    assert ("install: install_tpu_post_train_extra_deps did not finish within its bound of 1 s (timeout, exit 124): "
            "reboot the VM to retry") in message
    assert "sudo reboot`) to resume" in message


def install_record(command: str, seconds: int) -> str:
    """The attempt record while the install runs a bounded command (jobs/vm_script/bounded.sh bounded)."""
    return f"attempt={ATTEMPT} phase=install at=2026-11-30T00:00:00Z command={command} bound={seconds}\n"


def test_vm_run_and_status_show_the_install_command_they_wait_for_and_its_bound(settings_env, gcs, vm):
    put(gcs, PATHS.vm_attempt, install_record("uv-pip-install-maxtext", 2400))
    status = " ".join(runner.invoke(app, ["status", RECIPE]).output.split())
    assert ("startup script: install: uv-pip-install-maxtext, at most 0:40:00"
            in status)
    # (each console read runs the next act; the first poll reads the console before the records)
    vm.on_serial_read += [lambda: None, lambda: put(gcs, PATHS.vm_attempt, install_record(
        "install_tpu_post_train_extra_deps", 3600)), *every_step(vm, gcs)]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "startup script: install: uv-pip-install-maxtext, at most 0:40:00" in text
    # The longest command's line, whole on one line within 80 columns.
    line = "startup script: install: install_tpu_post_train_extra_deps, at most 1:00:00"
    assert line in result.output.splitlines() and len(line) <= 80


def test_vm_run_ends_when_the_script_ended_without_a_record(settings_env, gcs, vm):
    vm.on_serial_read += [begin(vm, gcs, "convert"),
                          console(vm, 'Script "startup-script" failed with error: signal: killed\n'
                                  "Finished running startup scripts.\n")]
    assert ("the startup script of TPU VM rl-test-vm ended (signal: killed, says the guest agent) before "
            "convert finished and left no failure record") in run_fails()


# --- 2. an earlier boot's failure does not end the current attempt ----------------------------------------

def test_a_reboot_after_a_failed_step_follows_the_new_attempt(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl") == 1
    first_boot = vm.serial[VM]
    guest.boot()  # the VM rebooted: the new attempt resumes at train and finishes
    output, _ = guest.boots[-1]
    until_train = output[:output.index(" train: done")]
    rest = output[len(until_train):]

    def second_boot_starts():
        # The new attempt's record and its train start, while the old failure record is still there.
        put(gcs, PATHS.vm_attempt, guest.object(PATHS.vm_attempt).read_text().replace("phase=done", "phase=train")
            .replace(" ended=stopped", ""))  # the finished second boot stopped the VM
        vm.serial[VM] = first_boot + guest.console(boots=[(until_train, 0)], running=True)

    def second_boot_ends():
        vm.serial[VM] = first_boot + guest.console(boots=[(until_train + rest, 0)])
        guest.sync_to(gcs)
        for step in ("train", "export"):
            put_step_output(gcs, get_recipe(RECIPE), step)

    vm.serial[VM] = first_boot
    vm.on_serial_read += [second_boot_starts, lambda: None, second_boot_ends]
    put_step_output(gcs, get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "train: running" in result.output and "train: output verified" in result.output


@pytest.mark.parametrize("old_console", [False, True], ids=["empty-console", "old-boots-console"])
def test_a_new_boot_before_its_first_line_is_not_ended_by_the_old_failure(settings_env, gcs, vm, old_console):
    """A replaced VM (or a reboot) whose script has not written a line yet: the bucket still holds the old
    attempt's records, older than the instance's last start, so `run` waits for the new boot."""
    put(gcs, PATHS.vm_attempt, f"attempt={ATTEMPT} phase=train at={ago(7200)}\n")
    put(gcs, PATHS.vm_failure, f"attempt={ATTEMPT} phase=train exit=1 at={ago(7200)}\n"
                               + line("train: failed (exit 1)"))
    put(gcs, PATHS.progress_marker("convert"), "2026-11-30T00:00:00Z")
    put_step_output(gcs, get_recipe(RECIPE), "convert")
    # Compute Engine's timestamps are RFC 3339 with an offset (-08:00 here): the VM started a minute ago,
    # after the records.
    local = timezone(timedelta(hours=-8))
    vm.boots[VM] = {"creationTimestamp": (datetime.now(local) - timedelta(days=1)).isoformat(timespec="milliseconds"),
                    "lastStartTimestamp": (datetime.now(local) - timedelta(seconds=60)).isoformat(timespec="milliseconds")}
    if not old_console:
        vm.serial[VM] = ""
    new = "20261130T160005Z-1"

    def begin_new(step):
        def act():
            put(gcs, PATHS.vm_attempt, f"attempt={new} phase={step} at={ago(0)}\n")
            console(vm, line(f"attempt {new}: boot") if step == "train" else "")()
            console(vm, progress(step, STARTING))()
        return act

    vm.on_serial_read += [lambda: None, begin_new("train"), finish(vm, gcs, "train"),
                          begin_new("export"), finish(vm, gcs, "export")]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "train: waiting" in result.output and "train: output verified" in result.output


# --- 3. a changed recipe: the VM's script is compared with the rendered one ---------------------------------

def test_vm_run_refuses_a_vm_that_runs_another_runs_script(settings_env, gcs, vm):
    other = spec_of(get_recipe(RECIPE)).with_run("older")
    vm.metadata[VM]["startup-script"] = render_startup_script(spec_of(other), peer_settings())
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert error_line(result) == (
        f"error: TPU VM rl-test-vm has the startup script of run {ArtifactPaths(spec_of(other), peer_settings()).run_name}, "
        f"not the one recipe '{RECIPE}' renders now for run {RUN}: `npx cdktf deploy {RECIPE}` replaces the VM "
        "with it (the plan shows the replacement; it kills a running step, so deploy between steps; the bucket "
        "keeps the finished steps and the new VM resumes after them)")
    dry = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert dry.exit_code == ExitCode.BAD_INPUT


def test_the_old_runs_lines_do_not_show_the_new_run_as_training(settings_env, gcs, vm):
    # A script deployed before the lines named their run, then one of another run.
    vm.serial[VM] = ("startup-script: tpu-rl: 2026-11-30T00:00:00Z train: starting\n"
                     "startup-script: tpu-rl: 2026-11-30T00:00:00Z llama31-v6e8-0ld0ld0 train: starting\n")
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert [row.replace(",", " ").split()[:2] for row in status.output.splitlines()
            if row.split()[:1] in (["convert"], ["train"], ["export"])] == [
        ["convert", "waiting"], ["train", "waiting"], ["export", "waiting"]]


# --- 4. maintenance stops a TPU VM: wait for it, or say to delete and redeploy ------------------------------

def test_vm_run_waits_through_a_maintenance_stop_that_recovers(settings_env, gcs, vm):
    def status(value):
        return lambda: vm.instances.__setitem__(VM, value)

    def maintenance():
        # The console is not read while the VM is stopped; each instance GET is one more poll of the wait.
        vm.instances[VM] = "TERMINATED"
        vm.on_instance_get.extend([lambda: None] * 3 + [status("RUNNING")])

    vm.on_serial_read += [begin(vm, gcs, "convert"), maintenance]
    vm.on_serial_read += [lambda: vm.serial.__setitem__(VM, line("attempt 20261130T010000Z-2: boot")),
                          finish(vm, gcs, "convert"), begin(vm, gcs, "train"),
                          finish(vm, gcs, "train"), begin(vm, gcs, "export"), finish(vm, gcs, "export")]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert ("TPU VM rl-test-vm is TERMINATED (host maintenance stops TPU VMs, and Compute Engine restarts them): "
            "waiting up to 1:00:00 from its stop") in text
    assert "TPU VM rl-test-vm is RUNNING again: its startup script resumes at the first step not done" in text


def test_vm_run_says_to_delete_and_redeploy_a_vm_that_stays_stopped(settings_env, gcs, vm, monkeypatch):
    monkeypatch.setenv("TPU_RL_MAINTENANCE_GRACE_SECONDS", "0")
    vm.instances[VM] = "TERMINATED"
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    message = error_line(result)
    assert message.startswith("error: TPU VM rl-test-vm is still TERMINATED 0:00:00 after it stopped, before convert "
                              "finished (the grace: 0:00:00); a TPU VM cannot be started again by hand, but "
                              "maintenance may keep it away up to a few hours (`tpu-rl run` again follows it when "
                              "it is back); else `gcloud compute instances delete rl-test-vm ")
    assert f"then `npx cdktf deploy {RECIPE}`: the new VM's startup script resumes at the first step" in message
    assert "start it again" not in result.output


def test_vm_run_says_a_deleted_vm_is_created_again_by_deploy(settings_env, gcs, vm):
    vm.on_serial_read += [begin(vm, gcs, "convert"), lambda: vm.instances.pop(VM)]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    assert "TPU VM rl-test-vm no longer exists before convert finished" in error_line(result)


def test_vm_run_without_the_vm_says_to_deploy_it(settings_env, gcs, google):
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "TPU VM 'rl-test-vm' not found in zone us-east5-b" in result.output


def test_vm_run_with_every_output_verified_does_nothing(settings_env, gcs, vm):
    for step in ("convert", "train", "export"):
        put_step_output(gcs, get_recipe(RECIPE), step)
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0 and result.output.count("skipping") == 3
    assert not any("serialPort" in path for _, path, _ in vm.requests)


# --- 5. a console past 1 MiB: state and step logs come from the bucket ------------------------------------

def test_a_console_past_one_mib_keeps_status_logs_and_a_reattached_run(settings_env, gcs, vm, guest):
    train = "maxtext.trainers.post_train.rl.train_rl"
    code = boot_and_show(guest, gcs, vm, LONG_MODULE=train, LONG_BYTES=str(SERIAL_BUFFER + 200_000))
    assert code == 0
    assert len(vm.serial[VM]) > SERIAL_BUFFER
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert [row.split()[:2] for row in status.output.splitlines()
            if row.split()[:1] in (["convert"], ["train"], ["export"])] == [
        ["convert", "done"], ["train", "done"], ["export", "done"]]
    logs = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "0"])
    assert logs.exit_code == 0
    assert logs.output.splitlines()[0].endswith(f"{RUN} train: starting")
    assert logs.output.splitlines()[-1].endswith(f"{RUN} train: done")


def test_a_running_step_whose_start_scrolled_out_is_still_running(settings_env, gcs, vm):
    begin(vm, gcs, "train")()
    finish(vm, gcs, "convert")()
    vm.serial[VM] += "startup-script: q\n" * (SERIAL_BUFFER // 18 + 10)
    assert progress("train", STARTING) not in vm.serial[VM][-SERIAL_BUFFER:]
    status = runner.invoke(app, ["status", RECIPE])
    assert "running" in status.output, status.output
    logs = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "1"])
    assert logs.exit_code == 0 and logs.output.splitlines() == ["startup-script: q"]


def test_vm_status_and_logs(settings_env, gcs, vm):
    finish(vm, gcs, "convert")()
    begin(vm, gcs, "train")()
    vm.serial[VM] += "startup-script: step 1\n"
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert "convert" in status.output and "done" in status.output and "running" in status.output
    logs = runner.invoke(app, ["logs", RECIPE, "convert"])
    assert logs.exit_code == 0, logs.output
    assert logs.output.splitlines() == [progress("convert", STARTING).strip(), "convert log",
                                        progress("convert", DONE).strip()]
    tail = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "1"])
    assert tail.output.splitlines() == ["startup-script: step 1"]
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
    assert [line.replace(",", " ").split()[:2] for line in lines if line.split()[:1] in (["convert"], ["train"], ["export"])] == [
        ["convert", "done"], ["train", "not"], ["export", "not"]]
    assert "output verified" in status.output
    assert [line for line in lines if line.startswith(("train ", "export "))] == [
        "train    not done, no output yet", "export   not done, no output yet"]  # one line each
    note = " ".join(" ".join(lines).split())
    assert "TPU VM 'rl-test-vm' does not exist in zone us-east5-b" in note
    assert f"`npx cdktf deploy {RECIPE}` creates it" in note
