"""`tpu-rl eval RECIPE --run NAME [--step N]` against the peers: the checkpoint is copied into a scratch run,
whose train JobSet (fake Kubernetes API) logs MaxText's "Pre RL Training" line after restoring it (built
from the wheel's format string, tests/contracts/tunix_log.py); the JobSet is deleted once the line is
logged, and the result joins the source run's record."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from contracts.tunix_log import evaluation_line
from jobs.paths import ArtifactPaths
from peers.fixtures import peer_settings, put_checkpoint
from scripts.cli import app
from scripts.cloud import gcs as gcs_io
from test_cli_experiments import plan_success, record, run_of, train_script

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def trained_run(cloud, *sets: str):
    recipe, paths = run_of(*sets)
    plan_success(cloud, recipe)
    assert runner.invoke(app, ["run", RECIPE, *(item for s in sets for item in ("--set", s))]).exit_code == 0
    put_checkpoint(cloud["gcs"], paths, 20)
    return recipe, paths


def test_eval_scores_a_saved_checkpoint_and_records_it(cloud):
    recipe, paths = trained_run(cloud, "learning_rate=1e-5")
    run = paths.run_name
    from jobs.evaluate import eval_run_name

    scratch = eval_run_name(run, 20)
    assert scratch.startswith("qwen3-v6e3") and "-e20-" in scratch and scratch != eval_run_name(run[:-1] + "x", 20)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=f"restoring\n{pre}\n", outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", run, "--step", "20"])  # the record gives the --set
    assert result.exit_code == 0, result.output
    copy = ArtifactPaths(recipe.model_copy(update={"run": scratch}), peer_settings()).actor_checkpoints
    assert gcs_io.exists(cloud["gcs"], f"{copy}20/commit_success.txt")
    assert cloud["kube"].deleted[-1] == f"{scratch}-train"  # stopped before it trains on
    # The JobSet as it was submitted (it is gone now): the POST the fake API received.
    [body] = [json.loads(body) for method, path, body in cloud["kube"].requests
              if method == "POST" and path.endswith("/jobsets") and f"{scratch}-train".encode() in body]
    cloud["kube"].jobsets[f"{scratch}-train"] = body
    script = train_script(cloud["kube"], f"{scratch}-train")
    for item in ("num_batches=20", "eval_interval=0", "learning_rate=1e-5", f"run_name={scratch}"):
        assert item in script, item
    assert f"run {run}: accuracy 46.9% (30/64) at checkpoint 20, format 90.6%, reward 1.1" in result.output
    [entry] = [e for e in record(cloud["gcs"], paths)["evaluations"] if e["phase"] == "checkpoint"]
    assert (entry["step"], entry["corr"], entry["total"]) == (20, 30, 64)


def test_eval_of_a_step_without_a_checkpoint_lists_the_steps(cloud):
    _, paths = trained_run(cloud)
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "30"])
    assert result.exit_code == 2
    assert f"--step 30: run {paths.run_name} has no finished checkpoint 30; it has 20, 50" in " ".join(result.output.split())
    assert not any("-e30-" in name for name in cloud["kube"].created)


def test_eval_reads_the_whole_head_log_when_the_pre_line_scrolled_out_of_the_tail(cloud):
    # qwen3 runs with debug=True: hundreds of lines can follow the Pre line before the next poll, more
    # than the PROGRESS_LOG_LINES tail each poll reads; the JobSet then trains its step and ends.
    from jobs.evaluate import eval_run_name
    from scripts.pipeline.gke.steps import PROGRESS_LOG_LINES

    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    debug = "".join(f"I1201 10:00:00.000000 140 rl_learner.py:1] debug line {i}\n"
                    for i in range(PROGRESS_LOG_LINES + 50))
    cloud["kube"].plan(f"{scratch}-train", ticks=3, logs=f"restoring\n{pre}\n{debug}", outcome="succeed")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    assert f"run {paths.run_name}: accuracy 46.9% (30/64) at checkpoint 20" in result.output


def test_eval_that_logs_no_evaluation_ends_within_its_time_limit(cloud, monkeypatch):
    from jobs.evaluate import eval_run_name
    from scripts.pipeline.gke import evaluate

    monkeypatch.setattr(evaluate, "EVAL_WAIT_MINUTES", 0)
    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=3, logs="restoring\n", outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code != 0
    assert f"JobSet {scratch}-train logged no evaluation within 0 min" in " ".join(result.output.split())
    assert cloud["kube"].deleted[-1] == f"{scratch}-train"
