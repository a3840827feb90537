"""`tpu-rl run/cancel/status` of the VM recipe after an attempt ended (a guest reboot keeps the instance RUNNING
and its timestamps), with another run's script on the VM, through a console read refused mid-poll, a step that

stalls, and a maintenance stop judged from its own timestamp. Real CLI, fake Compute API, GCS emulator, the
real startup script under bash (tests/peers/vm_guest.py)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner



from cli_helpers import error_line
from tpu_rl.jobs.vm import CANCELLED
from peers.fixtures import SETTINGS, deploy_vm
from peers.http import Fault
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from vm_helpers import PATHS, RECIPE, VM, ago, begin, boot_and_show, finish, put, the_vm_goes_away

runner = CliRunner()
TRAIN = "maxtext.trainers.post_train.rl.train_rl"


def a_day_ago() -> dict:
    """The instance's timestamps of a VM started a day ago: a guest reboot since does not change them."""
    day = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat(timespec="milliseconds")
    return {"creationTimestamp": day, "lastStartTimestamp": day}


def rebooted(guest, gcs, vm, agent="guest-agent"):
    """The user's `sudo reboot`: the real script boots again, resumes and finishes."""
    def act():
        boot_and_show(guest, gcs, vm)
        vm.serial[VM] = guest.console(agent)
    return act


def test_run_after_fix_and_reboot_follows_the_new_attempt_not_the_old_failure(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE=TRAIN) == 1
    vm.boots[VM] = a_day_ago()
    # `tpu-rl run` right after `sudo reboot`: two polls still show only the failed attempt.
    vm.on_serial_read += [lambda: None, lambda: None, rebooted(guest, gcs, vm)]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert re.search(r"the startup script's last attempt \S+ on TPU VM rl-test-vm has ended; waiting up to 0:15:00 "
                     r"for a new one \(a reboot starts it: `gcloud compute ssh rl-test-vm .* -- sudo reboot`\)", text)
    assert re.search(r"startup script: attempt \S+ began", text)
    assert "train: output verified" in text and "error" not in text


@pytest.mark.parametrize("agent", ["guest-agent", "unforwarded"])
def test_run_after_cancel_and_reboot_follows_the_new_attempt(settings_env, gcs, vm, guest, agent):
    marker = guest.object(PATHS.cancel_marker)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("2026-11-30T00:00:00Z\n")
    assert guest.boot()[0] == 0  # the cancelled boot: it stops before convert, exit 0
    ended = guest.object(PATHS.vm_attempt).read_text()
    assert f" ended={CANCELLED}" in ended  # how the attempt ended is in its record
    marker.unlink()  # `gcloud storage rm <marker>`, as the hint says
    guest.sync_to(gcs)
    put(gcs, PATHS.vm_heartbeat, re.sub(r"at=\S+", f"at={ago(7200)}", guest.object(PATHS.vm_heartbeat).read_text()))
    put(gcs, PATHS.vm_attempt, re.sub(r"at=\S+", f"at={ago(7200)}", ended))
    vm.boots[VM] = a_day_ago()
    vm.serial[VM] = guest.console(agent=agent)
    vm.on_serial_read += [lambda: None, lambda: None, rebooted(guest, gcs, vm, agent)]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "export: output verified" in result.output


def test_run_with_no_new_attempt_ends_after_its_stated_wait_with_the_old_failure(settings_env, gcs, vm, guest, clock):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE=TRAIN) == 1
    clock.step = 100.0
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert re.match(r"error: no new attempt began in 0:15:00 after attempt \S+ ended: step train failed on TPU VM "
                    r"rl-test-vm \(exit 1, ", message), message
    assert (f"then `tpu-rl run {RECIPE}` follows the new attempt; the VM stays up 60 min after the failure for a "
            "look (`sudo shutdown -c` on it within 55 min keeps it up), then powers itself off and bills only its "
            f"boot disk, until `npx cdktf destroy {RECIPE}`") in message


def test_cancel_and_status_refuse_a_vm_running_another_runs_script(settings_env, gcs, google, clock):
    deploy_vm(google, SETTINGS, run="older")  # the recipe changed since the stack was deployed
    google.serial[VM] = ""
    for command in (["cancel", RECIPE, "--yes"], ["status", RECIPE]):
        result = runner.invoke(app, command)
        assert result.exit_code == ExitCode.BAD_INPUT, result.output
        assert error_line(result).startswith("error: TPU VM rl-test-vm has the startup script of run older, not ")
        assert f"`npx cdktf deploy {RECIPE}` replaces the VM" in error_line(result)
    assert not gcs.bucket(PATHS.cancel_marker.split("/")[2]).blob(
        PATHS.cancel_marker.split("/", 3)[3]).exists()  # no marker the VM's script would never read


