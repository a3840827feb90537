"""`tpu-rl run/status/logs` of the VM recipe where the serial console says little or nothing: the guest
agent's lines never reach it (the newer agent logs to syslog only), the VM is stopped (its console is not
served), or a step reruns after a failed attempt. The bucket's records decide; the heartbeat bounds the
wait. Real CLI, fake Compute and Secret Manager APIs, GCS emulator, the real startup script under bash."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from cli_helpers import error_line
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from vm_helpers import ATTEMPT, PATHS, RECIPE, RUN, VM, begin, boot_and_show, finish, put, run_fails, run_finds_it_ended, the_vm_goes_away

runner = CliRunner()
TRAIN = "maxtext.trainers.post_train.rl.train_rl"


def ago(seconds: float) -> str:
    """A record's `at` as the script writes it (`date -u +%FT%TZ`), that many seconds before now."""
    return f"{datetime.now(timezone.utc) - timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%SZ}"


def rfc3339_ago(seconds: float) -> str:
    """An instance timestamp as Compute Engine gives it (RFC 3339 with an offset), that long ago."""
    local = timezone(timedelta(hours=-8))
    return (datetime.now(local) - timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def serial_reads(google) -> int:
    return sum("serialPort" in path for _, path, _ in google.requests)


# --- 1. the console carries none of the guest agent's lines ---------------------------------------------

def test_a_failed_step_ends_run_from_the_bucket_alone(settings_env, gcs, vm, guest, clock):
    boot_and_show(guest, gcs, vm, FAIL_MODULE=TRAIN)
    vm.serial[VM] = guest.console(agent="unforwarded")
    assert "startup-script" not in vm.serial[VM] and "Finished running" not in vm.serial[VM]
    message = run_finds_it_ended(clock)
    assert message.startswith("error: step train failed on TPU VM rl-test-vm (exit 1, attempt ")
    assert f"{TRAIN}: stand-in error, exiting 1" in message


def test_a_script_killed_without_a_record_ends_run_when_its_heartbeat_stops(settings_env, gcs, vm, guest, clock):
    # The script is SIGKILLed in train: no trap, no failure record; its heartbeat (written when it started)
    # stays behind, unchanged. The console shows nothing of the script. Silence is judged by this machine's
    # clock, whatever the VM's clock wrote into the record.
    assert boot_and_show(guest, gcs, vm, KILL_MODULE=TRAIN, TPU_RL_CANCEL_POLL_SECONDS="1") == -9
    assert not guest.object(PATHS.vm_failure).read_text().startswith("attempt=")
    heartbeat = guest.object(PATHS.vm_heartbeat).read_text()
    assert heartbeat.startswith("attempt=") and " phase=" not in heartbeat
    vm.serial[VM] = guest.console(agent="unforwarded")
    future = heartbeat.split(" at=")[0] + " at=2099-01-01T00:00:00Z\n"  # a VM clock far ahead does not matter
    vm.on_serial_read += [lambda: None, lambda: put(gcs, PATHS.vm_heartbeat, future)]
    vm.on_serial_read += [lambda: None] * 30 + [the_vm_goes_away(vm)]
    clock.step = 60.0
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    text = " ".join(result.output.split())
    assert "train: running" in text
    assert "and 0:10:00 without a change (by this machine's clock) ends the wait" in text  # the wait's bound
    message = error_line(result)
    assert message.startswith(f"error: the startup script of TPU VM rl-test-vm has left no failure record and its "
                              f"heartbeat {PATHS.vm_heartbeat} (last: 2099-01-01T00:00:00Z by the VM's clock) has "
                              "not changed for 0:1")
    assert "while the VM is RUNNING, before train finished" in message
    assert ("check the VM before rebooting it: `gcloud compute ssh rl-test-vm --zone=us-east5-b --project="
            "tpu-rl-test --tunnel-through-iap -- sudo journalctl -t google_metadata_script_runner -n 50` shows "
            "whether the script still runs") in message


def test_a_vm_whose_script_never_wrote_a_heartbeat_ends_run(settings_env, gcs, vm, clock):
    vm.serial[VM] = ""  # nothing of the script reaches the console
    vm.on_serial_read += [lambda: None] * 30 + [the_vm_goes_away(vm)]
    clock.step = 60.0
    message = run_fails()
    assert message.startswith(f"error: the startup script of TPU VM rl-test-vm has left no failure record and no "
                              f"heartbeat {PATHS.vm_heartbeat} of this boot has appeared for 0:1")


# --- 2. logs of a rerunning step: the current attempt's, not the earlier attempt's log -------------------

def test_logs_of_a_rerunning_step_show_the_current_attempt(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE=TRAIN) == 1  # the bucket holds train's failed log
    first_boot = vm.serial[VM]
    assert "train: failed (exit 1)" in guest.object(PATHS.step_log("train")).read_text()
    guest.boot()  # the reboot reruns train; here it is still running: its log is not uploaded yet
    output, _ = guest.boots[-1]
    running = output[:output.index(f"{RUN} train: starting")] + f"{RUN} train: starting\nstep 1 of the rerun\n"
    new_attempt = guest.object(PATHS.vm_attempt).read_text().split()[0].removeprefix("attempt=")
    put(gcs, PATHS.vm_attempt, f"attempt={new_attempt} phase=train at={ago(0)}\n")
    vm.serial[VM] = first_boot + guest.console(boots=[(running, 0)], running=True)
    logs = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "0"])
    assert logs.exit_code == 0, logs.output
    lines = logs.output.splitlines()
    note = [line.removeprefix("tpu-rl: ") for line in lines if line.startswith("tpu-rl: ")]
    assert all(len(line) <= 80 for line in lines[:len(note)])
    assert " ".join(note) == (f"step train runs again in attempt {new_attempt}, which has no log in the bucket yet "
                              "(the one there is an earlier attempt's); the live console of TPU VM rl-test-vm "
                              "follows")
    assert lines[len(note)].endswith(f"{RUN} train: starting") and lines[-1].endswith("step 1 of the rerun")
    assert "train: failed" not in logs.output


