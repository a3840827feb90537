"""The rest of the loop against the local peers: `run --dry-run` (the plan and the JobSets, nothing submitted
or written), `render --out -` (one YAML stream for `kubectl apply -f -`), `status --json`, and what the end
of a run says to do next."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from jobs import render_manifests, render_startup_script
from jobs.paths import ArtifactPaths, split_gs_url
from peers.fixtures import SETTINGS, deploy_vm, jobset_of, peer_settings, put_step_output
from recipes import get_recipe, load_settings
from recipes.cost import hourly_estimate
from scripts.cli import app
from scripts.outcome import ExitCode

RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"
runner = CliRunner()


def paths(recipe_name: str = RECIPE) -> ArtifactPaths:
    return ArtifactPaths(get_recipe(recipe_name), peer_settings())


def record_exists(gcs, recipe_name: str = RECIPE) -> bool:
    bucket, name = split_gs_url(paths(recipe_name).run_record)
    return gcs.bucket(bucket).blob(name).exists()


def test_dry_run_prints_the_plan_and_the_jobsets_and_submits_nothing(cloud):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    head, _, stream = result.output.partition("---\n")
    assert head.splitlines() == [
        f"dry run of run {paths().run_name}: nothing is submitted, and no Secret or run.json is written",
        "  convert: skip: output verified",
        "  train: submit: no output yet",
        "  export: submit: no output yet",
        "(export is shown at the computed step 50, an upper bound: run renders it with the newest finished step "
        "once training ended)",
        f"the JobSets it would submit ({jobset_of(RECIPE, 'train')}, {jobset_of(RECIPE, 'export')}):"]
    manifests = render_manifests(recipe, peer_settings())
    assert list(yaml.safe_load_all("---\n" + stream)) == [manifests["train"], manifests["export"]]
    kube = cloud["kube"]
    assert kube.created == [] and kube.secrets == {} and {method for method, _, _ in kube.requests} == {"GET"}
    assert not record_exists(cloud["gcs"])
    assert cloud["google"].sent("GET", ":access") == []  # the token is not even read


def test_dry_run_refuses_what_run_would_refuse(cloud):
    cloud["kube"].put_jobset(render_manifests(get_recipe(RECIPE), peer_settings())["convert"], "failed")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "rerun with --replace to delete it and submit convert again" in result.output
    assert cloud["kube"].deleted == [] and cloud["kube"].created == []


def test_dry_run_on_the_vm_says_which_steps_the_startup_script_has_left(settings_env, gcs, google):
    deploy_vm(google, SETTINGS)
    put_step_output(gcs, get_recipe(VM_RECIPE), "convert")
    result = runner.invoke(app, ["run", VM_RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == ["  convert: skip (output verified)",
                                              "  train: startup script (output missing)",
                                              "  export: startup script (output missing)"]
    assert not any("serialPort" in path for _, path, _ in google.requests)
    assert not record_exists(gcs, VM_RECIPE)


def test_render_to_stdout_is_one_yaml_stream_kubectl_can_apply(settings_env):
    result = runner.invoke(app, ["render", RECIPE, "--out", "-", "--run", "exp1"])
    assert result.exit_code == 0, result.output
    documents = result.stdout.split("---\n")
    assert documents[0] == ""  # every document starts with its own separator line
    recipe = get_recipe(RECIPE).model_copy(update={"run": "exp1"})
    manifests = render_manifests(load_settings().recipe(recipe), load_settings())
    assert [yaml.safe_load(document) for document in documents[1:]] == list(manifests.values())
    assert "rendered convert, train, export for qwen3-v6e32, run exp1" in result.stderr


def test_render_to_stdout_gives_the_vm_startup_script(settings_env):
    result = runner.invoke(app, ["render", VM_RECIPE, "--out", "-"])
    assert result.exit_code == 0, result.output
    settings = load_settings()
    assert result.stdout == render_startup_script(settings.recipe(get_recipe(VM_RECIPE)), settings)


def test_status_json_has_each_steps_cells(cloud):
    recipe = get_recipe(RECIPE)
    manifests = render_manifests(recipe, peer_settings())
    cloud["kube"].put_jobset(manifests["convert"], "succeeded")
    put_step_output(cloud["gcs"], recipe, "convert")
    result = runner.invoke(app, ["status", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["recipe"], data["run"], data["bucket"], data["note"]) == (
        RECIPE, paths().run_name, "gs://rl-test-artifacts", None)
    steps = {row["step"]: row for row in data["steps"]}
    assert list(steps) == ["convert", "train", "export"]
    assert (steps["convert"]["state"], steps["convert"]["pods"], steps["convert"]["output"]) == (
        "succeeded", "done", "verified")
    assert steps["train"]["state"] == "absent" and steps["train"]["output"].startswith("missing: ")


def test_the_end_of_a_run_says_where_the_model_is_and_what_to_do_next(cloud):
    recipe = get_recipe(RECIPE)
    for step in ("convert", "train", "export"):
        cloud["kube"].plan(jobset_of(RECIPE, step), on_success=lambda step=step: put_step_output(cloud["gcs"], recipe, step))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    run, export = paths().run_name, paths().hf_export
    assert export == f"gs://rl-test-artifacts/qwen3-30b-a3b/hf-trained/{run}/"
    lines = result.output.splitlines()
    assert lines[lines.index("next:"):] == [
        "next:",
        f"  the Hugging Face model is in {export}; download it with",
        f"    `gcloud storage cp -r {export} ./{run}`",
        f"  its curves: `tpu-rl metrics {RECIPE} --run {run} --png {run}.png`",
        f"  when you are done, `npx cdktf destroy {RECIPE}`: the stack costs {hourly_estimate(recipe).summary()} "
        "until then (estimates from list prices)"]
