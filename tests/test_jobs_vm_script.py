"""The VM startup script: valid bash, shellcheck-clean, seed 002's environment, and it resumes.

The resume tests run the real script with stand-ins for gcloud (a local directory as the bucket) and
python3 (records its arguments), so the step/marker logic is exercised, not just read.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
import tpu_rl.jobs.vm as jobs_vm
import tpu_rl.jobs.vm_install as jobs_vm_install
from tpu_rl.jobs.paths import split_gs_url
from tpu_rl.jobs.vm_preamble import part
from tpu_rl.recipes import UserError, get_recipe
from tpu_rl.recipes.conventions import HF_TOKEN_ENV
from peers.vm_guest import Guest
from tpu_rl.scripts.pipeline.vm.run import step_section
from tpu_rl.scripts.pipeline.vm.state import Attempt, ConsoleView, Failure, VmState
from tpu_rl.recipes.outcome import VM_SCRIPT_RETRIES as RETRIES
from vm_helpers import EXAMPLE_SETTINGS as SETTINGS, SCRIPT_PATHS as PATHS, SCRIPT_RECIPE as RECIPE
from vm_helpers import AUDIT_UNPACKED, SCRIPT_TOKEN as TOKEN, example_script as script


def test_startup_script_is_valid_bash(tmp_path):
    path = tmp_path / "startup.sh"
    path.write_text(script())
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_startup_script_is_shellcheck_clean(tmp_path, shellcheck):
    path = tmp_path / "startup.sh"
    path.write_text(script())
    result = subprocess.run([shellcheck, "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _preamble(text: str) -> str:
    """The rendered script's readonly values (its lines before the first part)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(("readonly ", "declare -r")))


