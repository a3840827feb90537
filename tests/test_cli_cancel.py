"""`tpu-rl cancel` against the local peers: runs started (and left running) by `tpu-rl run` on the fake
Kubernetes API, their records in the GCS emulator. Cancel deletes only the run's own running JobSets, the
shared conversion only when no other run waits on it, asks first unless --yes, and records it in run.json."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli_helpers import ctrl_c_at_the_prompt, error_line, interrupt, left_running, names, record, run_of, session_hook
from peers.fixtures import SETTINGS, deploy_vm, peer_settings, put_step_output, spec_of
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm import LOG_TAG, STARTING
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud import gcs as bucket

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def test_cancel_deletes_only_the_runs_running_jobsets_and_records_it(cloud, monkeypatch):
    first, first_paths = run_of()
    second, second_paths = run_of("learning_rate=1e-5")
    put_step_output(cloud["gcs"], first, "convert")
    for recipe in (first, second):
        cloud["kube"].plan(names(recipe)["train"], outcome="hang")
    left_running(cloud, monkeypatch)
    left_running(cloud, monkeypatch, "--set", "learning_rate=1e-5")
    convert = names(first)["convert"]
    assert convert not in cloud["kube"].jobsets  # skipped: its output was there

    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    train = names(first)["train"]
    assert cloud["kube"].deleted == [train]
    assert names(second)["train"] in cloud["kube"].jobsets  # another run's JobSet is never touched
    assert f"deleted JobSet {train}" in result.output
    assert f"cancelled run {first_paths.run_name}: outputs in gs://{SETTINGS['GCS_BUCKET']} are kept" in result.output
    data = record(cloud["gcs"], first_paths)
    assert data["status"] == "cancelled" and data["steps"]["train"]["status"] == "cancelled"
    assert data["steps"]["convert"]["status"] == "verified"
    assert [entry["jobsets"] for entry in data["cancellations"]] == [[train]]
    assert record(cloud["gcs"], second_paths)["status"] == "interrupted"

    again = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert again.exit_code == 0 and again.output.startswith(f"nothing to cancel: no JobSet of run {first_paths.run_name}")


def test_cancel_without_a_terminal_or_yes_deletes_nothing(cloud, monkeypatch):
    recipe, _ = run_of()
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(names(recipe)["train"], outcome="hang")
    left_running(cloud, monkeypatch)
    result = runner.invoke(app, ["cancel", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert error_line(result) == (f"error: cancel would delete JobSet(s) {names(recipe)['train']} of run "
                                  f"{names(recipe)['train'].removesuffix('-train')}: rerun with --yes to confirm "
                                  "(there is no terminal to ask in)")
    assert cloud["kube"].deleted == []


@pytest.mark.parametrize("answer", [True, False])
def test_cancel_asks_first(cloud, monkeypatch, answer):
    recipe, paths = run_of(run="exp1")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan("exp1-train", outcome="hang")
    left_running(cloud, monkeypatch, "--run", "exp1")
    questions = []
    session_hook(monkeypatch, confirm=lambda question: questions.append(question) or answer)
    result = runner.invoke(app, ["cancel", RECIPE, "train", "--run", "exp1"])
    assert result.exit_code == 0, result.output
    assert questions == [f"Delete JobSet(s) exp1-train of train of run exp1 (outputs in gs://{SETTINGS['GCS_BUCKET']} "
                         "are kept)?"]
    assert cloud["kube"].deleted == (["exp1-train"] if answer else [])
    assert record(cloud["gcs"], paths)["status"] == ("cancelled" if answer else "interrupted")


def test_the_conversion_is_cancelled_only_when_no_other_run_waits_on_it(cloud, monkeypatch):
    first, first_paths = run_of()
    second, second_paths = run_of("learning_rate=1e-5")
    convert = names(first)["convert"]
    assert names(second)["convert"] == convert  # shared
    cloud["kube"].plan(convert, outcome="hang")
    left_running(cloud, monkeypatch)
    left_running(cloud, monkeypatch, "--set", "learning_rate=1e-5")  # reattaches to the same conversion

    kept = runner.invoke(app, ["cancel", RECIPE, "convert", "--yes"])
    assert kept.exit_code == 0, kept.output
    assert kept.output.splitlines()[0] == (f"kept JobSet {convert}: the conversion is shared, and 1 run "
                                           f"({second_paths.run_name}) waits on it too")
    assert cloud["kube"].deleted == []

    second_record = record(cloud["gcs"], second_paths)
    second_record["steps"]["convert"]["status"] = "failed"  # the other run no longer waits on it
    bucket.write_json(cloud["gcs"], second_paths.run_record, second_record)
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert cloud["kube"].deleted == [convert]
    assert record(cloud["gcs"], first_paths)["steps"]["convert"]["status"] == "cancelled"


def test_the_conversion_of_another_run_is_not_this_runs_to_cancel(cloud, monkeypatch):
    first, _ = run_of()
    convert = names(first)["convert"]
    cloud["kube"].plan(convert, outcome="hang")
    left_running(cloud, monkeypatch)
    _, exp2 = run_of(run="exp2")  # a run that exists (cancel refuses a --run that names none) but never waited
    bucket.write_json(cloud["gcs"], exp2.run_record, {"recipe": RECIPE, "status": "succeeded", "steps": {}})
    result = runner.invoke(app, ["cancel", RECIPE, "--run", "exp2", "--yes"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith(f"kept JobSet {convert}: the conversion is running, but not for "
                                                    "run exp2")
    assert cloud["kube"].deleted == []


def test_a_run_attached_to_a_cancelled_jobset_says_it_was_cancelled(cloud, monkeypatch):
    from tpu_rl.jobs.driver import driver_name
    from tpu_rl.scripts.cloud.clients import Clients
    from tpu_rl.scripts.pipeline.gke.cancel import cancel_gke
    from tpu_rl.scripts.pipeline.session import Session

    recipe, paths = run_of()
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(names(recipe)["train"], outcome="hang")
    polls = []

    def cancel_on_the_second_poll(seconds):
        polls.append(seconds)
        if len(polls) == 2:  # someone runs `tpu-rl cancel RECIPE --yes` meanwhile
            cancel_gke(Session(spec_of(recipe), peer_settings(), Clients(peer_settings())), None, True)

    session_hook(monkeypatch, sleep=cancel_on_the_second_poll)
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    # cancel deleted the run's driver first: the attached `run` says so (the driver's own line, for the
    # JobSet it saw deleted, may or may not come before: a real driver is stopped before it looks again)
    assert error_line(result).startswith(f"error: run {paths.run_name} was cancelled: `tpu-rl cancel` deleted "
                                         f"its driver Job {driver_name(spec_of(recipe))} at "), result.output
    assert record(cloud["gcs"], paths)["status"] == "cancelled"  # not overwritten by the run that ended


# --- the VM recipe: cancel writes the run's cancel marker, which the startup script reads (jobs/vm.py) ------
VM_RECIPE = "llama31-v6e8"
VM = (SETTINGS["ZONE"], "rl-test-vm")
VM_PATHS = ArtifactPaths(spec_of(get_recipe(VM_RECIPE)), peer_settings())
REBOOT = (f"`gcloud compute ssh rl-test-vm --zone={SETTINGS['ZONE']} --project={SETTINGS['PROJECT']} "
          "--tunnel-through-iap -- sudo reboot`")


def vm_left_running(google, gcs, monkeypatch) -> None:
    """`tpu-rl run` of the VM recipe, interrupted while the startup script runs convert."""
    deploy_vm(google, SETTINGS)
    google.serial[VM] = f"startup-script: {LOG_TAG} 2026-11-30T00:00:00Z {VM_PATHS.run_name} convert: {STARTING}\n"
    with monkeypatch.context() as patch:
        session_hook(patch, sleep=interrupt)
        result = runner.invoke(app, ["run", VM_RECIPE])
    assert result.exit_code == ExitCode.INTERRUPTED, result.output
    assert record(gcs, VM_PATHS)["status"] == "interrupted"


def marker_text(gcs) -> str | None:
    return bucket.read_text(gcs, VM_PATHS.cancel_marker)


def test_cancel_on_the_vm_recipe_writes_the_marker_and_records_it(settings_env, gcs, google, monkeypatch):
    vm_left_running(google, gcs, monkeypatch)
    result = runner.invoke(app, ["cancel", VM_RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert marker_text(gcs)  # the time it was written
    text = " ".join(result.output.split())
    assert f"wrote {VM_PATHS.cancel_marker}" in text
    assert (f"cancelled run {VM_PATHS.run_name}: the startup script of TPU VM rl-test-vm stops step convert within "
            f"30 s (SIGTERM to MaxText) and starts no further step; outputs in gs://{SETTINGS['GCS_BUCKET']} are "
            "kept") in text
    assert f"to go on while it is up, `gcloud storage rm {VM_PATHS.cancel_marker}` and reboot the VM ({REBOOT})" in text
    data = record(gcs, VM_PATHS)
    assert data["status"] == "cancelled"
    assert {step: entry["status"] for step, entry in data["steps"].items()} == {
        "convert": "cancelled", "train": "cancelled", "export": "cancelled"}
    assert [entry["marker"] for entry in data["cancellations"]] == [VM_PATHS.cancel_marker]
    assert {method for method, _, _ in google.requests} == {"GET"}  # the VM is not stopped: it keeps running

    status = runner.invoke(app, ["status", VM_RECIPE])
    assert status.exit_code == 0, status.output
    assert [[word.rstrip(",") for word in line.split()[:2]] for line in status.output.splitlines()
            if line.split()[:1] in (["convert"], ["train"], ["export"])] == [
        ["convert", "cancelled"], ["train", "cancelled"], ["export", "cancelled"]]
    assert f"was cancelled at {marker_text(gcs).strip()}" in " ".join(status.output.split())

    again = runner.invoke(app, ["cancel", VM_RECIPE, "--yes"])
    assert again.exit_code == 0 and again.output.startswith(f"nothing to cancel: run {VM_PATHS.run_name} was "
                                                            "cancelled at ")
    rerun = runner.invoke(app, ["run", VM_RECIPE])
    assert rerun.exit_code == ExitCode.BAD_INPUT
    assert f"`gcloud storage rm {VM_PATHS.cancel_marker}`" in error_line(rerun)


def test_cancel_on_the_vm_recipe_without_a_terminal_or_yes_writes_nothing(settings_env, gcs, google, monkeypatch):
    vm_left_running(google, gcs, monkeypatch)
    result = runner.invoke(app, ["cancel", VM_RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert error_line(result) == (f"error: cancel would stop the startup script of TPU VM rl-test-vm at step convert "
                                  f"of run {VM_PATHS.run_name}: rerun with --yes to confirm (there is no terminal to "
                                  "ask in)")
    assert marker_text(gcs) is None
    assert record(gcs, VM_PATHS)["status"] == "interrupted"


def test_a_vm_run_attached_when_it_is_cancelled_says_so(settings_env, gcs, google, monkeypatch):
    from tpu_rl.scripts.cloud.clients import Clients
    from tpu_rl.scripts.pipeline.session import Session
    from tpu_rl.scripts.pipeline.vm.run import cancel_vm

    deploy_vm(google, SETTINGS)
    google.serial[VM] = f"startup-script: {LOG_TAG} 2026-11-30T00:00:00Z {VM_PATHS.run_name} convert: {STARTING}\n"

    def cancel_meanwhile(seconds):
        cancel_vm(Session(spec_of(get_recipe(VM_RECIPE)), peer_settings(), Clients(peer_settings())), None, True)

    session_hook(monkeypatch, sleep=cancel_meanwhile)
    result = runner.invoke(app, ["run", VM_RECIPE])
    assert result.exit_code == ExitCode.JOB_FAILED
    assert error_line(result).startswith(f"error: step convert was cancelled: `tpu-rl cancel` wrote "
                                         f"{VM_PATHS.cancel_marker} at ")
    assert record(gcs, VM_PATHS)["status"] == "cancelled"  # not overwritten by the run that ended


def test_cancel_of_a_vm_step_not_reached_is_refused(settings_env, gcs, google, monkeypatch):
    vm_left_running(google, gcs, monkeypatch)
    result = runner.invoke(app, ["cancel", VM_RECIPE, "export", "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "is not past convert: cancel stops it there, so give STEP convert or none" in error_line(result)
    assert marker_text(gcs) is None


def test_ctrl_c_at_the_cancel_prompt_exits_130_and_deletes_nothing(cloud, monkeypatch):
    recipe, paths = run_of()
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(names(recipe)["train"], outcome="hang")
    left_running(cloud, monkeypatch)
    asked, rest, code = ctrl_c_at_the_prompt(["cancel", RECIPE])
    assert (f"Delete JobSet(s) {names(recipe)['train']} of run {paths.run_name} (outputs in gs://"
            f"{SETTINGS['GCS_BUCKET']} are kept)? [y/N]") in " ".join(asked.split()), asked  # wrapped to 80 columns
    assert all(len(line) <= 80 for line in asked.splitlines()), asked  # a real terminal's width (issue 37)
    assert code == ExitCode.INTERRUPTED, asked + rest
    assert "error: interrupted at the prompt; nothing was submitted or deleted" in rest
    assert cloud["kube"].deleted == []
    assert record(cloud["gcs"], paths)["status"] == "interrupted"  # the run's, from before: nothing recorded
