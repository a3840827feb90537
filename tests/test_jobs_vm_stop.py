"""The end of the VM recipe's startup script (jobs/vm_outputs.py) under the real bash, against the local guest
(tests/peers/vm_guest.py), whose shutdown stand-in records the power-off instead of making it: a finished run
stops the VM only after every output is verified; a failure or a cancel keeps it up for a bounded look;
VM_AFTER_RUN=keep keeps it up; a new VM of a done run verifies and stops; a rerun by hand on the VM that stopped
stays up, bounded."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.jobs.vm_outputs import FAILURE_STAY_MINUTES, KEEP_UP_WITHIN_MINUTES, STOP_COMMAND, output_objects
from peers.vm_guest import Guest
from tpu_rl.recipes.settings.specs import VM_STAYS
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.vm.cancelled import off_minutes
from tpu_rl.scripts.pipeline.vm.state import Attempt, Failure
from vm_helpers import EXAMPLE_SETTINGS, SCRIPT_PATHS as PATHS, SCRIPT_RECIPE as RECIPE, SCRIPT_TOKEN as TOKEN
from vm_helpers import example_script

TRAIN = "maxtext.trainers.post_train.rl.train_rl"
FAILURE_POWER_OFF = f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {PATHS.run_name} failed; powering off"
CANCEL_POWER_OFF = f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {PATHS.run_name} cancelled; powering off"


def guest_of(tmp_path, script: str | None = None) -> Guest:
    return Guest(tmp_path, script or example_script(), TOKEN, installed=RECIPE.maxtext_version,
                 actor_checkpoints=PATHS.actor_checkpoints)


def attempt(guest: Guest) -> Attempt:
    return Attempt.parse(guest.object(PATHS.vm_attempt).read_text())


def test_a_finished_run_stops_the_vm_only_after_every_output_is_verified(tmp_path):
    guest = guest_of(tmp_path)
    code, _, log = guest.boot()
    assert code == 0, log
    assert guest.power_offs == [STOP_COMMAND]
    assert (attempt(guest).phase, attempt(guest).ended) == ("done", "stopped")
    urls = [url for url, _ in guest.uploads()]
    # the stop record comes after the export's marker, and every check of the outputs before it
    assert urls.index(PATHS.vm_stop) > urls.index(PATHS.progress_marker("export"))
    assert f"stopped: every output of run {PATHS.run_name} is verified in the bucket" in log
    checked = log[log.index("all steps done"):]
    assert "verifying: not in the bucket" not in checked


def test_a_missing_output_fails_verifying_and_does_not_stop_the_vm(tmp_path):
    guest = guest_of(tmp_path)
    code, _, log = guest.boot(FAKE_NO_OUTPUT="tokenizer.json")
    assert code == 1, log
    assert STOP_COMMAND not in guest.power_offs and guest.power_offs == [FAILURE_POWER_OFF]
    assert not guest.object(PATHS.vm_stop).exists()
    failure = Failure.parse(guest.object(PATHS.vm_failure).read_text())
    assert (failure.phase, failure.code) == ("verifying", "1")
    assert failure.last_line.endswith(f"verifying: not in the bucket: {PATHS.hf_export}tokenizer.json: the VM does "
                                      "not stop itself")


def test_a_sharded_export_is_verified_shard_by_shard(tmp_path):
    guest = guest_of(tmp_path / "whole")
    code, _, log = guest.boot(FAKE_SHARDS="3")
    assert code == 0 and guest.power_offs == [STOP_COMMAND], log
    cut = guest_of(tmp_path / "cut")
    shard = "model-00002-of-00003.safetensors"
    code, _, log = cut.boot(FAKE_SHARDS="3", FAKE_NO_OUTPUT=shard)
    assert code == 1 and STOP_COMMAND not in cut.power_offs
    assert f"not in the bucket: {PATHS.hf_export}{shard}:" in log


def test_a_failed_step_keeps_the_vm_up_for_a_bounded_look(tmp_path):
    guest = guest_of(tmp_path)
    code, _, log = guest.boot(FAIL_MODULE=TRAIN)
    assert code == 1
    assert guest.power_offs == [FAILURE_POWER_OFF]  # scheduled, not now
    assert f"the VM stays up {FAILURE_STAY_MINUTES} min for a look, then powers itself off: `sudo shutdown -c` on " \
           f"it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, `sudo reboot` resumes the run" in log
    code, _, log = guest.boot()  # the reboot resumes; this boot finishes and stops the VM
    assert code == 0 and guest.power_offs == [FAILURE_POWER_OFF, STOP_COMMAND], log


def cancelled_boot(guest: Guest) -> tuple[int, str]:
    """A boot whose train `tpu-rl cancel` stops: the watcher sees the marker and ends MaxText."""
    cancel = guest.object(PATHS.cancel_marker)
    code, _, log = guest.boot(CANCEL_MODULE=TRAIN, CANCEL_FILE=str(cancel), TPU_RL_CANCEL_POLL_SECONDS="1")
    return code, log


def test_a_cancelled_run_keeps_the_vm_up_for_a_bounded_look_like_a_failure(tmp_path):
    """Nobody may be there after a cancel (`run --detach`, a cancel from a laptop that then sleeps): the VM
    powers itself off as after a failure, and the log says how to go on without `sudo reboot` alone, which
    the cancel marker would stop again."""
    guest = guest_of(tmp_path)
    code, log = cancelled_boot(guest)
    assert code == 0, log
    assert attempt(guest).ended == "cancelled"
    assert guest.power_offs == [CANCEL_POWER_OFF]  # scheduled, not now
    assert f"the VM stays up {FAILURE_STAY_MINUTES} min for a look, then powers itself off: `sudo shutdown -c` on " \
           f"it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, `gcloud storage rm {PATHS.cancel_marker}` and " \
           "`sudo reboot` resume the run" in log


def test_a_boot_that_finds_the_cancel_marker_keeps_the_vm_up_bounded(tmp_path):
    """A reboot with the marker left runs no step: it is bounded again, from its own end."""
    guest = guest_of(tmp_path)
    cancel = guest.object(PATHS.cancel_marker)
    cancel.parent.mkdir(parents=True, exist_ok=True)
    cancel.write_text("2026-12-01T00:00:00+00:00\n")
    code, calls, log = guest.boot()
    assert code == 0 and calls == [], log
    assert attempt(guest).ended == "cancelled" and guest.pending_power_off == CANCEL_POWER_OFF


def test_vm_after_run_keep_leaves_a_cancelled_vm_up(tmp_path):
    settings = dataclasses.replace(EXAMPLE_SETTINGS, vm_after_run=VM_STAYS)
    guest = guest_of(tmp_path, jobs.render_startup_script(spec_of(RECIPE), settings))
    code, log = cancelled_boot(guest)
    assert code == 0 and attempt(guest).ended == "cancelled", log
    assert guest.shutdowns == []


def script_on(script: str):
    """An instance whose metadata holds `script`, as the Compute API's Instance has it."""
    item = SimpleNamespace(key="startup-script", value=script)
    return SimpleNamespace(metadata=SimpleNamespace(items=[item]), status="RUNNING")


