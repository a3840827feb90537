"""`tpu-rl run/status/runs` of the VM recipe when its TPU VM stops itself after its run (jobs/vm_outputs.py):
the real startup script runs under bash (tests/peers/vm_guest.py), its power-off turns the instance
TERMINATED in the fake Compute API (with lastStopTimestamp, as the API's Instance has it), and the CLI says
what happened and how the next run starts; `run --detach` returns at once."""

from __future__ import annotations

import json
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path

from typer.testing import CliRunner

from cli_helpers import error_line, fits_80_columns_with_whole_paths
from tpu_rl.jobs.vm_outputs import FAILURE_STAY_MINUTES, KEEP_UP_WITHIN_MINUTES, STOP_COMMAND
from peers.fixtures import SETTINGS, deploy_vm, power_off_vm, put_step_output
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from vm_helpers import PATHS, RECIPE, RUN, VM, begin, boot_and_show, console, finish, put

runner = CliRunner()
# What the reservation of the VM's 8 v6e chips bills per chip-hour, as the price table states it.
RESERVED_CHIP_HOUR = tomllib.loads((Path(__file__).parents[1] / "recipes" / "costs" / "prices.toml").read_text())[
    "tpu"]["v6e"]["reservation"]["chip_hour"]


def powered_off(google, guest) -> None:
    """The guest's power-off as Compute Engine shows it: the instance TERMINATED, its lastStopTimestamp set."""
    assert STOP_COMMAND in guest.power_offs
    power_off_vm(google, VM)


def text_of(result) -> str:
    return " ".join(result.output.split())


def after_self_stop(google, gcs, guest, *argv: str) -> str:
    """The whole run on the VM, its power-off, then `tpu-rl ARGV`: its output on one line (exit 0)."""
    assert boot_and_show(guest, gcs, google) == 0
    powered_off(google, guest)
    result = runner.invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return text_of(result)


def test_status_after_a_self_stop_says_so_and_how_the_next_run_starts(settings_env, gcs, vm, guest):
    text = after_self_stop(vm, gcs, guest, "status", RECIPE)
    assert "TPU VM rl-test-vm (TERMINATED; startup script: done)" in text
    assert ("TPU VM rl-test-vm stopped itself at 20" in text and "after its startup script verified every output "
            f"of run {RUN} (VM_AFTER_RUN=stop): it bills only its boot disk now, until `npx cdktf destroy {RECIPE}`; "
            f"the reservation's 8 chips bill ${8 * RESERVED_CHIP_HOUR:.2f}/h with or without the stack, until the "
            "reservation ends: it may be shared or tied to a commitment, so only its owner can end it (tpu-rl "
            "never deletes it); "
            "a TPU VM cannot be started again: a new run: change rl.overrides in recipes.toml, then `npx cdktf "
            f"deploy {RECIPE}`") in text
    assert "Compute Engine serves its serial console only while it runs" not in text


def test_run_after_a_self_stop_reports_done_and_what_still_bills(settings_env, gcs, vm, guest):
    text = after_self_stop(vm, gcs, guest, "run", RECIPE)
    assert text.count("output verified, skipping") == 3
    assert "stopped itself at" in text and "it bills only its boot disk now" in text
    assert "the stack costs" not in text  # the stack's hourly cost no longer runs
    # what still bills: the standing account `down`, `recipes` and the README give (the reservation, and the
    # NAT's IP, $0.005/h in prices.toml [nat], which is all the destroy stops)
    assert (f"with no run, stack {RECIPE} bills ${8 * RESERVED_CHIP_HOUR + 0.005:.2f}/h (estimates from list "
            f"prices); `npx cdktf destroy {RECIPE}` stops $0.01/h of it") in text
    assert not any("serialPort" in path for _, path, _ in vm.requests)


