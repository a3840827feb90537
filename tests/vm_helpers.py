"""What the in-process CLI tests of the VM recipe (llama31-v6e8) share: its VM in the fake Compute API,
the startup script's records and console lines as it writes them, the real script run locally (the guest),
and this machine's clock as `run` reads it. One home, so no test module imports another."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from cli_helpers import error_line
from tpu_rl.jobs import render_startup_script
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from tpu_rl.jobs.vm import DONE, LOG_TAG, STARTING
from peers.fixtures import SETTINGS, TOKEN, deploy_vm, peer_settings, put_step_output, spec_of
from peers.vm_guest import Guest
from tpu_rl.recipes import example_settings, get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()
RECIPE = "llama31-v6e8"
VM = (SETTINGS["ZONE"], "rl-test-vm")
PATHS = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings())
RUN = PATHS.run_name
ATTEMPT = "20261130T000000Z-1"


# How the guest agent reports a failed startup script on the console (GoogleCloudPlatform/guest-agent
# google_metadata_script_runner/main.go at 0a52260f: "Script %q failed with error: %v", Go's "exit status N").
SCRIPT_FAILED_LINE = 'Script "startup-script" failed with error: exit status 1\n'


def line(text: str) -> str:
    """A line the startup script logs (jobs/vm_script/records.sh log) as the guest agent copies it to the console."""
    return f"startup-script: {LOG_TAG} 2026-11-30T00:00:00Z {RUN} {text}\n"


def progress(step: str, event: str) -> str:
    return line(f"{step}: {event}")


def put(gcs, url: str, text: str) -> None:
    bucket, name = split_gs_url(url)
    gcs.bucket(bucket).blob(name).upload_from_string(text)


def console(google, text: str):
    return lambda: google.serial.__setitem__(VM, google.serial.get(VM, "") + text)


def begin(google, gcs, step: str):
    """The startup script starting a step: its attempt record, then its start line."""
    def act():
        put(gcs, PATHS.vm_attempt, f"attempt={ATTEMPT} phase={step} at=2026-11-30T00:00:00Z\n")
        console(google, progress(step, STARTING))()
    return act


def finish(google, gcs, step: str):
    """The startup script finishing a step: output, then its log line, its log and its marker."""
    recipe = get_recipe(RECIPE)

    def act():
        put_step_output(gcs, recipe, step)
        console(google, progress(step, DONE))()
        put(gcs, PATHS.step_log(step), progress(step, STARTING) + f"{step} log\n" + progress(step, DONE))
        put(gcs, PATHS.progress_marker(step), "2026-11-30T00:00:00Z")

    return act


def every_step(google, gcs) -> list:
    """The startup script running convert, train and export, one act per console read."""
    return [act for step in ("convert", "train", "export") for act in (begin(google, gcs, step), finish(google, gcs, step))]


class Clock:
    """This machine's monotonic clock as `run` reads it (scripts/pipeline/vm/watch.py clock): each reading is
    `step` seconds after the one before, so a test reaches a bound in a few polls (poll sleeps are 0 here)."""

    def __init__(self) -> None:
        self.now, self.step = 1000.0, 1.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(monkeypatch):
    from tpu_rl.scripts.pipeline.vm import watch as vm_watch
    fake = Clock()
    monkeypatch.setattr(vm_watch, "clock", fake)
    return fake


@pytest.fixture
def vm(google, clock):
    deploy_vm(google, SETTINGS)
    google.serial[VM] = line(f"attempt {ATTEMPT}: boot")
    return google


@pytest.fixture
def guest(tmp_path):
    """The real startup script for the test settings, run locally (tests/peers/vm_guest.py)."""
    settings = peer_settings()
    spec = spec_of(get_recipe(RECIPE))
    return Guest(tmp_path / "vm", render_startup_script(spec, settings), TOKEN,
                 installed=spec.recipe.maxtext_version,
                 actor_checkpoints=ArtifactPaths(spec, settings).actor_checkpoints)


def boot_and_show(guest, gcs, google, **env) -> int:
    code, _, _ = guest.boot(**env)
    guest.sync_to(gcs)
    for step in ("convert", "train", "export"):  # the stand-in MaxText writes no output: put what it would
        if guest.object(PATHS.progress_marker(step)).exists():
            put_step_output(gcs, get_recipe(RECIPE), step)
    google.serial[VM] = guest.console()
    return code


def run_fails() -> str:
    """`tpu-rl run` that ends with a failed step (exit 1): its one error line."""
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    return error_line(result)


def run_finds_it_ended(clock) -> str:
    """`tpu-rl run` started after the attempt ended: it waits 0:15:00 (here, a few polls) for a new attempt
    (a reboot), then ends with the old attempt's end; the error line as it would be without the wait."""
    clock.step = 100.0
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    text = " ".join(result.output.split())
    assert "has ended; waiting up to 0:15:00 for a new one (a reboot starts it: `gcloud compute ssh " in text
    head, _, rest = error_line(result).partition(" ended: ")
    assert re.fullmatch(r"error: no new attempt began in 0:15:00 after attempt \S+", head), head
    return "error: " + rest


def ago(seconds: int) -> str:
    """A record's `at` (jobs/vm.py: `date -u +%FT%TZ`) that many seconds before now."""
    return f"{datetime.now(timezone.utc) - timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%SZ}"


def the_vm_goes_away(google):
    """A last poll for code that never ends the wait: the VM disappears, so `run` stops (with another
    message than the one the test wants) instead of polling for ever."""
    return lambda: google.instances.pop(VM, None)


# -- the startup script for the example settings, as the script tests read and run it -------------------------
EXAMPLE_SETTINGS = example_settings()
SCRIPT_RECIPE = get_recipe(RECIPE)
SCRIPT_PATHS = ArtifactPaths(spec_of(SCRIPT_RECIPE), EXAMPLE_SETTINGS)
SCRIPT_TOKEN = "hf_fake_token_for_the_test"


def example_script() -> str:
    return render_startup_script(spec_of(SCRIPT_RECIPE), EXAMPLE_SETTINGS)


# What `dpkg --audit` prints for a package an interrupted dpkg left unpacked (guillemj/dpkg 1.21.1 src/enquiry.c
# audit_problems and describebriefly; the package is an example).
AUDIT_UNPACKED = """The following packages have been unpacked but not yet configured.
They must be configured using dpkg --configure or the configure
menu option in dselect for them to work:
 cmake                cross-platform make

"""