def test_what_the_script_says_of_a_cancel_is_what_it_does(tmp_path):
    """`tpu-rl cancel` and `status` read the VM's own script to say what it does after the cancel
    (scripts/pipeline/vm/cancelled.py): its word must be what it does under bash."""
    for after_run, scheduled in (("stop", [CANCEL_POWER_OFF]), (VM_STAYS, [])):
        settings = dataclasses.replace(EXAMPLE_SETTINGS, vm_after_run=after_run)
        script = jobs.render_startup_script(spec_of(RECIPE), settings)
        guest = guest_of(tmp_path / after_run, script)
        code, log = cancelled_boot(guest)
        assert code == 0 and guest.power_offs == scheduled, log
        said = off_minutes(script_on(script))
        assert said == (FAILURE_STAY_MINUTES if scheduled else None), (after_run, said)


def test_vm_after_run_keep_keeps_the_vm_up(tmp_path):
    settings = dataclasses.replace(EXAMPLE_SETTINGS, vm_after_run=VM_STAYS)
    guest = guest_of(tmp_path, jobs.render_startup_script(spec_of(RECIPE), settings))
    code, _, log = guest.boot()
    assert code == 0, log
    assert guest.power_offs == [] and not guest.object(PATHS.vm_stop).exists()
    assert "the VM stays up (VM_AFTER_RUN=keep): it bills at the v6e-8 rate until `npx cdktf destroy " \
           f"{RECIPE.name}`" in log
    code, _, _ = guest.boot(FAIL_MODULE=TRAIN)  # nor after a failure
    assert guest.power_offs == []