def test_an_attached_run_follows_the_script_to_its_self_stop_without_waiting_for_maintenance(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm) == 0  # the whole run, on the VM
    gcs.bucket(PATHS.bucket).blob(PATHS.progress_marker("export").split("/", 3)[3]).delete()
    stop = gcs.bucket(PATHS.bucket).blob(PATHS.vm_stop.split("/", 3)[3])
    stop_text = stop.download_as_text()
    stop.delete()

    def export_ends_and_the_vm_stops():  # between two polls of `run`
        put(gcs, PATHS.progress_marker("export"), "2026-11-30T00:00:00Z")
        put(gcs, PATHS.vm_stop, stop_text)
        powered_off(vm, guest)

    vm.on_serial_read += [export_ends_and_the_vm_stops]
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    text = text_of(result)
    assert "export: output verified" in text
    assert "host maintenance" not in text and "waiting up to" not in text


def test_run_of_a_step_whose_vm_stopped_itself_says_to_deploy_again(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm) == 0
    powered_off(vm, guest)
    gcs.bucket(PATHS.bucket).blob(PATHS.progress_marker("export").split("/", 3)[3]).delete()
    for blob in gcs.list_blobs(PATHS.bucket, prefix=PATHS.hf_export.split("/", 3)[3]):
        blob.delete()  # someone removed the export after the run
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert message.startswith(f"error: export of run {RUN} is not done, but TPU VM rl-test-vm stopped itself at ")
    assert ("a TPU VM cannot be started again: a new run: change rl.overrides in recipes.toml" in message
            and "gcloud compute instances delete rl-test-vm --zone=us-east5-b --project=tpu-rl-test" in message)


def test_run_detach_returns_at_once_with_the_commands_that_follow_the_run(settings_env, gcs, vm):
    result = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert result.exit_code == 0, result.output
    assert not any("serialPort" in path for _, path, _ in vm.requests)  # nothing followed
    lines = result.output.splitlines()
    for command in (f"`tpu-rl status {RECIPE}`", f"`tpu-rl logs {RECIPE} convert`", f"`tpu-rl runs {RECIPE}`",
                    f"`tpu-rl run {RECIPE}`"):
        assert any(line.strip().startswith(command) for line in lines), command
    record = json.loads(gcs.bucket(PATHS.bucket).blob(PATHS.run_record.split("/", 3)[3]).download_as_text())
    assert record["status"] == "running"
    assert "after the run: TPU VM rl-test-vm stops itself once its startup script verified every output" in \
        text_of(result)


def test_runs_shows_a_detached_run_that_finished_on_the_vm_as_succeeded(settings_env, gcs, vm, guest):
    assert runner.invoke(app, ["run", RECIPE, "--detach"]).exit_code == 0
    before = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert [run["status"] for run in json.loads(before.output)["runs"]] == ["running"]
    assert boot_and_show(guest, gcs, vm) == 0  # the VM runs it, nobody attached
    after = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["runs"]
    assert [(run["run"], run["status"]) for run in after] == [(RUN, "succeeded")]
    assert after[0]["ended"] and after[0]["duration_seconds"] is not None


def test_runs_shows_an_interrupted_run_that_finished_on_the_vm_as_succeeded_as_status_does(settings_env, gcs, vm,
                                                                                            guest, monkeypatch):
    """issue 37: a `run` stopped with Ctrl-C records `interrupted` while the VM's script goes on; once the
    script verified every output, `status` shows every step done and `runs` must not say `interrupted`."""
    from cli_helpers import interrupt, session_hook

    with monkeypatch.context() as patch:
        session_hook(patch, sleep=interrupt)
        assert runner.invoke(app, ["run", RECIPE]).exit_code == ExitCode.INTERRUPTED
    before = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["runs"]
    assert [run["status"] for run in before] == ["interrupted"]  # nothing of the VM's says it ended yet
    assert boot_and_show(guest, gcs, vm) == 0  # the VM runs it, nobody attached
    after = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["runs"]
    assert [(run["run"], run["status"]) for run in after] == [(RUN, "succeeded")]


