"""A training that stops below the computed step is still the trained model: `run` says so in one line,
exports the step it reached and records why (GCS emulator and fake Kubernetes API).

Why train_rl stops below num_batches x rl.num_iterations x train_fraction x num_epoch (MaxText 0.2.4
train_rl.py L360-378: prompts longer than max_prefill_predict_length are filtered before the first
num_batches x batch_size items are taken, then batched with drop_remainder; grain's filter keeps the
length and iteration skips the dropped items; tunix ends on StopIteration and saves the step it reached):
scripts/cloud/gcs.py TrainedCheckpoint. The checkpoints are laid out as orbax writes them
(peers.step_outputs.orbax_checkpoint).
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.fixtures import jobset_of, peer_settings, put_step_output, spec_of
from peers.step_outputs import orbax_checkpoint
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud.gcs import missing_outputs

RECIPE = "qwen3-v6e32"
runner = CliRunner()
PATHS = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings())


def put_checkpoints(gcs, *steps: int) -> None:
    """What tunix leaves: a committed checkpoint at each of `steps` (every checkpoint_period and on close)."""
    for step in steps:
        for url, data in orbax_checkpoint(PATHS.params_at(step), ("model_params", "optimizer_state"), ocdbt=False):
            bucket, name = split_gs_url(url)
            gcs.bucket(bucket).blob(name).upload_from_string(data)


def run_record(gcs) -> dict:
    bucket, name = split_gs_url(PATHS.run_record)
    return json.loads(gcs.bucket(bucket).blob(name).download_as_text())


def submitted_export_params(kube) -> str:
    export = kube.jobsets[jobset_of(RECIPE, "export")]
    script = export["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    return next(word for word in script.split() if word.startswith("load_parameters_path="))


def test_a_training_that_stopped_at_49_of_50_is_exported_from_step_49_and_recorded(cloud):
    gcs, kube = cloud["gcs"], cloud["kube"]
    recipe = get_recipe(RECIPE)
    assert recipe.last_step == 50
    kube.plan(jobset_of(RECIPE, "convert"), on_success=lambda: put_step_output(gcs, recipe, "convert"))
    # One long prompt among the first 400: 49 batches of 8; tunix saved 10, 20, 30, 40 and, on close, 49.
    kube.plan(jobset_of(RECIPE, "train"), on_success=lambda: put_checkpoints(gcs, 10, 20, 30, 40, 49))
    kube.plan(jobset_of(RECIPE, "export"), on_success=lambda: put_step_output(gcs, recipe, "export"))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "stopped at step" in line]
    assert len(lines) == 1 and "train: stopped at step 49, 1 step below the computed 50" in lines[0]
    assert "max_prefill_predict_length" in lines[0]
    assert submitted_export_params(kube) == f"load_parameters_path={PATHS.params_at(49)}"
    checkpoint = run_record(gcs)["steps"]["export"]["checkpoint"]
    assert checkpoint["step"] == 49 and "stopped 1 below the computed 50" in checkpoint["why"]
    # A rerun finds the training finished (its marker) and the export done: it submits nothing.
    again = runner.invoke(app, ["run", RECIPE])
    assert again.exit_code == 0, again.output
    assert len(kube.created) == 3


def test_a_training_that_reached_the_computed_step_records_that_export_read_it(cloud):
    gcs, kube = cloud["gcs"], cloud["kube"]
    recipe = get_recipe(RECIPE)
    for step in ("convert", "train", "export"):
        kube.plan(jobset_of(RECIPE, step), on_success=lambda step=step: put_step_output(gcs, recipe, step))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 0, result.output
    assert "stopped at step" not in result.output
    assert submitted_export_params(kube) == f"load_parameters_path={PATHS.params_at(50)}"
    checkpoint = run_record(gcs)["steps"]["export"]["checkpoint"]
    assert checkpoint["step"] == 50 and checkpoint["why"].endswith("the computed last step")


def test_an_interrupted_trainings_checkpoint_is_not_the_trained_model(gcs):
    # A preempted run left step 20 and no JobSet said it finished: train is still to do (it resumes there).
    put_checkpoints(gcs, 10, 20)
    missing = [req.describe() for req in missing_outputs(gcs, PATHS, "train")]
    assert missing == [f"{PATHS.progress_marker('train')} (training has checkpoints up to step 20 of at most 50 "
                       "and has not finished: it runs, or was interrupted)"]
    # Its JobSet succeeded (train_rl exited 0): step 20 is where training ended.
    assert missing_outputs(gcs, PATHS, "train", finished=True) == []


def test_no_finished_checkpoint_at_all_is_missing(gcs):
    put_checkpoints(gcs)
    missing = [req.describe() for req in missing_outputs(gcs, PATHS, "train", finished=True)]
    assert missing == [f"{PATHS.actor_checkpoints}<step>/commit_success.txt (no checkpoint step with orbax's "
                       "commit marker yet)"]


def test_status_counts_a_short_training_whose_jobset_succeeded_as_verified(cloud):
    from tpu_rl.jobs import render_manifests

    gcs, kube = cloud["gcs"], cloud["kube"]
    put_step_output(gcs, get_recipe(RECIPE), "convert")
    put_checkpoints(gcs, 10, 20, 30, 40, 49)
    kube.put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["train"], "succeeded")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    train = result.output[result.output.index("\ntrain"):result.output.index("\nexport")]
    assert "verified" in train and "missing" not in train, result.output


def test_a_dry_run_before_training_says_the_export_shown_is_the_upper_bound(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "export at step 50 is an upper bound: run exports the step training reached" in " ".join(result.output.split())


def test_a_training_that_saved_only_step_0_trained_nothing_and_is_missing(gcs):
    # tunix's close() saves step 0 when the loop got no batch (peft_trainer.py _save_last_checkpoint:
    # `last_saved_step is None`), e.g. every prompt longer than max_prefill_predict_length.
    put_checkpoints(gcs, 0)
    missing = [req.describe() for req in missing_outputs(gcs, PATHS, "train", finished=True)]
    assert len(missing) == 1 and "only step 0, the untrained model" in missing[0]


# num_batches past gsm8k's 7,473 train rows: train_rl keeps int(num_batches x batch_size x train_fraction) of
# them (MaxText 0.2.4 train_rl.py L375-378) and batches them by 8 with drop_remainder, so the iterator ends
# after 7473 // 8 = 934 batches, one step each, far below max_steps = train_steps = 100,000 (L506); tunix
# saves the step it reached on close. 934 is the last step this run can reach, and what export converts.
PAST_THE_DATA = ("num_batches=100000",)
DATA_STEPS = 934


def test_a_run_past_its_data_exports_the_step_its_data_makes_as_its_computed_last_step(cloud):
    from tpu_rl.jobs.k8s import jobset_name
    from tpu_rl.recipes.runs.spec import RunSpec

    gcs, kube = cloud["gcs"], cloud["kube"]
    spec = RunSpec.requested(get_recipe(RECIPE), PAST_THE_DATA)
    paths = ArtifactPaths(spec, peer_settings())
    assert spec.recipe.train_steps == 100000 and spec.recipe.last_step == DATA_STEPS
    dry = runner.invoke(app, ["run", RECIPE, "--set", *PAST_THE_DATA, "--dry-run", "--skip-fit-check"])
    assert f"export at step {DATA_STEPS} is an upper bound" in " ".join(dry.output.split()), dry.output

    def trained() -> None:
        for url, data in orbax_checkpoint(paths.params_at(DATA_STEPS), ("model_params", "optimizer_state"),
                                          ocdbt=False):
            bucket, name = split_gs_url(url)
            gcs.bucket(bucket).blob(name).upload_from_string(data)

    kube.plan(jobset_name(spec, "convert"), on_success=lambda: put_step_output(gcs, spec, "convert"))
    kube.plan(jobset_name(spec, "train"), on_success=trained)
    kube.plan(jobset_name(spec, "export"), on_success=lambda: put_step_output(gcs, spec, "export"))
    result = runner.invoke(app, ["run", RECIPE, "--set", *PAST_THE_DATA, "--skip-fit-check", "--yes"])
    assert result.exit_code == 0, result.output
    assert "stopped at step" not in result.output  # it reached the last step its data makes
    export = kube.jobsets[jobset_name(spec, "export")]
    script = export["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"load_parameters_path={paths.params_at(DATA_STEPS)}" in script.split()
    bucket, name = split_gs_url(paths.run_record)
    checkpoint = json.loads(gcs.bucket(bucket).blob(name).download_as_text())["steps"]["export"]["checkpoint"]
    assert checkpoint["step"] == DATA_STEPS and checkpoint["why"].endswith("the computed last step")
    # Its checkpoint is the trained model even where no JobSet says training finished (no progress marker).
    gcs.bucket(bucket).blob(split_gs_url(paths.progress_marker("train"))[1]).delete()
    assert missing_outputs(gcs, paths, "train") == []