def test_a_new_vm_of_a_run_whose_old_vm_stopped_itself_verifies_and_stops(tmp_path):
    """A stopped TPU VM cannot be started again: a boot after the stop record is a new instance (deleted and
    deployed again), and the old VM's record must not keep it up idle."""
    guest = guest_of(tmp_path)
    assert guest.boot(FAKE_INSTANCE_ID="1001")[0] == 0 and guest.power_offs == [STOP_COMMAND]
    assert "instance=1001" in guest.object(PATHS.vm_stop).read_text()
    code, calls, log = guest.boot(FAKE_INSTANCE_ID="2002")  # the new VM: every step's marker is there
    assert code == 0 and calls == [], log
    assert guest.power_offs == [STOP_COMMAND, STOP_COMMAND]
    assert "instance=2002" in guest.object(PATHS.vm_stop).read_text()


def test_a_rerun_on_the_vm_that_stopped_itself_stays_up_bounded(tmp_path):
    """The same instance again (its power-off failed, and someone ran the script by hand): it runs nothing and
    stays up for a look, bounded as after a failure."""
    guest = guest_of(tmp_path)
    assert guest.boot()[0] == 0 and guest.power_offs == [STOP_COMMAND]
    code, calls, log = guest.boot()
    assert code == 0 and calls == [], log
    assert guest.power_offs == [STOP_COMMAND, f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {PATHS.run_name} "
                                              "ran nothing; powering off"]
    assert f"run {PATHS.run_name} was done and this VM stopped itself before; this rerun ran nothing" in log


def test_a_metadata_server_that_does_not_answer_verifies_and_stops(tmp_path):
    guest = guest_of(tmp_path)
    assert guest.boot()[0] == 0
    code, _, log = guest.boot(FAKE_METADATA_DOWN="1")
    assert code == 0 and guest.power_offs == [STOP_COMMAND, STOP_COMMAND], log


def test_a_rerun_by_hand_drops_the_power_off_a_failure_scheduled(tmp_path):
    """Without a reboot the failed attempt's `shutdown -h +60` is still pending: a rerun that the user then
    cancels must not be powered off by it."""
    guest = guest_of(tmp_path)
    assert guest.boot(FAIL_MODULE=TRAIN)[0] == 1 and guest.pending_power_off == FAILURE_POWER_OFF
    code, log = cancelled_boot(guest)
    assert code == 0 and attempt(guest).ended == "cancelled", log
    # each boot drops the schedule it finds; the cancel's own hour counts from its end
    assert guest.shutdowns == ["shutdown -c", FAILURE_POWER_OFF, "shutdown -c", CANCEL_POWER_OFF]


def test_a_done_run_whose_stop_was_cut_short_stops_at_the_next_boot(tmp_path):
    guest = guest_of(tmp_path)
    guest.finished(PATHS, "convert", "train", "export")  # every step done, and no stop record
    code, calls, log = guest.boot()
    assert code == 0 and calls == [], log
    assert guest.power_offs == [STOP_COMMAND] and guest.object(PATHS.vm_stop).exists()


def test_the_script_checks_what_run_verifies_of_each_step():
    """Every object `tpu-rl run` requires of convert and export (scripts/cloud/gcs.py step_outputs) is one the
    script checks before it stops the VM; train's newest checkpoint and the weights are found at run time."""
    script = example_script()
    objects = output_objects(PATHS)
    for step in ("convert", "export"):
        for requirement in gcs.step_outputs(PATHS, step):
            url = f"{requirement.prefix}{requirement.name or '*'}"
            if isinstance(requirement, gcs.SafetensorsWeights):
                assert f"readonly HF_EXPORT={requirement.prefix}\n" in script
                assert f"readonly HF_WEIGHTS_INDEX={gcs.HF_WEIGHTS_INDEX}\n" in script
                assert f"readonly HF_SINGLE_WEIGHTS={gcs.HF_SINGLE_WEIGHTS}\n" in script
                assert 'step_done "$HF_EXPORT$HF_WEIGHTS_INDEX"' in script
                assert 'need "$HF_EXPORT$HF_SINGLE_WEIGHTS"' in script
                continue
            assert url in objects[step] and url in script, url
    assert f"readonly ACTOR_CHECKPOINTS={PATHS.actor_checkpoints}\n" in script
    assert 'need "$ACTOR_CHECKPOINTS$step/model_params/*"' in script


def test_the_power_off_runs_last_after_the_attempt_record():
    """on_exit writes the attempt's end record first, then power_after: the record must reach the bucket."""
    script = example_script()
    end = script.index('record_attempt "${ENDED:-exit-$code}" || true')
    assert script.index('power_after "$code"', end) > end
