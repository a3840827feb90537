"""Experiments against the local peers (fake Kubernetes API, GCS emulator, Secret Manager): a changed
setting trains a new run that shares only the conversion, the same settings resume, --set is checked
before anything happens, a JobSet with another spec under the run's name is never reused, and run.json
records each run."""

from __future__ import annotations

import re
import sys

from typer.testing import CliRunner

from cli_helpers import error_line, names, plan_success, record, run_of, train_script
from contracts.tunix_log import train_step_line
from tpu_rl.jobs import render_manifests
from peers.fixtures import peer_settings, put_step_output, spec_of
from tpu_rl.recipes.driver.runtime import BUCKET_PREFIX
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def tpu_rl(*args: str):
    return runner.invoke(app, list(args))


def test_a_changed_setting_trains_a_new_run_that_shares_only_the_conversion(cloud):
    first, first_paths = run_of()
    second, second_paths = run_of("learning_rate=1e-5")
    plan_success(cloud, first)
    plan_success(cloud, second)
    assert tpu_rl("run", RECIPE).exit_code == 0

    result = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5")
    assert result.exit_code == 0, result.output
    assert f"run {second_paths.run_name}; plan: convert skip, train submit, export submit" in result.output
    created = cloud["kube"].created
    assert created == [names(first)[step] for step in ("convert", "train", "export")] + [
        names(second)["train"], names(second)["export"]]
    script = train_script(cloud["kube"], names(second)["train"])
    assert "learning_rate=1e-5" in script and "learning_rate=2e-5" not in script
    assert f"load_parameters_path={first_paths.converted_items}" in script  # the first run's conversion
    assert f"run_name={second_paths.run_name}" in script and second_paths.run_name != first_paths.run_name
    # The first run's model is still there, next to the second's.
    assert record(cloud["gcs"], first_paths)["status"] == record(cloud["gcs"], second_paths)["status"] == "succeeded"
    assert not cloud["kube"].deleted


def test_running_again_with_the_same_settings_resumes_the_same_run(cloud):
    recipe, _ = run_of("learning_rate=1e-5")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(names(recipe)["train"], outcome="fail")
    assert tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5").exit_code == ExitCode.JOB_FAILED
    plan_success(cloud, recipe)
    again = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5", "--replace")
    assert again.exit_code == 0, again.output
    # the same JobSet name, so train_rl restores the checkpoints under the same run directory
    assert cloud["kube"].deleted == [names(recipe)["train"]]
    assert cloud["kube"].created == [names(recipe)["train"], names(recipe)["train"], names(recipe)["export"]]
    third = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5")
    assert third.exit_code == 0 and third.output.count("skipping") == 3 and len(cloud["kube"].created) == 3


