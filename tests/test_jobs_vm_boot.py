"""The startup script's first boot and its records: gcloud that snapd has not mounted yet, the order of the
failure and end records, and the export's checkpoint listing. The real rendered script runs under bash with
the stand-ins of tests/peers/vm_guest.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tpu_rl.jobs.vm as jobs_vm
from tpu_rl.jobs.vm_outputs import FAILURE_STAY_MINUTES, KEEP_UP_WITHIN_MINUTES
from peers.vm_guest import Guest, private_mounts
from tpu_rl.scripts.pipeline.vm.state import Attempt, ConsoleView, Failure, VmState
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES as RETRIES
from vm_helpers import SCRIPT_PATHS as PATHS, SCRIPT_RECIPE as RECIPE, SCRIPT_TOKEN as TOKEN, example_script as script


@pytest.fixture
def snap_guest(tmp_path):
    """A first boot on which gcloud is a snap that snapd has not mounted yet (this machine's gcloud hidden)."""
    missing = private_mounts()
    if missing:
        pytest.skip(f"hiding this machine's gcloud from the script needs a mount namespace: {missing}")
    return Guest(tmp_path, script(), TOKEN, installed=RECIPE.maxtext_version,
                 actor_checkpoints=PATHS.actor_checkpoints, gcloud_snap=True)


def tagged(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(jobs_vm.LOG_TAG)]


def test_gcloud_wait_is_shorter_than_the_silence_run_allows():
    # The script's own line on a gcloud that never came must reach `run` before it calls the VM silent.
    assert RETRIES.gcloud_wait.seconds < jobs_vm.HEARTBEAT_STALE_SECONDS


def test_a_first_boot_waits_for_snapd_to_mount_gcloud_before_its_first_record(snap_guest):
    # Before: the first upload ran before the trap and the watchers; gcloud was not there yet, so the script
    # ended after five tries with no attempt record, no failure record and no heartbeat.
    code, calls, log = snap_guest.boot(FAKE_SEED_SECONDS="2", **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert calls[0] == "snap wait system seed.loaded"
    assert ("boot: gcloud is not on PATH yet: waiting for snapd's seeding (snap wait system seed.loaded) and gcloud, "
            f"at most {RETRIES.gcloud_wait.seconds} s") in log
    assert jobs_vm.ATTEMPT_LINE.match(tagged(snap_guest.output)[0])
    attempt = Attempt.parse(snap_guest.object(PATHS.vm_attempt).read_text())
    assert (attempt.phase, attempt.ended) == ("done", "stopped")  # every output verified: the VM stopped itself
    assert snap_guest.object(PATHS.progress_marker("export")).is_file()
    assert "command not found" not in log
    # A later boot finds gcloud at once and does not ask snapd.
    _, calls, _ = snap_guest.boot()
    assert not any(call.startswith("snap ") for call in calls) and "not on PATH yet" not in snap_guest.output


def test_a_gcloud_that_never_comes_ends_the_boot_at_its_bound_with_one_line_and_no_record(snap_guest):
    began = time.monotonic()
    code, calls, log = snap_guest.boot(FAKE_SEED_SECONDS="never", **{RETRIES.gcloud_wait.env: "2",
                                                                     RETRIES.bucket.pause.env: "0"})
    assert time.monotonic() - began < 20  # snapd's stand-in would seed for 60 s
    assert code == 1
    lines = tagged(snap_guest.output)
    assert jobs_vm.ATTEMPT_LINE.match(lines[0])
    assert lines[-2].endswith(f"{PATHS.run_name} boot: gcloud is not on PATH after 2 s: no record of this attempt "
                              "can reach the bucket without it; reboot the VM to retry, or see docs/troubleshooting.md")
    # a failed boot keeps the VM up for a look, bounded (jobs/vm_outputs.py power_after)
    assert lines[-1].endswith(f"the VM stays up {FAILURE_STAY_MINUTES} min for a look, then powers itself off: "
                              f"`sudo shutdown -c` on it within {KEEP_UP_WITHIN_MINUTES} min keeps it up, "
                              "`sudo reboot` resumes the run")
    assert snap_guest.power_offs == [f"shutdown -h +{FAILURE_STAY_MINUTES} tpu-rl: run {PATHS.run_name} failed; "
                                     "powering off"]
    assert calls == ["snap wait system seed.loaded"]
    assert snap_guest.uploads() == [] and not snap_guest.object(PATHS.vm_attempt).exists()
    # `run` reads the console: the agent's verdict on a script that left no record, after that line.
    console = snap_guest.console()
    assert ConsoleView.read(console, PATHS.run_name).verdict == "exit status 1"
    assert console.splitlines()[-3].endswith(lines[-1]) and console.splitlines()[-4].endswith(lines[-2])


def test_the_failure_record_is_in_the_bucket_before_the_attempts_end_record(tmp_path):
    # A `run` that reads the bucket between the two must find the failure (its phase and log tail), not a bare
    # "attempt ended (exit-1)".
    guest = Guest(tmp_path, script(), TOKEN, installed=RECIPE.maxtext_version,
                  actor_checkpoints=PATHS.actor_checkpoints)
    code, _, _ = guest.boot(FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl")
    assert code == 1
    uploads = guest.uploads()
    end = next(i for i, (url, body) in enumerate(uploads) if url == PATHS.vm_attempt and " ended=" in body)
    seen = {url: body for url, body in uploads[:end]}  # the bucket just before the end record landed
    failure = Failure.parse(seen[PATHS.vm_failure])
    assert failure is not None and (failure.phase, failure.code) == ("train", "1")
    assert PATHS.step_log("train") in seen  # the step's log too
    state = VmState.of({"convert"}, Attempt.parse(seen[PATHS.vm_attempt]), failure, ConsoleView())
    assert state.failure == failure and state.ended is None


def _trained(guest: Guest, step: int) -> None:
    guest.finished(PATHS, "convert", "train", checkpoint=step)


def test_a_transient_listing_error_at_export_is_retried_not_taken_for_no_checkpoint(tmp_path):
    guest = Guest(tmp_path, script(), TOKEN, installed=RECIPE.maxtext_version)
    _trained(guest, RECIPE.last_step)
    code, calls, log = guest.boot(FAKE_LS_FAIL="commit_success.txt", FAKE_LS_FAIL_TIMES="2",
                                  **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert calls == ["maxtext.checkpoint_conversion.to_huggingface token=yes"]
    assert "/*/commit_success.txt failed (try 2 of 5): ERROR: (gcloud.storage.ls) HTTPError 503" in log
    assert f"export: checkpoint step {RECIPE.last_step} (computed: at most {RECIPE.last_step})" in log


def test_a_listing_that_keeps_failing_at_export_fails_it_saying_so(tmp_path):
    guest = Guest(tmp_path, script(), TOKEN, installed=RECIPE.maxtext_version)
    _trained(guest, RECIPE.last_step)
    code, calls, log = guest.boot(FAKE_LS_FAIL="commit_success.txt", **{RETRIES.bucket.pause.env: "0"})
    assert code == 1 and calls == []
    assert "no checkpoint with orbax's commit marker" not in log
    record = Failure.parse(guest.object(PATHS.vm_failure).read_text())
    assert (record.phase, record.code) == ("export", "1")
    assert record.last_line.endswith(f"export: cannot list the checkpoints under {PATHS.actor_checkpoints} (gcloud "
                                     "failed 5 times, above): reboot the VM to retry")
    assert not guest.object(PATHS.progress_marker("export")).exists()


def test_the_docs_state_the_gcloud_wait_the_script_does():
    docs = Path(__file__).parents[1] / "docs"
    line = f"boot: gcloud is not on PATH after {RETRIES.gcloud_wait.seconds} s: no record of this attempt"
    # the script's line, with the bound in the variable its preamble sets (the default, or what a test sets)
    wait = RETRIES.gcloud_wait.seconds
    assert line.replace("boot:", "$BOOT:").replace(f" {wait} ", " $GCLOUD_WAIT_SECONDS ") in script()
    assert f'readonly GCLOUD_WAIT_SECONDS="${{{RETRIES.gcloud_wait.env}:-{wait}}}"\n' in script()
    for page in ("pipeline.md", "troubleshooting.md"):
        assert " ".join(line.split()[:9]) in " ".join((docs / page).read_text().split()), page
    assert (f"at most {RETRIES.gcloud_wait.seconds // 60} min (`GCLOUD_WAIT_SECONDS`"
            in " ".join((docs / "pipeline.md").read_text().split()))
