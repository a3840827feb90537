"""The rest of the loop against the local peers: `run --dry-run` (the plan and the JobSets, nothing submitted
or written), `render --out -` (one YAML stream for `kubectl apply -f -`), `status --json`, and what the end
of a run says to do next."""

from __future__ import annotations

import json
import subprocess

import yaml
from typer.testing import CliRunner

from tpu_rl.jobs import render_manifests, render_startup_script
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.fixtures import SETTINGS, deploy_vm, jobset_of, peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe, load_settings
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"
runner = CliRunner()


def paths(recipe_name: str = RECIPE) -> ArtifactPaths:
    return ArtifactPaths(spec_of(get_recipe(recipe_name)), peer_settings())


def record_exists(gcs, recipe_name: str = RECIPE) -> bool:
    bucket, name = split_gs_url(paths(recipe_name).run_record)
    return gcs.bucket(bucket).blob(name).exists()


def test_dry_run_prints_the_plan_with_each_steps_time_and_cost_and_submits_nothing(cloud, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    # The README's table of one run (durations_minutes x the hourly estimate, reservation): train 90 min
    # $95.64, export 40 min $42.51; together 130 min, $138.15.
    assert result.output.splitlines() == [
        f"dry run of run {paths().run_name}: nothing is submitted or written",
        "  convert: skip: output verified",
        "  train: submit: no output yet; about 90 min, $95.64",
        "  export: submit: no output yet; about 40 min, $42.51",
        "(export at step 50 is an upper bound: run exports the step training reached)",
        "expected: about 130 min, $138.15 for train, export (estimates from list prices)",
        "assumed: train up to 50 steps at 1.55 min each (the recipe's 90 min for its 50",
        "steps, less its evaluation), and evaluation 12 min",
        # The driver: 0.25 of the 4 vCPUs (1 of 16 GB) of the always-on e2-standard-4 system node.
        "driver: 6% of the e2-standard-4 system node, which bills anyway: no extra cost",
        "the JobSets it would submit (--show-manifests prints them):",
        f"  {jobset_of(RECIPE, 'train')}",
        f"  {jobset_of(RECIPE, 'export')}",
        # the fit check's verdict (docs/fit.md's table: 18.4 of 31.2 GiB)
        "fits: 18.4 GiB of a v6e-32 chip's 31.2 GiB at its peak (the train step), 41%",
        "free (the margin: 10%)"]
    assert max(len(line) for line in result.output.splitlines()) <= 80
    kube = cloud["kube"]
    assert kube.created == [] and kube.secrets == {} and {method for method, _, _ in kube.requests} == {"GET"}
    assert not record_exists(cloud["gcs"])
    assert cloud["google"].sent("GET", ":access") == []  # the token is not even read


def test_dry_run_prints_the_jobsets_only_with_show_manifests(cloud):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--show-manifests"])
    assert result.exit_code == 0, result.output
    head, _, stream = result.output.partition("---\n")
    assert head.splitlines()[-3:] == ["the JobSets it would submit:", f"  {jobset_of(RECIPE, 'train')}",
                                      f"  {jobset_of(RECIPE, 'export')}"]
    manifests = render_manifests(spec_of(recipe), peer_settings())
    assert list(yaml.safe_load_all("---\n" + stream)) == [manifests["train"], manifests["export"]]
    assert cloud["kube"].created == [] and cloud["kube"].secrets == {}


def test_dry_run_shows_the_manifest_a_replace_submits_not_the_pinned_one_on_the_cluster(cloud):
    """An earlier `run` moved train on to spot (its JobSet pins it there) and it failed: `run --replace`
    submits it again as rendered, from the first mode, and --show-manifests prints that."""
    from tpu_rl.jobs.k8s import pin_capacity

    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    manifests = render_manifests(spec_of(recipe), peer_settings())
    cloud["kube"].put_jobset(pin_capacity(manifests["train"], "spot", None), "failed")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--show-manifests", "--replace"])
    assert result.exit_code == 0, result.output
    assert "  train: replace: " in result.output, result.output
    _, _, stream = result.output.partition("---\n")
    assert list(yaml.safe_load_all("---\n" + stream)) == [manifests["train"], manifests["export"]]
    assert cloud["kube"].created == [] and cloud["kube"].deleted == []


def test_show_manifests_without_dry_run_is_refused_before_anything_is_read(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--show-manifests"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.output.splitlines() == ["error: --show-manifests prints what a dry run would submit: add "
                                          f"--dry-run, or see the manifests with `tpu-rl render {RECIPE} --out -`"]
    assert cloud["kube"].requests == []


def test_dry_run_refuses_what_run_would_refuse(cloud):
    cloud["kube"].put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["convert"], "failed")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "rerun with --replace to delete it and submit convert again" in result.output
    assert cloud["kube"].deleted == [] and cloud["kube"].created == []


