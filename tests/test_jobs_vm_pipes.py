"""The VM startup script's output path and heartbeat under stress, run for real under bash with stand-ins
(tests/peers/vm_guest.py): the guest agent's reader goes away mid-step, the cancel check is slow; and the
console `run` keeps between polls stays bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.jobs.paths import ArtifactPaths
from peers.vm_guest import Guest
from tpu_rl.recipes import example_settings, get_recipe
from tpu_rl.scripts.pipeline.vm import watch as vm_watch
from tpu_rl.scripts.pipeline.vm.run import step_section
from tpu_rl.scripts.pipeline.vm.state import ConsoleView

SETTINGS = example_settings()
RECIPE = get_recipe("llama31-v6e8")
PATHS = ArtifactPaths(spec_of(RECIPE), SETTINGS)
TOKEN = "hf_fake_token_for_the_test"


@pytest.fixture
def guest(tmp_path):
    return Guest(tmp_path, jobs.render_startup_script(spec_of(RECIPE), SETTINGS), TOKEN, installed=RECIPE.maxtext_version,
                 actor_checkpoints=PATHS.actor_checkpoints)


def start(guest: Guest, **env: str) -> subprocess.Popen:
    full = {"PATH": os.environ["PATH"], "FAKE_GCS": str(guest.gcs), "FAKE_TOKEN": TOKEN, "CALLS": str(guest.calls),
            "TPU_RL_GCS_RETRY_SECONDS": "0", **guest.env, **env}
    return subprocess.Popen(["bash", "-c", str(guest.script)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)  # its own group, to stop it whole


def wait_for(predicate, seconds: float = 30) -> None:
    end = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def slow_train(guest: Guest, lines: int) -> None:
    """train_rl logs a line a second and ends well; the other steps end at once."""
    real = (guest.bin / "python3").read_text()
    (guest.bin / "python3").write_text(real.replace(
        "#!/bin/bash\n", '#!/bin/bash\nif [[ "$2" == *train_rl ]]; then for i in $(seq %d); do echo "train line $i"; '
        'sleep 1; done; fi\n' % lines, 1))


def test_a_reader_that_goes_away_mid_step_leaves_the_step_and_its_log_going(guest):
    # Both guest agents read the script's output with a bufio.Scanner and stop at a line over 64 KiB
    # (GoogleCloudPlatform/guest-agent google_metadata_script_runner/main.go runCmd at 0a52260f;
    # google-guest-agent internal/run/run.go at 16b9b3bf): the pipe's reader is closed mid-step.
    slow_train(guest, 6)
    proc = start(guest)
    wait_for(lambda: guest.log_file.exists() and "train line 2" in guest.log_file.read_text())
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    log = guest.log_file.read_text()
    assert "train line 6" in log and f"{PATHS.run_name} train: done" in log and "all steps done" in log
    assert guest.object(PATHS.progress_marker("train")).exists()
    assert guest.object(PATHS.progress_marker("export")).exists()


def test_the_heartbeat_goes_on_while_the_cancel_check_is_slow(guest):
    # While train runs, the cancel check (`gcloud storage ls` of the marker) takes 8 s each (gcloud retries
    # on its own); the heartbeat, every second here, must not wait for it. Only train's checks are slow,
    # and the script is stopped once counted, so the test waits for train alone.
    real = guest.bin / "gcloud-real"
    (guest.bin / "gcloud").rename(real)
    (guest.bin / "gcloud").write_text(
        f'#!/bin/bash\nif [[ "$1 $2" == "storage ls" && "$3" == *cancel* ]] && grep -qs "train line" "$TRAIN_LOG"; '
        f'then sleep 8; fi\nif [[ "$1 $2" == "storage cp" && "$4" == *heartbeat ]]; then echo beat >> "$BEATS"; fi\n'
        f'exec {real} "$@"\n')
    (guest.bin / "gcloud").chmod(0o755)
    beats = guest.root / "beats"
    slow_train(guest, 8)
    proc = start(guest, TPU_RL_CANCEL_POLL_SECONDS="1", BEATS=str(beats), TRAIN_LOG=str(guest.log_file))
    try:
        def beats_at(line: str) -> int:
            wait_for(lambda: guest.log_file.exists() and line in guest.log_file.read_text())
            return len(beats.read_text().splitlines()) if beats.exists() else 0

        first = beats_at("train line 2")  # the first slow check has begun
        count = beats_at("train line 7") - first  # five seconds later
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    assert count >= 3, count  # ~5 expected; one beat of slack for a loaded machine, 0 when it waits
    assert " log=" in guest.object(PATHS.vm_heartbeat).read_text()  # the log's size, for the stall bound


def test_the_console_kept_between_polls_is_bounded_and_keeps_what_the_parsers_need(monkeypatch):
    monkeypatch.setattr(vm_watch, "CONSOLE_TAIL_BYTES", 10_000)
    run = PATHS.run_name
    head = (f"startup-script: tpu-rl: 2026-11-30T00:00:00Z {run} attempt A-1: boot\n"
            f"startup-script: tpu-rl: 2026-11-30T00:00:00Z {run} convert: starting\n"
            f"startup-script: tpu-rl: 2026-11-30T00:00:00Z {run} train: starting\n")
    buffer = vm_watch.ConsoleBuffer(run)
    buffer.add(head)
    for _ in range(100):
        text = buffer.add("startup-script: I1130 q" + "x" * 80 + "\n" * 1 + "startup-script: more\n" * 20)
    assert len(text) < 3 * 10_000
    view = ConsoleView.read(text, run)
    assert view.attempt == "A-1" and view.started == ["convert", "train"]
    assert step_section(text, "train", run)[0].endswith(f"{run} train: starting")


def test_the_console_kept_between_polls_is_bounded_by_a_line_longer_than_the_bound(monkeypatch):
    monkeypatch.setattr(vm_watch, "CONSOLE_TAIL_BYTES", 10_000)
    run = PATHS.run_name
    buffer = vm_watch.ConsoleBuffer(run)
    buffer.add(f"startup-script: tpu-rl: 2026-11-30T00:00:00Z {run} attempt A-1: boot\n")
    for _ in range(10):  # one line with no end in sight (a rollout printed on one line)
        text = buffer.add("x" * 5_000)
    assert len(text) < 2 * 10_000
    assert ConsoleView.read(text, run).attempt == "A-1"  # the attempt line is kept as an anchor