def test_a_console_read_refused_right_after_a_running_read_is_a_state_change(settings_env, gcs, vm):
    script = []
    for step in ("convert", "train", "export"):
        script += [begin(vm, gcs, step), finish(vm, gcs, step)]
    vm.on_serial_read += script
    # The VM stopped between the instance read (RUNNING) and the console read: Compute Engine refuses it.
    vm.faults.append(Fault("GET", "/serialPort", 400, times=1, after=2))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output


def test_a_step_whose_log_stops_growing_ends_run_as_stalled(settings_env, gcs, vm, clock):
    begin(vm, gcs, "convert")()

    def beat(n):  # the watcher beats on through a hang: a new time each round, the same log size
        return lambda: put(gcs, PATHS.vm_heartbeat, f"attempt=20261130T000000Z-1 at=2026-11-30T00:0{n}:00Z log=4096\n")

    vm.on_serial_read += [beat(n % 10) for n in range(40)]
    clock.step = 120.0
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert message.startswith("error: step convert on TPU VM rl-test-vm looks stalled: its log has stayed at 4096 "
                              "bytes for 0:"), message
    assert f"look with `tpu-rl logs {RECIPE} convert`, and stop it with `tpu-rl cancel {RECIPE}`" in message


def run_with_a_beating_heartbeat(gcs, vm, clock, fields: str, beats: int, step: float):
    """`run` while the attempt record stays at `fields` and the heartbeat changes each poll (`step` seconds of
    this machine's clock apart), until the VM goes away."""
    put(gcs, PATHS.vm_attempt, f"attempt=20261130T000000Z-1 {fields}\n")

    def beat(n):
        return lambda: put(gcs, PATHS.vm_heartbeat, f"attempt=20261130T000000Z-1 at=2026-11-30T00:00:{n:02d}Z\n")

    vm.on_serial_read += [beat(n) for n in range(beats)] + [the_vm_goes_away(vm)]
    clock.step = step
    return runner.invoke(app, ["run", RECIPE])


def test_an_install_that_outlasts_the_bounds_of_its_commands_ends_run(settings_env, gcs, vm, clock):
    # The script hangs between two bounded commands (a record upload that never returns): its attempt record
    # stays at apt-get-update, its heartbeat beats on. `run` ends at the install's bound by its own clock.
    result = run_with_a_beating_heartbeat(gcs, vm, clock, "phase=install at=2026-11-30T00:00:00Z "
                                          "command=apt-get-update bound=900", beats=60, step=600.0)
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    text = " ".join(result.output.split())
    assert "startup script: install: apt-get-update, at most 0:15:00" in text
    assert "a phase between the steps past its bound (the install's 3:55:30)" in text  # the wait's bound, said when it begins
    message = error_line(result)
    assert re.fullmatch(r"error: the startup script's install on TPU VM rl-test-vm has run for (3:[45]\d|4:0\d):00 by this "
                        r"machine's clock \(it last began apt-get-update\), past its bound of 3:55:30 \(its "
                        r"commands' 3:25:30 and 0:30:00 for its record uploads\) without a failure record: look "
                        r"with `gcloud compute ssh .* -- sudo tail -n 50 /var/log/tpu-rl.log`, then reboot the VM "
                        r"to retry \(`.* -- sudo reboot`\)", message), message


@pytest.mark.parametrize(("phase", "bound"), [
    ("token", "0:12:30 (its read's 0:02:30 and 0:10:00 for its record uploads)"),
    ("checking-train", "0:15:00 (0:05:00 for its two bucket checks' retries and 0:10:00 for its record uploads)"),
    ("boot", "0:15:00 (0:05:00 for the uploads' retries and 0:10:00 for its record uploads)"),
])
def test_a_phase_between_the_steps_that_outlasts_its_bound_ends_run(settings_env, gcs, vm, clock, phase, bound):
    # The script hangs in a phase that is not a step (a bucket call no `timeout` covers): its heartbeat beats on.
    result = run_with_a_beating_heartbeat(gcs, vm, clock, f"phase={phase} at=2026-11-30T00:00:00Z", beats=20,
                                          step=300.0)
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert message.startswith(f"error: the startup script's {phase} on TPU VM rl-test-vm has run for "), message
    assert f"by this machine's clock, past its bound of {bound} without a failure record" in message, message