def test_set_changes_the_step_count_that_progress_and_export_use(cloud):
    recipe, paths = run_of("num_batches=20")
    put_step_output(cloud["gcs"], recipe, "convert")
    plan_success(cloud, recipe, ticks=3, logs=f"loading\n{train_step_line(12, 0.5)}\n")
    result = tpu_rl("run", RECIPE, "--set", "num_batches=20", "--steps", "train,export")
    assert result.exit_code == 0, result.output
    assert "train: step 12/20" in result.output
    export = cloud["kube"].jobsets[names(recipe)["export"]]
    script = export["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert f"load_parameters_path={paths.actor_checkpoints}20/model_params/" in script


def test_an_unknown_set_key_is_refused_before_any_cloud_call(cloud):
    result = tpu_rl("run", RECIPE, "--set", "learning_rat=1e-5")
    assert result.exit_code == ExitCode.BAD_INPUT
    line = error_line(result)
    assert line.startswith("error: --set learning_rat: not a key MaxText 0.2.4's train_rl accepts; closest: "
                           "learning_rate")
    written = [blob.name for blob in cloud["gcs"].list_blobs(peer_settings().gcs_bucket)
               if not blob.name.startswith(f"{BUCKET_PREFIX}/wheels/")]  # what an earlier run staged
    assert cloud["kube"].requests == [] and written == []


def test_a_jobset_of_the_run_with_another_spec_stops_the_run_naming_the_field(cloud):
    old, _ = run_of(run="exp1")  # the recipe's learning_rate=2e-5
    new, new_paths = run_of("learning_rate=1e-5", run="exp1")
    put_step_output(cloud["gcs"], new, "convert")
    cloud["kube"].put_jobset(render_manifests(spec_of(old), peer_settings())["train"], "failed")
    cloud["kube"].requests.clear()
    result = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5", "--run", "exp1")
    assert result.exit_code == ExitCode.BAD_INPUT
    line = error_line(result)
    assert line.startswith("error: JobSet exp1-train (failed) was submitted with another spec than this run's (")
    assert re.search(r"spec\.replicatedJobs\[pathways-head\]\S*containers\[workload-container\]\.command: "
                     r"learning_rate 2e-5 → 1e-5", line), line
    assert line.endswith("rerun with --replace to delete it and submit the new spec, or choose another run name "
                         "with --run NAME")
    assert cloud["kube"].created == [] and cloud["kube"].deleted == []
    assert record(cloud["gcs"], new_paths) is None  # nothing written before the decision

    plan_success(cloud, new)
    replaced = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5", "--run", "exp1", "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert cloud["kube"].deleted == ["exp1-train"] and cloud["kube"].created == ["exp1-train", "exp1-export"]
    assert "learning_rate=1e-5" in train_script(cloud["kube"], "exp1-train")


def test_a_running_jobset_with_the_same_spec_is_reattached_although_the_cluster_changed_its_spec(cloud):
    recipe, _ = run_of()
    put_step_output(cloud["gcs"], recipe, "convert")
    # Kueue holds it (the stored spec gets suspend: true); it runs on past the looks of `run` and its driver
    plan_success(cloud, recipe, admitted_after=2, ticks=6)
    cloud["kube"].put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == 0, result.output
    assert "train: JobSet" in result.output and "reattaching to it" in result.output
    assert cloud["kube"].created == [names(recipe)["export"]] and cloud["kube"].deleted == []


def test_the_same_run_name_with_other_settings_is_refused_by_its_record(cloud):
    first, paths = run_of(run="exp1")
    plan_success(cloud, first)
    assert tpu_rl("run", RECIPE, "--run", "exp1").exit_code == 0
    cloud["kube"].jobsets.clear()  # the JobSets are gone after their TTL; the record stays in the bucket
    result = tpu_rl("run", RECIPE, "--run", "exp1", "--set", "learning_rate=1e-5")
    assert result.exit_code == ExitCode.BAD_INPUT
    line = error_line(result)
    assert line.startswith("error: run 'exp1' was started with other settings (overrides: ")
    assert "learning_rate 2e-5 → 1e-5" in line and paths.run_record in line and "--run NAME" in line
    assert len(cloud["kube"].created) == 3


def test_run_json_records_the_configuration_versions_command_and_each_step(cloud, monkeypatch):
    argv = ["tpu-rl", "run", RECIPE, "--set", "learning_rate=1e-5"]
    monkeypatch.setattr(sys, "argv", argv)  # what the console script sees (CliRunner leaves pytest's)
    recipe, paths = run_of("learning_rate=1e-5")
    seen_during_train = {}

    def finish_train():
        seen_during_train.update(record(cloud["gcs"], paths))
        put_step_output(cloud["gcs"], recipe, "train")

    plan_success(cloud, recipe)
    cloud["kube"].plan(names(recipe)["train"], on_success=finish_train)
    result = tpu_rl("run", RECIPE, "--set", "learning_rate=1e-5")
    assert result.exit_code == 0, result.output

    during = seen_during_train["steps"]
    assert (during["convert"]["status"], during["train"]["status"], during["export"]["status"]) == (
        "succeeded", "running", "waiting")
    assert seen_during_train["status"] == "running" and seen_during_train["ended"] is None

    data = record(cloud["gcs"], paths)
    assert data["run"] == paths.run_name and data["recipe"] == RECIPE and data["status"] == "succeeded"
    assert data["overrides"]["set"] == ["learning_rate=1e-5"]
    assert "learning_rate=2e-5" in data["overrides"]["recipe"] and "learning_rate=1e-5" in data["overrides"]["train"]
    assert data["train_steps"] == 50 and data["settings"]["gcs_bucket"] == peer_settings().gcs_bucket
    versions = data["versions"]
    assert (versions["maxtext"], versions["pathways_tag"]) == ("0.2.4", recipe.recipe.pathways_images.tag)
    assert versions["image"].endswith("tpu_post_training:0.2.4")
    assert re.fullmatch(r"[0-9a-f]{40}", versions["git_commit"])
    assert data["command"] == argv
    assert data["started"] <= data["ended"]
    for step in ("convert", "train", "export"):
        entry = data["steps"][step]
        assert (entry["action"], entry["status"], entry["jobset"]) == ("submit", "succeeded", names(recipe)[step])
        assert entry["started"] <= entry["ended"] and "capacity" in entry


def test_a_failed_step_is_recorded_and_the_next_invocation_keeps_the_earlier_one(cloud):
    recipe, paths = run_of()
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(names(recipe)["train"], outcome="oom")
    assert tpu_rl("run", RECIPE).exit_code == ExitCode.JOB_FAILED
    data = record(cloud["gcs"], paths)
    assert data["status"] == "failed" and "step train failed" in data["error"]
    assert (data["steps"]["convert"]["status"], data["steps"]["train"]["status"]) == ("verified", "failed")
    plan_success(cloud, recipe)
    assert tpu_rl("run", RECIPE, "--replace").exit_code == 0
    data = record(cloud["gcs"], paths)
    assert data["status"] == "succeeded" and [earlier["status"] for earlier in data["earlier"]] == ["failed"]


def test_status_and_logs_find_the_run_that_set_and_run_name(cloud):
    recipe, _ = run_of("learning_rate=1e-5", run="exp1")
    cloud["kube"].plan("exp1-train", outcome="hang", logs="the exp1 head\n")
    cloud["kube"].put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    status = tpu_rl("status", RECIPE, "--set", "learning_rate=1e-5", "--run", "exp1")
    assert status.exit_code == 0, status.output
    assert status.output.startswith(f"{RECIPE}: run exp1, JobSets exp1-<step>")
    logs = tpu_rl("logs", RECIPE, "train", "--run", "exp1", "--set", "learning_rate=1e-5")
    assert logs.exit_code == 0 and logs.output.splitlines() == ["the exp1 head"]


def test_the_vm_recipe_refuses_set_and_run(settings_env, gcs, google):
    for extra in (["--set", "learning_rate=1e-6"], ["--run", "exp1"]):
        result = tpu_rl("run", "llama31-v6e8", *extra)
        assert result.exit_code == ExitCode.BAD_INPUT
        assert "--set and --run apply to GKE recipes" in error_line(result)
    assert google.requests == [] and list(gcs.list_blobs(peer_settings().gcs_bucket)) == []


def test_render_writes_the_run_that_set_and_run_name(settings_env, tmp_path):
    result = tpu_rl("render", RECIPE, "--set", "learning_rate=1e-5", "--run", "exp1", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "run exp1" in result.output
    train = (tmp_path / "train.yaml").read_text()
    assert "name: exp1-train" in train and "learning_rate=1e-5" in train and "run_name=exp1" in train