def test_dry_run_on_the_vm_says_which_steps_the_startup_script_has_left(settings_env, gcs, google):
    deploy_vm(google, SETTINGS)
    put_step_output(gcs, get_recipe(VM_RECIPE), "convert")
    result = runner.invoke(app, ["run", VM_RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    # The README's table for the VM (reservation): train 10 min $2.52, export 5 min $1.26.
    assert result.output.splitlines() == [
        f"dry run of run {paths(VM_RECIPE).run_name}: nothing is started or written",
        "the startup script of TPU VM rl-test-vm (deployed with the stack) runs:",
        "  convert: skip (output verified)",
        "  train: startup script (output missing); about 10 min, $2.52",
        "  export: startup script (output missing); about 5 min, $1.26",
        "expected: about 15 min, $3.78 for train, export (estimates from list prices)",
        "assumed: train up to 50 steps at 0.17 min each (the recipe's 10 min for its 50 steps, less its "
        "evaluation), "
        "and evaluation 2 min",
        "after the run: TPU VM rl-test-vm stops itself once its startup script verified every output "
        "(VM_AFTER_RUN=stop; VM_AFTER_RUN=keep keeps it up): its VM charges end, only its boot disk bills until "
        f"`npx cdktf destroy {VM_RECIPE}`; the reservation's 8 chips bill $15.12/h with or without the stack, "
        "until the reservation ends: it may be shared or tied to a commitment, so only its owner can end it "
        "(tpu-rl never deletes it)",  # the reservation bills on: 8 chips at recipes/costs/prices.toml's $1.89
        "fits: 27.9 GiB of a v6e-8 chip's 31.2 GiB at its peak (the train step), 11% free (the margin: 10%)"]
    assert not any("serialPort" in path for _, path, _ in google.requests)
    assert not record_exists(gcs, VM_RECIPE)


def test_render_to_stdout_is_one_yaml_stream_kubectl_can_apply(settings_env):
    result = runner.invoke(app, ["render", RECIPE, "--out", "-", "--run", "exp1"])
    assert result.exit_code == 0, result.output
    documents = result.stdout.split("---\n")
    assert documents[0] == ""  # every document starts with its own separator line
    spec = spec_of(load_settings().recipe(get_recipe(RECIPE))).with_run("exp1")
    manifests = render_manifests(spec, load_settings())
    assert [yaml.safe_load(document) for document in documents[1:]] == list(manifests.values())
    assert "rendered convert, train, export for qwen3-v6e32, run exp1" in result.stderr


def test_render_to_stdout_gives_the_vm_startup_script(settings_env):
    result = runner.invoke(app, ["render", VM_RECIPE, "--out", "-"])
    assert result.exit_code == 0, result.output
    settings = load_settings()
    assert result.stdout == render_startup_script(spec_of(settings.recipe(get_recipe(VM_RECIPE))), settings)


def test_status_json_has_each_steps_cells(cloud):
    recipe = get_recipe(RECIPE)
    manifests = render_manifests(spec_of(recipe), peer_settings())
    cloud["kube"].put_jobset(manifests["convert"], "succeeded")
    put_step_output(cloud["gcs"], recipe, "convert")
    result = runner.invoke(app, ["status", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["recipe"], data["run"], data["bucket"], data["note"]) == (
        RECIPE, paths().run_name, "gs://rl-test-artifacts", None)
    assert data["driver"] == f"driver: none (no Job tpu-rl-driver-{paths().run_name})"
    steps = {row["step"]: row for row in data["steps"]}
    assert list(steps) == ["convert", "train", "export"]
    assert (steps["convert"]["state"], steps["convert"]["pods"], steps["convert"]["output"]) == (
        "succeeded", "done", "verified")
    assert (steps["train"]["state"], steps["train"]["output"], steps["train"]["progress"]) == ("absent", "none yet", "")


def whole_run(cloud):
    """`tpu-rl run RECIPE` through its three steps, each writing its output."""
    recipe = get_recipe(RECIPE)
    for step in ("convert", "train", "export"):
        cloud["kube"].plan(jobset_of(RECIPE, step), on_success=lambda step=step: put_step_output(cloud["gcs"], recipe, step))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    return result


def test_the_end_of_a_run_says_where_the_model_is_and_what_to_do_next(cloud):
    result = whole_run(cloud)
    run, export = paths().run_name, paths().hf_export
    assert export == f"gs://rl-test-artifacts/qwen3-30b-a3b/hf-trained/{run}/"
    lines = result.output.splitlines()
    assert lines[lines.index("next:"):] == [
        "next:",
        "  download the Hugging Face model with",  # over three lines a paste runs as one (issue 37: 117 columns)
        "    `gcloud storage cp -r \\",
        f"      {export} \\",
        f"      ./{run}`",
        f"  its curves: `tpu-rl metrics {RECIPE} --run {run} --png {run}.png`",
        # what still bills once done, as README's "Stop paying" table and `runs` say it (issue 37)
        f"  with no run, stack {RECIPE} bills $60.73/h (estimates from list prices); `tpu-rl down {RECIPE}` stops "
        "$0.25/h of it: cluster fee $0.10, system-np 1 node $0.13, Cloud NAT $0.02; cpu-np at 0 nodes; node boot "
        "disks not included (prices.toml has no disk price)",
        "  the reservation's 32 chips bill $60.48/h with or without the stack, until the reservation ends: it may "
        "be shared or tied to a commitment, so only its owner can end it (tpu-rl never deletes it)"]


def test_the_commands_at_the_end_of_a_run_stay_whole_at_80_columns(cloud, monkeypatch):
    # issue 28: at 80 columns the download command was wrapped at its spaces, so a paste ran half of it.
    from cli_helpers import fits_80_columns_with_whole_paths

    monkeypatch.setenv("COLUMNS", "80")
    result = whole_run(cloud)
    run, export = paths().run_name, paths().hf_export
    lines = result.output.splitlines()
    at = lines.index("    `gcloud storage cp -r \\")  # whole: its three lines a paste runs as one, each within 80
    assert lines[at + 1:at + 3] == [f"      {export} \\", f"      ./{run}`"], result.output
    assert all(len(line) <= 80 for line in lines[at:at + 3]), result.output
    pasted = "\n".join(lines[at:at + 3]).strip().strip("`").replace("gcloud", "printf '%s\\n'", 1)
    said = subprocess.run(["bash", "-c", pasted], capture_output=True, text=True, check=True).stdout.split("\n")
    assert said[:5] == ["storage", "cp", "-r", export, f"./{run}"], said  # a paste runs it as one command
    assert f"    `tpu-rl metrics {RECIPE} --run {run} --png {run}.png`" in lines, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