# --- 3. a stopped VM's console is not read ----------------------------------------------------------------

def test_status_and_logs_of_a_stopped_vm_say_its_state_instead_of_reading_its_console(settings_env, gcs, vm):
    finish(vm, gcs, "convert")()
    begin(vm, gcs, "train")()
    vm.instances[VM] = "TERMINATED"
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    text = " ".join(status.output.split())
    assert "TPU VM rl-test-vm (TERMINATED" in text
    assert ("TPU VM rl-test-vm is TERMINATED: Compute Engine serves its serial console only while it runs, so the "
            "table shows the bucket's records") in text
    assert [row.replace(",", " ").split()[:2] for row in status.output.splitlines()
            if row.split()[:1] in (["convert"], ["train"])] == [["convert", "done"], ["train", "running"]]
    logs = runner.invoke(app, ["logs", RECIPE, "train"])
    assert logs.exit_code == ExitCode.BAD_INPUT, logs.output
    assert (f"step train of run {RUN} runs in attempt {ATTEMPT}, which has no log in the bucket yet (it is "
            "uploaded when the step ends; TPU VM rl-test-vm is TERMINATED, and Compute Engine serves its serial "
            "console only while it runs)") in " ".join(logs.output.split())
    done = runner.invoke(app, ["logs", RECIPE, "convert"])  # a finished step's log is in the bucket
    assert done.exit_code == 0 and done.output.splitlines()[1] == "convert log"
    assert serial_reads(vm) == 0


# --- 4. a check of the token's versions that is denied ----------------------------------------------------

@pytest.mark.parametrize("permission", ["secretmanager.versions.list", "secretmanager.versions.get"])
def test_vm_run_with_the_versions_check_denied_names_the_secret_and_the_role(settings_env, gcs, vm, permission):
    vm.denied.add(permission)
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result) == (
        "error: permission denied reading the versions of secret 'hf-token' (project tpu-rl-test): checking its "
        "latest version needs roles/secretmanager.viewer on it (secretAccessor reads only the payload)")
    assert "Traceback" not in result.output and serial_reads(vm) == 0


# --- 5. status shows the script's phase between steps, as run does ----------------------------------------

def test_vm_status_shows_the_checking_phase_between_steps(settings_env, gcs, vm):
    finish(vm, gcs, "convert")()
    put(gcs, PATHS.vm_attempt, f"attempt={ATTEMPT} phase=checking-train at=2026-11-30T00:00:00Z\n")
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert "TPU VM rl-test-vm (RUNNING; startup script: checking-train)" in " ".join(status.output.split())