def test_a_maintenance_stop_counts_its_grace_from_the_stop(settings_env, gcs, vm, monkeypatch):
    monkeypatch.setenv("TPU_RL_MAINTENANCE_GRACE_SECONDS", "1800")
    vm.instances[VM] = "TERMINATED"
    now = datetime.now(timezone.utc)
    vm.boots[VM] = {"lastStartTimestamp": (now - timedelta(days=1)).isoformat(timespec="milliseconds"),
                    "lastStopTimestamp": (now - timedelta(hours=1)).isoformat(timespec="milliseconds")}
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith("error: TPU VM rl-test-vm is still TERMINATED 1:00:0")


def test_a_vm_that_stays_staging_is_bounded_like_a_stopped_one(settings_env, gcs, vm, monkeypatch):
    monkeypatch.setenv("TPU_RL_MAINTENANCE_GRACE_SECONDS", "0")
    vm.instances[VM] = "STAGING"
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith("error: TPU VM rl-test-vm is still STAGING ")


def test_a_stop_longer_than_the_stall_bound_that_recovers_is_not_a_stall(settings_env, gcs, vm, clock):
    begin(vm, gcs, "convert")()
    put(gcs, PATHS.vm_heartbeat, "attempt=20261130T000000Z-1 at=2026-11-30T00:00:00Z log=4096\n")

    def maintenance():  # 30 polls of 120 s (this machine's clock) while TERMINATED: twice the stall bound
        vm.instances[VM] = "TERMINATED"
        vm.on_instance_get.extend([lambda: None] * 30 + [lambda: vm.instances.__setitem__(VM, "RUNNING")])

    vm.on_serial_read += [maintenance, finish(vm, gcs, "convert"), begin(vm, gcs, "train"), finish(vm, gcs, "train"),
                          begin(vm, gcs, "export"), finish(vm, gcs, "export")]
    clock.step = 120.0
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "stalled" not in result.output and "export: output verified" in result.output


def train_step_line(step: int) -> str:
    """tunix's train step line (TRAIN_STEP, scripts/rundata/progress.py) as the console shows it."""
    return (f"startup-script: I1130 00:00:00.000000 1 peft_trainer.py:735] Train step {step} training loss: "
            "0.500000  - training perplexity: 1.648721\n")


def dark_train(vm, gcs, clock, logs: list[int], then: list) -> object:
    """Train showed step 3 on the console, then the console went dark (the guest agent stopped reading at a
    line over 64 KiB); the heartbeat goes on with the log sizes `logs`, one a poll, then `then` happens."""
    finish(vm, gcs, "convert")()
    begin(vm, gcs, "train")()
    vm.serial[VM] += train_step_line(3)

    def beat(n, size):  # the watcher beats on: a new time each round
        return lambda: put(gcs, PATHS.vm_heartbeat, f"attempt=20261130T000000Z-1 at=2026-11-30T00:{n:02}:00Z "
                           f"log={size}\n")

    vm.on_serial_read += [beat(n, size) for n, size in enumerate(logs)] + then
    clock.step = 120.0
    return runner.invoke(app, ["run", RECIPE])


def test_train_with_a_dark_console_and_a_growing_log_is_not_stalled(settings_env, gcs, vm, clock):
    result = dark_train(vm, gcs, clock, [4096 * n for n in range(1, 40)],
                        [finish(vm, gcs, "train"), begin(vm, gcs, "export"), finish(vm, gcs, "export")])
    assert result.exit_code == 0, result.output
    assert "stalled" not in result.output and "train: running, step 3/" in result.output


def test_train_with_neither_a_new_step_nor_a_growing_log_is_stalled(settings_env, gcs, vm, clock):
    result = dark_train(vm, gcs, clock, [4096] * 40, [])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert error_line(result).startswith("error: step train on TPU VM rl-test-vm looks stalled: its last training "
                                         "step is 3 and its log has stayed at 4096 bytes for 0:"), result.output


def test_cancel_and_status_follow_a_vm_running_the_same_runs_older_script(settings_env, gcs, google, clock):
    deploy_vm(google, SETTINGS)
    # The same run's script, rendered by an older tpu-rl: it polls this run's cancel marker all the same.
    google.metadata[VM]["startup-script"] += "# rendered by an older tpu-rl\n"
    google.serial[VM] = ""
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    text = " ".join(status.output.split())
    rows = [row.replace(",", " ").split()[:2] for row in status.output.splitlines()]
    assert ["convert", "waiting"] in rows
    assert (f"the VM's startup script (run {PATHS.run_name}) differs from the one recipe '{RECIPE}' renders now: "
            f"`npx cdktf deploy {RECIPE}` applies it") in text
    cancel = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert cancel.exit_code == 0, cancel.output
    assert f"`npx cdktf deploy {RECIPE}` applies it" in " ".join(cancel.output.split())
    bucket, name = PATHS.cancel_marker.split("/", 3)[2:]
    assert gcs.bucket(bucket).blob(name).exists()  # the marker the VM's script polls
