"""`tpu-rl run` on GKE against the local Kubernetes API, GCS emulator and Secret Manager peers."""

from __future__ import annotations

import base64
import math

import pytest
from typer.testing import CliRunner

from contracts.tunix_log import eval_step_line, train_step_line
from peers import simulated_run
from peers.fixtures import TOKEN, jobset_of, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.conventions import CHECK_FAILED_PREFIX
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.rundata.progress import TrainProgress, last_train_step

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def tpu_rl(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def succeed_writing_output(cloud, step: str, **plan):
    simulated_run.succeed_writing_output(cloud["kube"], cloud["gcs"], get_recipe(RECIPE), step, **plan)


def succeed_whole_run(cloud):
    """The run the demo shows (peers/simulated_run.py): each step succeeds and writes its output."""
    simulated_run.script_successful_run(cloud["kube"], cloud["gcs"], get_recipe(RECIPE))


def test_run_submits_three_steps_in_order_and_verifies_each_output(cloud):
    succeed_whole_run(cloud)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == 0, result.output
    assert cloud["kube"].created == [jobset_of(RECIPE, step) for step in ("convert", "train", "export")]
    for step in ("convert", "train", "export"):
        assert f"{step}: output verified" in result.output


def test_run_first_prints_what_the_readme_says_it_does(cloud):
    """README step 6 quotes run's first lines: the Secret line, then the run and its plan."""
    import re
    from pathlib import Path

    succeed_whole_run(cloud)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == 0, result.output
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    step6 = readme[readme.index("**6. Train.**"):readme.index("**7.")]
    quoted = re.findall(r"`run` prints `([^`]+)`, then `([^`]+)`", step6)
    assert quoted, step6
    first, second = result.output.splitlines()[:2]
    assert quoted[0][0] == first
    assert re.fullmatch(quoted[0][1].replace("<hash>", "[0-9a-f]+"), second), second


def test_run_fills_the_token_secret_from_secret_manager_without_showing_it(cloud):
    succeed_whole_run(cloud)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == 0, result.output
    secret = cloud["kube"].secrets["tpu-rl-hf-token"]
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == TOKEN
    jobset_bodies = b"".join(cloud["kube"].sent("POST", "/jobsets"))
    assert TOKEN.encode() not in jobset_bodies and base64.b64encode(TOKEN.encode()) not in jobset_bodies
    assert TOKEN not in result.output


def test_rerun_after_success_submits_nothing_and_says_outputs_are_verified(cloud):
    succeed_whole_run(cloud)
    assert tpu_rl("run", RECIPE).exit_code == 0
    again = tpu_rl("run", RECIPE)
    assert again.exit_code == 0, again.output
    assert len(cloud["kube"].created) == 3
    assert again.output.count("skipping") == 3


def test_run_resumes_after_convert_by_skipping_it(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    for step in ("train", "export"):
        succeed_writing_output(cloud, step)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == 0, result.output
    assert cloud["kube"].created == [jobset_of(RECIPE, step) for step in ("train", "export")]
    assert "convert: output verified" in result.output and "skipping" in result.output
    assert "plan: convert skip, train submit, export submit" in result.output


@pytest.mark.parametrize("maxtext", ["0.2.3", "0.2.4"])
def test_the_step_and_loss_come_from_tunix_train_step_lines_not_its_eval_lines(maxtext):
    log = "\n".join([train_step_line(7, 0.3, maxtext), train_step_line(8, -0.03125, maxtext),
                     eval_step_line(8, 2.5, maxtext), "I0805 12:35:00.000000 140234 rl_cluster.py:1] other\n"])
    assert last_train_step(log) == TrainProgress(8, -0.03125)


def test_a_nan_loss_is_shown_as_nan_and_a_log_without_train_steps_gives_none():
    progress = last_train_step(train_step_line(4, float("nan")))
    assert progress is not None and progress.step == 4 and math.isnan(progress.loss)
    assert last_train_step("loading\n" + eval_step_line(4, 1.0)) is None


def test_run_shows_training_step_and_loss_from_the_head_logs(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    logs = "\n".join(["loading", train_step_line(11, 0.5), train_step_line(12, 0.412), eval_step_line(12, 0.9), ""])
    succeed_writing_output(cloud, "train", ticks=3, logs=logs)
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert "train: step 12/50, loss 0.412" in result.output
    assert "pods 9/9 scheduled, 9/9 ready" in result.output  # pathways-head + 8 workers


def test_a_containers_failed_check_is_the_headline_of_the_failure_line(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    check = ("the image has jax 0.8.1 but the Pathways images are tagged jax-0.11.0: set the recipe's "
             "pathways image tag to the image's JAX version")
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="fail", logs=f"starting\n{CHECK_FAILED_PREFIX}{check}\n")
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == ExitCode.JOB_FAILED
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: step train failed: {check}; JobSet {jobset_of(RECIPE, 'train')} FailedJobs")
    assert f"tpu-rl logs {RECIPE} train" in line
    logs_read = [path for _, path, _ in cloud["kube"].requests if "/log" in path and "tpu-rl-driver-" not in path]
    assert logs_read and all("pathways-head" in path and "container=workload-container" in path for path in logs_read)


def test_a_failure_without_a_check_line_keeps_the_jobset_reason_first(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="fail", logs="Traceback (most recent call last):\n")
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == ExitCode.JOB_FAILED
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: step train failed: JobSet {jobset_of(RECIPE, 'train')} FailedJobs")


def test_run_waits_for_kueue_admission_and_says_what_to_check(cloud):
    succeed_writing_output(cloud, "convert", admitted_after=3)
    result = tpu_rl("run", RECIPE, "--steps", "convert")
    assert result.exit_code == 0, result.output
    assert "convert: suspended" in result.output
    assert f"waiting for Kueue to admit JobSet {jobset_of(RECIPE, 'convert')}" in result.output
    assert result.output.count("waiting for Kueue") == 1


def test_an_operator_can_confirm_replacing_a_failed_jobset_interactively(cloud, monkeypatch):
    import tpu_rl.scripts.cli.cloud as scripts_cli_cloud
    from tpu_rl.jobs import render_manifests
    from peers.fixtures import peer_settings

    questions = []
    real = scripts_cli_cloud.make_session

    def make_session(*args, **kwargs):
        session = real(*args, **kwargs)
        session.confirm = lambda question: questions.append(question) or True
        return session

    monkeypatch.setattr(scripts_cli_cloud, "make_session", make_session)
    cloud["kube"].put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["convert"], "failed")
    succeed_writing_output(cloud, "convert")
    result = tpu_rl("run", RECIPE, "--steps", "convert")
    assert result.exit_code == 0, result.output
    assert len(questions) == 1 and "Delete it and submit again?" in questions[0]
    assert cloud["kube"].deleted == cloud["kube"].created == [jobset_of(RECIPE, "convert")]