def test_startup_script_sets_seed_002_tpu_environment_from_the_shape():
    exported = subprocess.run(["bash", "-c", _preamble(script()) + "\n" + part("tpu_env") + "\nenv"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
    for line in ("TPU_ACCELERATOR_TYPE=v6e-8", "TPU_TOPOLOGY=2x4", "TPU_CHIPS_PER_HOST_BOUNDS=2,4,1",
                 "TPU_HOST_BOUNDS=1,1,1", "TPU_WORKER_ID=0", "TPU_WORKER_HOSTNAMES=localhost",
                 "TPU_SKIP_MDS_QUERY=1", f"TPU_NAME={socket.gethostname()}"):
        assert line in exported
    assert "chips_per_vm=8" in script()


def test_startup_script_installs_the_pinned_maxtext_like_seed_002():
    text = script()
    assert 'UV_TORCH_BACKEND=cpu bounded uv-pip-install-maxtext "${INSTALL_BOUNDS[uv-pip-install-maxtext]}" uv pip ' \
        'install "$MAXTEXT_PIP" --resolution=lowest' in text
    assert "readonly MAXTEXT_PIP='maxtext[tpu-post-train]==0.2.3'\n" in text
    assert "install_tpu_post_train_extra_deps" in text
    assert "readonly PYTHON_VERSION=3.12\n" in text


def test_token_is_read_from_secret_manager_with_tracing_off():
    text = script()
    assert HF_TOKEN_ENV == "HF_TOKEN"  # the name token.sh assigns, MaxText's fallback for hf_access_token
    assert ('HF_TOKEN="$(timeout -k "$KILL_AFTER_SECONDS" "$TOKEN_BOUND" gcloud secrets versions access latest '
            '--secret="$HF_TOKEN_SECRET" --project="$PROJECT")"') in text
    assert "readonly HF_TOKEN_SECRET=hf-token\nreadonly PROJECT=tpu-rl-example\n" in text
    lines = text.splitlines()
    fetch = next(i for i, line in enumerate(lines) if line.startswith('HF_TOKEN="$('))
    assert "set +x" in lines[fetch - 3: fetch]
    assert "set -x" not in text
    assert "hf_access_token" not in text


def test_a_multi_host_shape_is_refused_for_a_vm_recipe():
    shape = RECIPE.shape.model_copy(update={"machine_type": "ct6e-standard-4t", "chips_per_vm": 4})
    with pytest.raises(UserError, match="one TPU VM"):
        jobs.render_startup_script(spec_of(RECIPE.model_copy(update={"shape": shape})), SETTINGS)


# --- running the script against stand-ins --------------------------------------------------------------

@pytest.fixture
def guest(tmp_path):
    return Guest(tmp_path, script(), TOKEN, installed=RECIPE.maxtext_version,
                 actor_checkpoints=PATHS.actor_checkpoints)


@pytest.fixture
def run_script(guest):
    def run(fail_module: str = "none", **extra: str) -> tuple[int, list[str], str]:
        result = guest.boot(FAIL_MODULE=fail_module, **extra)
        run.output = guest.output  # what the guest agent reads from the script (one pipe)
        return result

    def marker(step: str) -> Path:
        return guest.object(PATHS.cancel_marker if step == "cancel" else PATHS.progress_marker(step))

    def checkpoint(step: int) -> None:
        """A training checkpoint the script finds: its step directory with orbax's commit marker."""
        bucket, actor = split_gs_url(PATHS.actor_checkpoints)
        (guest.gcs / bucket / actor / str(step)).mkdir(parents=True, exist_ok=True)
        (guest.gcs / bucket / actor / str(step) / "commit_success.txt").write_text("committed")

    run.install_marker = guest.install_marker
    run.checkpoint = checkpoint
    run.exported = Path(guest.env["EXPORTED"])
    return run, marker


def test_fresh_vm_runs_convert_train_export_with_the_token_and_marks_each_step(run_script):
    run, marker = run_script
    code, calls, log = run()
    assert code == 0, log
    assert calls == [
        "maxtext.checkpoint_conversion.to_maxtext token=yes",
        "maxtext.trainers.post_train.rl.train_rl token=yes",
        "maxtext.checkpoint_conversion.to_huggingface token=yes",
    ]
    assert all(marker(step).is_file() for step in ("convert", "train", "export"))
    assert TOKEN not in log


def test_rebooted_vm_skips_steps_whose_marker_exists(run_script, guest):
    run, marker = run_script
    guest.finished(PATHS, "convert", "train", checkpoint=RECIPE.last_step)
    code, calls, log = run()
    assert code == 0, log
    assert calls == ["maxtext.checkpoint_conversion.to_huggingface token=yes"]
    assert "convert: already done" in log


def test_a_failed_step_stops_the_script_and_leaves_no_marker(run_script):
    run, marker = run_script
    code, calls, _ = run(fail_module="maxtext.trainers.post_train.rl.train_rl")
    assert code != 0
    assert [call.split()[0] for call in calls] == ["maxtext.checkpoint_conversion.to_maxtext",
                                                    "maxtext.trainers.post_train.rl.train_rl"]
    assert marker("convert").is_file() and not marker("train").exists() and not marker("export").exists()
    code, calls, _ = run()  # the next boot resumes at train
    assert code == 0 and [call.split()[0] for call in calls] == [
        "maxtext.trainers.post_train.rl.train_rl", "maxtext.checkpoint_conversion.to_huggingface"]


def test_export_converts_the_newest_committed_step_training_reached_below_the_computed_one(run_script):
    # train_rl can stop below num_batches x ... (scripts/cloud/gcs.py TrainedCheckpoint): here it saved
    # 40 (checkpoint_period 10) and its last step 49, and a later save of 60 was cut off before its marker.
    run, marker = run_script
    code, calls, log = run(TRAINED_STEPS="10 20 30 40 49")
    assert code == 0, log
    assert run.exported.read_text() == f"load_parameters_path={PATHS.actor_checkpoints}49/model_params/\n"
    assert "export: checkpoint step 49 (computed: at most 50)" in log


def test_export_without_a_committed_checkpoint_fails_and_leaves_no_marker(run_script):
    run, marker = run_script
    code, calls, log = run(TRAINED_STEPS="")
    assert code != 0 and "no checkpoint with orbax's commit marker" in log
    assert not marker("export").exists() and not run.exported.exists()


def test_export_refuses_a_training_that_saved_only_step_0(run_script):
    run, marker = run_script
    code, calls, log = run(TRAINED_STEPS="0")
    assert code != 0 and "only step 0" in log and not run.exported.exists() and not marker("export").exists()


def test_a_module_patch_on_a_vm_recipe_runs_as_a_named_step_before_training(tmp_path):
    patch = get_recipe("gemma4-v6e64").patches[0].model_copy(update={"maxtext_versions": ("0.2.3",)})
    text = jobs.render_startup_script(spec_of(RECIPE.model_copy(update={"patches": (patch,)})), SETTINGS)
    assert text.index(f"source patch '{patch.name}'") < text.index("python3 -m maxtext.trainers.post_train.rl.train_rl")
    path = tmp_path / "startup.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_a_container_path_patch_is_refused_for_a_vm_recipe():
    patch = next(p for p in get_recipe("qwen3-v6e32").patches if p.path).model_copy(
        update={"maxtext_versions": ("0.2.3",)})
    with pytest.raises(UserError, match="container path"):
        jobs.render_startup_script(spec_of(RECIPE.model_copy(update={"patches": (patch,)})), SETTINGS)


def test_first_boot_installs_maxtext_like_seed_002_once_then_later_boots_skip_it(run_script):
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run()
    assert code == 0, log
    install = [call for call in calls if not call.startswith("maxtext.")]
    assert install == [
        "apt-get update -q",
        "dpkg --audit",  # nothing to report: no configure
        "apt-get -o DPkg::Lock::Timeout=600 install -y -q build-essential cmake ninja-build",
        f"curl -LsSf https://astral.sh/uv/{jobs_vm_install.UV_VERSION}/install.sh",
        "uv python install 3.12",
        f"uv venv --clear --python 3.12 --seed {run.install_marker.parent}/venv",
        "uv pip install maxtext[tpu-post-train]==0.2.3 --resolution=lowest (UV_TORCH_BACKEND=cpu)",
        "install_tpu_post_train_extra_deps ",
    ]
    assert run.install_marker.is_file()
    _, calls, _ = run()
    assert not any(call.startswith(("uv ", "apt-get", "dpkg", "install_tpu")) for call in calls)


def test_a_venv_left_by_a_stopped_install_is_made_anew_not_kept(run_script):
    # uv-venv stopped after the venv's python but before its pip seed: bin/python exists, pip does not.
    run, _ = run_script
    run.install_marker.unlink()
    python = run.install_marker.parent / "venv" / "bin" / "python"
    python.write_text("#!/bin/bash\n")
    python.chmod(0o755)
    code, calls, log = run()
    assert code == 0, log
    assert f"uv venv --clear --python 3.12 --seed {run.install_marker.parent}/venv" in calls


DPKG_CONFIGURE = "dpkg --force-confdef --force-confold --configure -a"


def test_an_interrupted_dpkg_is_configured_before_apt_get_install(run_script):
    # A KILLed apt-get leaves dpkg interrupted; `apt-get install` then refuses until `dpkg --configure -a`.
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run(DPKG_AUDIT=AUDIT_UNPACKED)
    assert code == 0, log
    install = next(i for i, call in enumerate(calls) if call.startswith("apt-get -o DPkg::Lock::Timeout=600 install"))
    assert calls[install - 2:install] == ["dpkg --audit", DPKG_CONFIGURE]
    assert "install: dpkg-configure (at most 900 s)" in run.output


def test_a_dpkg_with_nothing_to_configure_is_not_configured(run_script):
    # `dpkg --configure -a` takes the dpkg lock without waiting: run it only when `dpkg --audit` reports.
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run(DPKG_AUDIT="")
    assert code == 0, log
    assert "dpkg --audit" in calls and not any("--configure" in call for call in calls)
    assert "dpkg-configure" not in run.output


def test_a_dpkg_configure_that_finds_the_lock_held_is_retried_and_the_install_goes_on(run_script):
    # unattended-upgrades at first boot holds the dpkg lock: dpkg fails at once (exit 2); it is tried again.
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run(DPKG_AUDIT=AUDIT_UNPACKED, LOCKED_CALL=DPKG_CONFIGURE, LOCKED_TIMES="1",
                           **{RETRIES.lock.pause.env: "0"})
    assert code == 0, log
    assert calls.count(DPKG_CONFIGURE) == 2
    assert "dpkg: error: dpkg frontend lock was locked by another process with pid 4242" in run.output
    assert "dpkg: another process holds the lock (exit 2); trying again in 0 s" in run.output
    assert run.output.count("install: dpkg-configure (at most 900 s)") == 1  # one bound for every try
    assert any(call.startswith("apt-get -o DPkg::Lock::Timeout=600 install") for call in calls)
    assert run.install_marker.is_file()


def test_an_apt_get_update_that_finds_the_lists_lock_held_waits_for_it_within_one_try(run_script):
    # apt-daily's update holds the lists lock: apt-get update fails at once; it is tried again, in the same try.
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run(LOCKED_CALL="apt-get update", LOCKED_TIMES="2", **{RETRIES.lock.pause.env: "0"})
    assert code == 0, log
    assert calls.count("apt-get update -q") == 3
    assert run.output.count("apt-get: another process holds the lock (exit 100)") == 2
    assert run.output.count("install: apt-get-update (at most 900 s)") == 1  # not the mirror retries' tries
    assert "apt-get update failed" not in run.output
    assert run.install_marker.is_file()


def test_a_lock_held_past_the_lock_wait_fails_the_phase_with_the_tools_own_line(guest):
    guest.install_marker.unlink()
    began = time.monotonic()
    code, calls, _ = guest.boot(DPKG_AUDIT=AUDIT_UNPACKED, LOCKED_CALL=DPKG_CONFIGURE, LOCKED_TIMES="1000",
                                **{RETRIES.lock.pause.env: "1", RETRIES.lock.within.env: "2"})
    assert time.monotonic() - began < 15
    assert code == 2  # dpkg's own exit
    assert 2 <= calls.count(DPKG_CONFIGURE) <= 4  # about one try a second for 2 s
    record = failure(guest)
    assert (record.phase, record.code) == ("install", "2")
    assert not any(call.startswith("apt-get -o DPkg::Lock::Timeout=600 install") for call in calls)
    assert not guest.install_marker.exists()


def test_an_attempt_record_that_cannot_be_uploaded_does_not_fail_the_install(guest):
    guest.install_marker.unlink()
    code, _, log = guest.boot(FAKE_CP_FAIL_BODY="command=uv-venv", **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert guest.install_marker.is_file()
    assert "failed (try 5 of 5)" in guest.output


# --- the real script's records and console, read back by the CLI's parser (scripts/pipeline/vm/state.py) ----

def state_of(guest: Guest, console: str) -> VmState:
    """What `tpu-rl run/status` decide from: the bucket the script wrote, and the console."""
    def text(url: str) -> str | None:
        path = guest.object(url)
        return path.read_text() if path.exists() else None

    done = {step for step in ("convert", "train", "export") if guest.object(PATHS.progress_marker(step)).exists()}
    return VmState.of(done, Attempt.parse(text(PATHS.vm_attempt)), Failure.parse(text(PATHS.vm_failure)),
                      ConsoleView.read(console, PATHS.run_name))


def failure(guest: Guest) -> Failure:
    return Failure.parse(guest.object(PATHS.vm_failure).read_text())


def test_a_failed_step_leaves_a_record_and_its_log_and_the_cli_reads_it(guest):
    code, _, _ = guest.boot(FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl")
    assert code == 1
    record = failure(guest)
    assert (record.phase, record.code) == ("train", "1")
    assert record.last_line.endswith("maxtext.trainers.post_train.rl.train_rl: stand-in error, exiting 1")
    log = guest.object(PATHS.step_log("train")).read_text()
    assert f"{PATHS.run_name} train: starting" in log.splitlines()[0] and "train: failed (exit 1)" in log
    state = state_of(guest, guest.console())
    assert state.states() == {"convert": "done", "train": "failed", "export": "waiting"}
    # While train runs, before the guest agent's verdict, the console shows it started and nothing more.
    assert state_of(guest, guest.console(running=True)).failure is not None  # the bucket knows already


def test_a_missing_secret_version_fails_the_token_phase_with_the_fix_and_a_record(guest):
    code, calls, log = guest.boot(FAKE_TOKEN="")
    assert code == 1 and calls == []
    record = failure(guest)
    assert (record.phase, record.code) == ("token", "1")
    assert record.last_line.endswith("token: cannot read the latest version of secret hf-token: add a version with "
                                     "`tpu-rl secret set` (secret hf-token), or grant the VM's service account "
                                     "roles/secretmanager.secretAccessor")
    assert any("NOT_FOUND: Secret Version" in line for line in record.tail)
    state = state_of(guest, guest.console())
    assert state.failure == record and state.states() == {"convert": "waiting", "train": "waiting",
                                                          "export": "waiting"}


def test_an_install_failure_leaves_a_record_before_any_step(guest):
    guest.install_marker.unlink()
    code, calls, log = guest.boot(FAIL_TOOL="apt-get", **{RETRIES.bucket.pause.env: "0"})
    assert code == 100
    assert calls == ["apt-get update -q"] * 3  # tried 3 times, then the failure
    assert "install: apt-get update failed (exit 100, try 2 of 3), retrying" in log
    record = failure(guest)
    assert (record.phase, record.code) == ("install", "100")
    assert record.last_line == "E: stand-in failure of apt-get update -q"
    assert not guest.install_marker.exists()


def test_a_hung_install_command_ends_the_phase_at_its_bound_with_a_record_naming_it(guest):
    # install_tpu_post_train_extra_deps never returns (a hung download): `timeout` stops it at its bound.
    guest.install_marker.unlink()
    began = time.monotonic()
    code, calls, log = guest.boot(HANG_TOOL="install_tpu_post_train_extra_deps",
                                  **{jobs_vm_install.INSTALL_TIMEOUT_ENV: "1"})
    assert time.monotonic() - began < 15  # the stand-in would hang 30 s
    assert code == 124  # coreutils timeout(1): the command timed out
    record = failure(guest)
    assert (record.phase, record.code) == ("install", "124")
    assert record.last_line.endswith("install: install_tpu_post_train_extra_deps did not finish within its bound "
                                     "of 1 s (timeout, exit 124): reboot the VM to retry")
    assert calls[-1] == "install_tpu_post_train_extra_deps "
    assert not guest.install_marker.exists()  # the next boot redoes the install


def test_a_command_that_ignores_term_is_killed_after_the_grace(guest):
    guest.install_marker.unlink()
    began = time.monotonic()
    code, _, _ = guest.boot(HANG_TOOL="install_tpu_post_train_extra_deps", IGNORE_TERM="1",
                            **{jobs_vm_install.INSTALL_TIMEOUT_ENV: "1", jobs_vm_install.KILL_AFTER_ENV: "1"})
    assert time.monotonic() - began < 15  # the stand-in would hang 30 s
    assert code == 137  # coreutils timeout(1): KILL after TERM was ignored
    assert failure(guest).last_line.endswith("install: install_tpu_post_train_extra_deps did not finish within its "
                                             "bound of 1 s (timeout, exit 137): reboot the VM to retry")
    assert not guest.install_marker.exists()


def test_timed_out_measures_the_bound_by_the_time_since_boot(tmp_path):
    # A start 5 s of /proc/uptime ago with a bound of 5 s has used its bound up; one just now has not.
    check = (part("bounded") + "\nnow=$(cut -d. -f1 /proc/uptime)\n"
             "timed_out 124 $((now - 5)) 5 && echo used-up\ntimed_out 124 $now 5 || echo not-yet\n"
             "timed_out 1 $((now - 5)) 5 || echo not-a-timeout\n")
    out = subprocess.run(["bash", "-c", check], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["used-up", "not-yet", "not-a-timeout"]


def test_each_install_command_names_itself_and_its_bound_in_the_attempt_record(guest):
    guest.install_marker.unlink()
    code, _, _ = guest.boot(HANG_TOOL="apt-get",
                            **{jobs_vm_install.INSTALL_TIMEOUT_ENV: "1", RETRIES.bucket.pause.env: "0"})
    assert code == 124
    attempt = Attempt.parse(guest.object(PATHS.vm_attempt).read_text())
    assert (attempt.phase, attempt.command, attempt.bound, attempt.ended) == ("install", "apt-get-update", 1, "exit-124")
    assert guest.output.count("install: apt-get-update (at most 1 s)") == 3  # each try of the update has its bound
    assert failure(guest).last_line.endswith("apt-get-update did not finish within its bound of 1 s (timeout, "
                                             "exit 124): reboot the VM to retry")


def test_the_bounds_are_the_named_ones_and_the_total_covers_every_try():
    text = script()
    for name, bound in jobs_vm_install.INSTALL_BOUNDS.items():
        assert f'bounded {name} "${{INSTALL_BOUNDS[{name}]}}"' in text
        assert f'[{name}]="${{TPU_RL_INSTALL_TIMEOUT_SECONDS:-{bound.seconds}}}"' in text
    # apt-get update 3 times (900 s each), the other seven once, each + its 30 s KILL grace, + 10 s and 20 s waits
    assert jobs_vm_install.INSTALL_TOTAL_SECONDS == 3 * 930 + (900 + 1200 + 300 + 600 + 300 + 2400 + 3600 + 7 * 30) + 30


def test_the_pipeline_doc_states_the_install_bounds_the_script_uses():
    from tpu_rl.scripts.pipeline.session import hms
    doc = " ".join((Path(__file__).parents[1] / "docs" / "pipeline.md").read_text().split())
    assert " ".join(jobs_vm_install.bounds_table().split()) in doc  # the table, generated from INSTALL_BOUNDS
    for name, bound in jobs_vm_install.INSTALL_BOUNDS.items():
        assert f"| `{name}`" in doc and f"| {hms(bound.seconds)} |" in doc, name
    assert f"The token read (`gcloud secrets versions access`) has {hms(jobs_vm_install.TOKEN_BOUND.seconds)}." in doc
    assert f"The whole install is at most {hms(jobs_vm_install.INSTALL_TOTAL_SECONDS)}." in doc
    from tpu_rl.scripts.pipeline.vm.phase_watch import INSTALL_GRACE_SECONDS, INSTALL_WAIT_SECONDS
    assert (f"lasted {hms(INSTALL_WAIT_SECONDS)} by its own clock (the {hms(jobs_vm_install.INSTALL_TOTAL_SECONDS)} "
            f"and {hms(INSTALL_GRACE_SECONDS)} for those uploads;") in doc
    from tpu_rl.scripts.pipeline.vm.phase_watch import CHECKING_WAIT_SECONDS, TOKEN_WAIT_SECONDS, UPLOADS_WAIT_SECONDS
    assert (f"`token` {hms(TOKEN_WAIT_SECONDS)} (its read and the uploads), `checking-<step>` "
            f"{hms(CHECKING_WAIT_SECONDS)} (two bucket checks and their retries, and the uploads), `boot` and `done` "
            f"{hms(UPLOADS_WAIT_SECONDS)}.") in doc


def test_a_hung_secret_read_ends_the_token_phase_at_its_bound(guest):
    code, calls, _ = guest.boot(FAKE_SECRET_HANG="1", **{jobs_vm_install.INSTALL_TIMEOUT_ENV: "1"})
    assert code == 124 and calls == []
    record = failure(guest)
    assert (record.phase, record.code) == ("token", "124")
    assert record.last_line.endswith("token: gcloud secrets versions access did not finish within its bound of 1 s "
                                     "(timeout, exit 124): reboot the VM to retry")


@pytest.mark.parametrize("agent", ["guest-agent", "google-guest-agent"])
def test_a_reboot_after_a_failed_step_is_a_new_attempt_that_the_old_failure_does_not_end(guest, agent):
    guest.boot(FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl")
    first = failure(guest)
    code, _, _ = guest.boot()  # the next boot resumes at train and finishes
    assert code == 0
    second = Attempt.parse(guest.object(PATHS.vm_attempt).read_text())
    assert second.attempt != first.attempt and second.phase == "done"
    # The second boot superseded the first one's failure record before anything else.
    record = guest.object(PATHS.vm_failure).read_text()
    assert record.startswith(f"superseded_by={second.attempt} ") and Failure.parse(record) is None
    # While the second boot's train runs: its attempt record says train, the console shows both boots up to
    # its train start, with the first boot's failure verdict before it.
    output = guest.boots[1][0]
    running = output[:output.index(" train: done")]
    console = guest.console(agent, boots=[guest.boots[0], (running, 0)], running=True)
    assert 'Script "startup-script" failed with error: exit status 1' in console
    state = VmState.of({"convert"}, Attempt(second.attempt, "train", ""), first,
                       ConsoleView.read(console, PATHS.run_name))
    assert state.failure is None and state.ended_without_record is None
    assert state.states() == {"convert": "done", "train": "running", "export": "waiting"}
    assert step_section(console, "train", PATHS.run_name)[0].endswith(f"{PATHS.run_name} train: starting")
    # Both boots ended: the second one's own end is what counts.
    assert state_of(guest, guest.console(agent)).states() == {"convert": "done", "train": "done", "export": "done"}


def test_a_boot_supersedes_the_old_failure_before_anything_else(guest):
    guest.boot(FAIL_MODULE="maxtext.trainers.post_train.rl.train_rl")
    first = failure(guest)
    guest.object(PATHS.cancel_marker).write_text("cancelled")  # this boot stops before any step
    code, calls, _ = guest.boot()
    assert code == 0 and calls == []
    attempt = Attempt.parse(guest.object(PATHS.vm_attempt).read_text())
    assert attempt.attempt != first.attempt and (attempt.phase, attempt.ended) == ("checking-train", "cancelled")
    assert Failure.parse(guest.object(PATHS.vm_failure).read_text()) is None


def test_only_the_guest_agents_own_failure_line_counts():
    run = PATHS.run_name
    lines = [f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z {run} attempt A-1: boot",
             f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z {run} train: starting",
             "startup-script: subprocess of rollout worker: exit status 1",
             'startup-script: Script "startup-script" failed with error: exit status 1 (printed by a test)',
             'Metadata key("startup-script"), command("/bin/bash"): Finished running startup scripts']
    view = ConsoleView.read("\n".join(lines) + "\n", run)
    assert view.verdict is None and view.started == ["train"]
    view = ConsoleView.read("\n".join(lines + ['Script "startup-script" failed with error: exit status 137']), run)
    assert view.verdict == "exit status 137"


def test_a_script_that_ended_without_a_record_is_an_end():
    run = PATHS.run_name
    console = (f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z {run} attempt A-1: boot\n"
               f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z {run} train: starting\n"
               'Script "startup-script" failed with error: signal: killed\nFinished running startup scripts.\n')
    state = VmState.of({"convert"}, Attempt("A-1", "train", ""), None, ConsoleView.read(console, run))
    assert state.ended_without_record == "signal: killed"
    assert state.states()["train"] == "failed"


def test_another_runs_lines_are_not_this_runs_progress():
    console = (f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z llama31-v6e8-0ld0ld0 attempt B-2: boot\n"
               f"startup-script: {jobs_vm.LOG_TAG} 2026-11-30T00:00:00Z llama31-v6e8-0ld0ld0 train: starting\n")
    view = ConsoleView.read(console, PATHS.run_name)
    assert view.attempt is None and view.started == []
    assert step_section(console, "train", PATHS.run_name) is None


def test_a_transient_bucket_error_at_boot_is_retried_and_reruns_no_finished_step(run_script, guest):
    run, marker = run_script
    guest.finished(PATHS, "convert", "train", checkpoint=50)
    code, calls, log = run(FAKE_LS_FAILURES="2", **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert calls == ["maxtext.checkpoint_conversion.to_huggingface token=yes"]
    assert "failed (try 1 of 5): ERROR: (gcloud.storage.ls) HTTPError 503" in log


def test_a_step_whose_log_upload_fails_is_still_done_with_a_warning(run_script, guest):
    run, marker = run_script
    code, _, log = run(FAKE_CP_FAIL=PATHS.step_log("train"), **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert marker("train").exists() and marker("export").exists()
    assert f"train: warning: its log did not reach {PATHS.step_log('train')} (the step is done)" in log
    assert not guest.object(PATHS.vm_failure).exists() or Failure.parse(
        guest.object(PATHS.vm_failure).read_text()) is None


def test_a_failed_check_before_a_step_is_blamed_on_that_check_not_the_step_before(run_script, guest):
    run, marker = run_script
    code, _, log = run(FAKE_LS_FAIL=PATHS.progress_marker("train"), **{RETRIES.bucket.pause.env: "0"})
    assert code == 1 and marker("convert").exists() and not marker("train").exists()
    record = failure(guest)
    assert (record.phase, record.code) == ("checking-train", "1")
    assert record.last_line.endswith(f"cannot tell whether {PATHS.progress_marker('train')} exists: stopping "
                                     "rather than rerun a finished step")
    assert "convert: failed" not in log
    # The checks are a phase of the attempt record too, so `run` bounds them (scripts/pipeline/vm/phase_watch.py).
    attempt = Attempt.parse(guest.object(PATHS.vm_attempt).read_text())
    assert (attempt.phase, attempt.ended) == ("checking-train", "exit-1")


def test_a_transient_upload_error_is_retried(run_script):
    run, marker = run_script
    code, _, log = run(FAKE_CP_FAILURES="2", **{RETRIES.bucket.pause.env: "0"})
    assert code == 0, log
    assert "failed (try 2 of 5): ERROR: (gcloud.storage.cp) HTTPError 503" in log
    assert all(marker(step).exists() for step in ("convert", "train", "export"))


def test_a_bucket_that_keeps_failing_stops_the_script_instead_of_rerunning(run_script):
    run, marker = run_script
    marker("convert").parent.mkdir(parents=True, exist_ok=True)
    marker("convert").write_text("done")
    code, calls, log = run(FAKE_LS_FAILURES="99", **{RETRIES.bucket.pause.env: "0"})
    assert code == 1 and calls == []
    assert "stopping rather than rerun a finished step" in log


def test_every_line_the_script_logs_names_its_run(run_script):
    run, _ = run_script
    code, _, _ = run()
    assert code == 0
    tagged = [line for line in run.output.splitlines() if line.startswith(jobs_vm.LOG_TAG)]
    assert tagged and all(line.split()[2] == PATHS.run_name for line in tagged)
    assert jobs_vm.ATTEMPT_LINE.match(tagged[0])


# --- cancel: the marker `tpu-rl cancel` writes ------------------------------------------------------------

def cancelled_line(log: str) -> str:
    return next(line for line in log.splitlines() if f" {jobs_vm.CANCELLED}: marker " in line)


def test_a_cancel_marker_at_boot_runs_no_step_and_says_how_to_go_on(run_script):
    run, marker = run_script
    marker("convert").parent.mkdir(parents=True)
    marker("convert").write_text("done")
    marker("cancel").parent.mkdir(parents=True)
    marker("cancel").write_text("2026-11-30T00:00:00Z")
    code, calls, log = run()
    assert code == 0, log
    assert calls == []
    assert "convert: already done" in log  # the check comes before a step would start
    line = cancelled_line(log)
    assert line.startswith(f"{jobs_vm.LOG_TAG} ")
    assert line.endswith(f" cancelled: marker {PATHS.cancel_marker} exists; delete it and reboot the VM to go on")
    assert "train: starting" not in log and "all steps done" not in log


def test_a_cancel_while_train_runs_stops_it_without_its_marker(run_script):
    run, marker = run_script
    train = "maxtext.trainers.post_train.rl.train_rl"
    started = time.monotonic()
    code, calls, log = run(CANCEL_MODULE=train, CANCEL_FILE=str(marker("cancel")),
                           **{jobs_vm.CANCEL_POLL_ENV: "1"})
    assert time.monotonic() - started < 30, "the watcher did not stop the step"  # the stand-in sleeps 50 s
    assert code == 0, log  # a cancel, not a crash: the guest agent reports exit status 0
    assert calls == ["maxtext.checkpoint_conversion.to_maxtext token=yes", f"{train} token=yes",
                     f"{train} got SIGTERM"]
    assert marker("convert").is_file() and not marker("train").exists() and not marker("export").exists()
    assert "stopping the running step (SIGTERM to MaxText)" in cancelled_line(log)
    assert f"train: cancelled (marker {PATHS.cancel_marker}); its outputs so far are kept" in log
    assert "export: starting" not in log
    # The console the CLI reads shows train started and the script ended well: not a failure.
    console = Guest.console(None, boots=[(run.output, code)])
    assert VmState.of({"convert"}, None, None, ConsoleView.read(console, PATHS.run_name), cancelled=True).states() \
        == {"convert": "done", "train": "cancelled", "export": "cancelled"}


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_a_normal_run_leaves_no_watcher_behind(run_script, tmp_path):
    run, _ = run_script
    poll = "41.5"  # an odd interval, so the watcher's sleep is told apart from any other
    started = time.monotonic()
    code, _, log = run(**{jobs_vm.CANCEL_POLL_ENV: poll})
    assert code == 0, log
    # The run returns long before a round of the watcher ends: nothing kept the script's output open.
    assert time.monotonic() - started < 30
    assert "all steps done" in log
    # The watcher is a subshell of the script (its command line), its nap `sleep 41.5`: both are gone.
    assert _processes_mentioning(str(tmp_path / "startup.sh")) == []
    assert _processes_mentioning(f"sleep {poll}") == []