def test_runs_shows_a_run_whose_step_failed_on_the_vm_as_failed(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl") == 1
    runs = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["runs"]
    assert [(run["run"], run["status"]) for run in runs] == [(RUN, "failed")]


def test_the_dry_run_says_the_vm_stops_itself_or_stays_up(settings_env, gcs, vm, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")  # no reservation bills on after the stop
    dry = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert ("after the run: TPU VM rl-test-vm stops itself once its startup script verified every output "
            "(VM_AFTER_RUN=stop; VM_AFTER_RUN=keep keeps it up): no idle cost") in text_of(dry)
    assert "reservation" not in text_of(dry)
    monkeypatch.setenv("VM_AFTER_RUN", "keep")
    deploy_vm(vm, {**SETTINGS, "VM_AFTER_RUN": "keep"})  # the stack deployed with it renders its script
    kept = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert kept.exit_code == 0, kept.output
    assert ("after the run: TPU VM rl-test-vm stays up (VM_AFTER_RUN=keep) and bills $" in text_of(kept)
            and f"until `npx cdktf destroy {RECIPE}`" in text_of(kept))


def test_a_wrong_vm_after_run_is_refused_in_one_line(settings_env, monkeypatch):
    monkeypatch.setenv("VM_AFTER_RUN", "halt")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert error_line(result) == ("error: VM_AFTER_RUN 'halt' is neither stop (the TPU VM stops itself once every "
                                  "output of its run is verified; the default) nor keep (it stays up until you "
                                  "destroy it)")


def test_begin_finish_console_helpers_still_drive_a_run(settings_env, gcs, vm):
    # The hand-written records of the other tests carry no stop record: run ends on its own verification.
    vm.on_serial_read += [begin(vm, gcs, "convert"), finish(vm, gcs, "convert"), console(vm, "")]
    put_step_output(gcs, get_recipe(RECIPE), "train")
    put_step_output(gcs, get_recipe(RECIPE), "export")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "stops itself once its startup script verified every output" in text_of(result)


def test_a_failed_run_says_the_vm_stays_up_for_a_bounded_look(settings_env, gcs, vm, guest, clock):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl") == 1
    assert guest.power_offs == [f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {RUN} failed; powering off"]
    status = runner.invoke(app, ["status", RECIPE])
    assert (f"the VM stays up {FAILURE_STAY_MINUTES} min after the failure for a look (`sudo shutdown -c` on it "
            f"within {KEEP_UP_WITHIN_MINUTES} min keeps it up), then powers itself off") in text_of(status)


def test_run_after_the_vm_powered_itself_off_after_a_failure_says_to_deploy_again(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm, FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl") == 1
    vm.instances[VM] = "TERMINATED"  # the scheduled power-off, an hour after the failure
    vm.boots[VM] = {"creationTimestamp": "2026-11-29T00:00:00.000-08:00",
                    "lastStopTimestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert message.startswith("error: TPU VM rl-test-vm powered itself off at ")
    assert f"{FAILURE_STAY_MINUTES} min after step train failed (exit 1, attempt " in message
    assert message.endswith(f"`npx cdktf deploy {RECIPE}`: the new VM resumes at train")
    assert "host maintenance" not in result.output


def test_run_of_a_vm_whose_script_ran_again_after_its_stop_says_it_stays_up_bounded(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm) == 0  # the run, then its stop (which did not power it off)
    guest.boot()  # the script run again by hand on the same instance: it runs nothing and stays up, bounded
    assert guest.power_offs[-1].startswith(f"shutdown -h +{FAILURE_STAY_MINUTES} ")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert ("TPU VM rl-test-vm runs again after it stopped itself at" in text_of(result)
            and f"its startup script ran nothing and keeps it up {FAILURE_STAY_MINUTES} min for a look, then powers "
            f"it off (`sudo shutdown -c` on it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, billing $"
            in text_of(result))


def new_vm(google, instance_id: str, status: str = "RUNNING") -> None:
    """The VM deleted and deployed again (`this run again`): another instance id, created after the old one's
    stop record (Compute Engine API, Instance.id and creationTimestamp)."""
    google.instances[VM] = status
    later = datetime.now(timezone.utc) + timedelta(seconds=2)
    google.boots[VM] = {"id": instance_id, "creationTimestamp": later.isoformat(timespec="milliseconds")}


def test_a_new_vm_of_a_run_whose_vm_stopped_itself_verifies_and_stops_again(settings_env, gcs, vm, guest):
    """A stopped TPU VM cannot be restarted, so the VM that boots after a stop is a new one: its script must
    verify and stop it (not keep it up idle at the v6e-8 rate), and `run` must say so."""
    assert boot_and_show(guest, gcs, vm, FAKE_INSTANCE_ID="1001") == 0
    powered_off(vm, guest)
    new_vm(vm, "2002")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert (f"TPU VM rl-test-vm stops itself once its startup script verified every output (it is a new VM: run "
            f"{RUN}'s earlier VM stopped itself at 20") in text_of(result)
    status = runner.invoke(app, ["status", RECIPE])
    assert "(RUNNING" in text_of(status) and "(it is a new VM: run" in text_of(status), status.output
    assert boot_and_show(guest, gcs, vm, FAKE_INSTANCE_ID="2002") == 0  # the new VM boots
    assert guest.power_offs == [STOP_COMMAND, STOP_COMMAND]
    vm.instances[VM] = "TERMINATED"
    status = runner.invoke(app, ["status", RECIPE])  # the new VM's own record
    assert "TPU VM rl-test-vm stopped itself at 20" in text_of(status), status.output


def test_run_detach_of_a_step_whose_marker_is_left_says_to_delete_it(settings_env, gcs, vm, guest):
    assert boot_and_show(guest, gcs, vm) == 0
    powered_off(vm, guest)
    for blob in gcs.list_blobs(PATHS.bucket, prefix=PATHS.hf_export.split("/", 3)[3]):
        blob.delete()  # the output deleted, its marker left: the script would skip export
    result = runner.invoke(app, ["run", RECIPE, "--detach"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    message = error_line(result)
    assert message.startswith(f"error: export of run {RUN} is not verified in the bucket, but its progress marker "
                              "exists, so the startup script would skip it: delete the step's outputs AND its "
                              f"progress marker ({PATHS.run_marker(RUN, '<step>')};")
    assert "then `gcloud compute instances delete rl-test-vm --zone=us-east5-b" in message


def test_the_hint_for_this_run_again_names_the_progress_markers(settings_env, gcs, vm, guest):
    text = after_self_stop(vm, gcs, guest, "status", RECIPE)
    assert (f"this run again: delete the step's outputs AND its progress marker ({PATHS.run_marker(RUN, '<step>')}; "
            f"convert's: {PATHS.progress_marker('convert')}): the startup script skips a step by its marker, then "
            "`gcloud compute instances delete rl-test-vm") in text


def test_a_reservation_bound_vm_says_the_reservation_keeps_billing(settings_env, gcs, vm, monkeypatch):
    """The reservation bills until it is deleted (compute/docs/instances/reservations-overview): the stop
    of a VM bound to it has an idle cost. v6e's reserved $/chip-hour x 8 chips (recipes/costs/prices.toml)."""
    monkeypatch.setenv("CAPACITY", "reservation")
    dry = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    text = text_of(dry)
    assert "no idle cost" not in text
    assert (f"only its boot disk bills until `npx cdktf destroy {RECIPE}`; the reservation's 8 chips bill "
            f"${8 * RESERVED_CHIP_HOUR:.2f}/h with or without the stack, until the reservation ends") in text


def test_a_terminated_vm_without_any_record_gets_the_delete_and_deploy_hint(settings_env, gcs, vm, monkeypatch):
    """Its script powered it off because gcloud never came up: no stop or failure record, and a TPU VM never
    comes back by itself."""
    vm.instances[VM] = "TERMINATED"
    monkeypatch.setenv("TPU_RL_MAINTENANCE_GRACE_SECONDS", "0")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    assert ("it left no stop or failure record: if its startup script powered it off because gcloud never came up "
            "at boot, it will not come back: `gcloud compute instances delete rl-test-vm") in text_of(result)


CANCEL_STAY = (f"the VM stays up {FAILURE_STAY_MINUTES} min after its script stops (not before its bounded install "
               f"ends) for a look (`sudo shutdown -c` on it within "
               f"{KEEP_UP_WITHIN_MINUTES} min keeps it up), then powers itself off and bills only its boot disk, "
               f"until `npx cdktf destroy {RECIPE}`")
REDEPLOY = ("`gcloud compute instances delete rl-test-vm --zone=us-east5-b --project=tpu-rl-test`, then `npx cdktf "
            f"deploy {RECIPE}`: the new VM's startup script resumes at the first step not done")
OFF_GO_ON = (f"to go on (a TPU VM cannot be started again): `gcloud storage rm {PATHS.cancel_marker}`, then "
             f"{REDEPLOY}")


def test_cancel_says_the_vm_powers_itself_off_after_a_bounded_look(settings_env, gcs, vm):
    """The script powers a cancelled VM off as a failed one (jobs/vm_outputs.py power_after): the cancel says
    when, how to keep it up, what bills then, and how the run goes on once it is off."""
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    text = text_of(result)
    assert CANCEL_STAY in text and "stays up and bills $" not in text
    # Two ways, each whole: while it is up, the marker removed and a reboot; once off, removed, deleted, deployed.
    assert (f"to go on while it is up, `gcloud storage rm {PATHS.cancel_marker}` and reboot the VM (`gcloud compute "
            "ssh rl-test-vm --zone=us-east5-b --project=tpu-rl-test --tunnel-through-iap -- sudo reboot`); once it "
            f"is off (a TPU VM cannot be started again): `gcloud storage rm {PATHS.cancel_marker}`, then "
            f"{REDEPLOY}") in text


def test_cancel_with_vm_after_run_keep_says_the_vm_stays_up_and_bills(settings_env, gcs, vm, monkeypatch):
    monkeypatch.setenv("VM_AFTER_RUN", "keep")
    deploy_vm(vm, {**SETTINGS, "VM_AFTER_RUN": "keep"})
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert ("the VM stays up (VM_AFTER_RUN=keep in its startup script) and bills $" in text_of(result)
            and f"until `npx cdktf destroy {RECIPE}` (or the next deploy replaces it)" in text_of(result))
    assert "after the cancel" not in text_of(result) and "once it is off" not in text_of(result)


def test_status_of_a_cancelled_run_says_the_bound_then_that_the_vm_is_off(settings_env, gcs, vm, guest):
    cancel = guest.object(PATHS.cancel_marker)
    assert boot_and_show(guest, gcs, vm, CANCEL_MODULE="maxtext.trainers.post_train.rl.train_rl",
                         CANCEL_FILE=str(cancel), TPU_RL_CANCEL_POLL_SECONDS="1") == 0
    assert guest.power_offs == [f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {RUN} cancelled; powering off"]
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert f"run {RUN} was cancelled at " in text_of(status) and CANCEL_STAY in text_of(status)
    vm.instances[VM] = "TERMINATED"  # the scheduled power-off, an hour after the cancel
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0, status.output
    assert f"the VM is off: only its boot disk bills, until `npx cdktf destroy {RECIPE}`" in text_of(status)
    assert OFF_GO_ON in text_of(status) and "after the cancel" not in text_of(status)
    rerun = runner.invoke(app, ["run", RECIPE])
    assert rerun.exit_code == ExitCode.BAD_INPUT and OFF_GO_ON in error_line(rerun), rerun.output


def test_cancel_says_what_the_vms_own_script_does_not_the_local_setting(settings_env, gcs, vm, monkeypatch):
    """The run name does not hold VM_AFTER_RUN: a VM deployed with keep never powers itself off, whatever the
    settings of whoever cancels say, and one deployed with stop does."""
    deploy_vm(vm, {**SETTINGS, "VM_AFTER_RUN": "keep"})
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert fits_80_columns_with_whole_paths(result.output), result.output
    kept = text_of(result)
    assert "the VM stays up (VM_AFTER_RUN=keep in its startup script) and bills $" in kept, kept
    assert "powers itself off" not in kept and "once it is off" not in kept
    status = text_of(runner.invoke(app, ["status", RECIPE]))
    assert "(VM_AFTER_RUN=keep in its startup script) and bills $" in status and "powers itself off" not in status
    gcs.bucket(PATHS.bucket).blob(PATHS.cancel_marker.split("/", 3)[3]).delete()
    deploy_vm(vm, SETTINGS)
    monkeypatch.setenv("VM_AFTER_RUN", "keep")
    stops = text_of(runner.invoke(app, ["cancel", RECIPE, "--yes"]))
    assert CANCEL_STAY in stops and "bills $" not in stops, stops


def test_cancel_of_a_script_that_does_not_say_promises_no_power_off(settings_env, gcs, vm, monkeypatch):
    """An older tpu-rl's script (no word on its cancel, VM_AFTER_RUN=stop): it may never power off."""
    script = vm.metadata[VM]["startup-script"]
    vm.metadata[VM]["startup-script"] = "\n".join(
        line for line in script.splitlines() if "POWER_OFF_AFTER_CANCEL_MINUTES=" not in line)
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0 and fits_80_columns_with_whole_paths(result.output), result.output
    assert ("the VM's startup script (from another tpu-rl) decides whether it powers itself off after the cancel: "
            f"`tpu-rl status {RECIPE}` shows whether it is up, `npx cdktf destroy {RECIPE}` stops it"
            in text_of(result)), result.output
    assert "then powers itself off" not in text_of(result)


def test_status_and_run_after_a_cancels_power_off_and_the_marker_removed_say_delete_and_deploy(
        settings_env, gcs, vm, guest, monkeypatch):
    """A TPU VM cannot be restarted: once its cancel's power-off came and the marker is gone, neither a reboot
    nor a wait for host maintenance brings it back."""
    cancel = guest.object(PATHS.cancel_marker)
    assert boot_and_show(guest, gcs, vm, CANCEL_MODULE="maxtext.trainers.post_train.rl.train_rl",
                         CANCEL_FILE=str(cancel), TPU_RL_CANCEL_POLL_SECONDS="1") == 0
    vm.instances[VM] = "TERMINATED"  # the scheduled power-off, an hour after the cancel
    vm.boots[VM] = {"creationTimestamp": "2026-11-29T00:00:00.000-08:00",
                    "lastStopTimestamp": (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat(
                        timespec="milliseconds")}
    gcs.bucket(PATHS.bucket).blob(PATHS.cancel_marker.split("/", 3)[3]).delete()
    monkeypatch.setenv("COLUMNS", "80")
    status = runner.invoke(app, ["status", RECIPE])
    assert status.exit_code == 0 and fits_80_columns_with_whole_paths(status.output), status.output
    assert "TPU VM rl-test-vm powered itself off at " in text_of(status), status.output
    assert f"was cancelled; a TPU VM cannot be started again: {REDEPLOY}" in text_of(status)
    assert "sudo reboot" not in status.output
    monkeypatch.setenv("TPU_RL_MAINTENANCE_GRACE_SECONDS", "0")
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert f"was cancelled; a TPU VM cannot be started again: {REDEPLOY}" in text_of(result), result.output
    assert "host maintenance" not in result.output and "gcloud never came up" not in result.output
