"""`tpu-rl eval RECIPE --run NAME [--step N]` against the peers: a scratch run's train JobSet (fake
Kubernetes API) loads the checkpoint's params with load_parameters_path (jobs/evaluate.py has MaxText's
source) and logs MaxText's "Pre RL Training" line (built from the wheel's format string,
tests/contracts/tunix_log.py); the JobSet is deleted once the line is logged, the result joins the source
run's record, and what the command created (the JobSet, its ConfigMap, the scratch run's directory in the
GCS emulator) is deleted on success and on failure, and nothing else."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from cli_helpers import plan_success, record, train_script, trained_run
from contracts.tunix_log import evaluation_line
from tpu_rl.jobs.paths import ArtifactPaths
from peers.fixtures import peer_settings, put_checkpoint, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud import gcs as gcs_io

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def test_eval_scores_a_saved_checkpoint_and_records_it(cloud):
    recipe, paths = trained_run(cloud, "learning_rate=1e-5")
    run = paths.run_name
    from tpu_rl.jobs.evaluate import eval_run_name

    scratch = eval_run_name(run, 20)
    assert scratch.startswith("qwen3-v6e3") and "-e20-" in scratch and scratch != eval_run_name(run[:-1] + "x", 20)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=f"restoring\n{pre}\n", outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", run, "--step", "20"])  # the record gives the --set
    assert result.exit_code == 0, result.output
    scratch_paths = ArtifactPaths(spec_of(recipe).with_run(scratch), peer_settings())
    assert not gcs_io.object_names(cloud["gcs"], scratch_paths.run_root)  # nothing copied, nothing left
    assert cloud["kube"].deleted[-1] == f"{scratch}-train"  # stopped before it trains on
    # The JobSet as it was submitted (it is gone now): the POST the fake API received.
    [body] = [json.loads(body) for method, path, body in cloud["kube"].requests
              if method == "POST" and path.endswith("/jobsets") and f"{scratch}-train".encode() in body]
    cloud["kube"].jobsets[f"{scratch}-train"] = body
    script = train_script(cloud["kube"], f"{scratch}-train")
    # The actor (and the reference) load the checkpoint's params; the scratch run has nothing to resume.
    for item in (f"load_parameters_path={paths.actor_checkpoints}20/model_params/", "num_batches=1",
                 "eval_interval=0", "learning_rate=1e-5", f"run_name={scratch}"):
        assert item in script.split(), item
    assert "max-text-format" not in script
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
    from tpu_rl.jobs.evaluate import eval_run_name
    from tpu_rl.scripts.pipeline.gke.steps import PROGRESS_LOG_LINES

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
    from tpu_rl.jobs.evaluate import eval_run_name
    from tpu_rl.scripts.pipeline.gke import evaluate

    monkeypatch.setattr(evaluate, "EVAL_WAIT_MINUTES", 0)
    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=3, logs="restoring\n", outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code != 0
    assert f"JobSet {scratch}-train logged no evaluation within 0 min" in " ".join(result.output.split())
    assert cloud["kube"].deleted[-1] == f"{scratch}-train"


REWARDS = "def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0 for _ in completions]\n"


def _put(gcs, url: str, text: str = "x") -> None:
    from tpu_rl.jobs.paths import split_gs_url

    bucket, name = split_gs_url(url)
    gcs.bucket(bucket).blob(name).upload_from_string(text)


def _scratch_setup(cloud, tmp_path):
    """A run trained with --rewards, a checkpoint 20, and objects the eval must leave alone: the source
    run's own files, another run's directory whose name starts with the scratch run's, another run's
    ConfigMap and JobSet."""
    from tpu_rl.jobs.evaluate import eval_run_name
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.recipes.runs.user_files import read_user_file

    path = tmp_path / "mine.py"
    path.write_text(REWARDS)
    base = RunSpec.requested(get_recipe(RECIPE))
    recipe = base.with_user_files((read_user_file(base.recipe, "rewards", path, ("short",)),))
    paths = ArtifactPaths(spec_of(recipe), peer_settings())
    plan_success(cloud, recipe)
    assert runner.invoke(app, ["run", RECIPE, "--rewards", f"{path}:short"]).exit_code == 0
    put_checkpoint(cloud["gcs"], paths, 20)
    scratch = eval_run_name(paths.run_name, 20)
    scratch_paths = ArtifactPaths(spec_of(recipe).with_run(scratch), peer_settings())
    neighbour = scratch_paths.run_root.rstrip("/") + "x/run.json"
    _put(cloud["gcs"], neighbour)
    cloud["kube"].configmaps["other-user-files"] = {"metadata": {"name": "other-user-files",
                                                                 "labels": {"tpu-rl/run": "other"}}, "data": {}}
    before = set(gcs_io.object_names(cloud["gcs"], paths.run_root))
    return paths, scratch, scratch_paths, neighbour, before


def _left_alone(cloud, paths, neighbour, before) -> None:
    assert set(gcs_io.object_names(cloud["gcs"], paths.run_root)) >= before  # the source run keeps its files
    assert gcs_io.exists(cloud["gcs"], neighbour)
    assert "other-user-files" in cloud["kube"].configmaps
    assert f"{paths.run_name}-train" in cloud["kube"].jobsets


def test_eval_deletes_what_it_created_after_recording_the_result(cloud, tmp_path, monkeypatch):
    from tpu_rl.scripts.pipeline.gke import evaluate

    paths, scratch, scratch_paths, neighbour, before = _scratch_setup(cloud, tmp_path)
    # Leftovers of an earlier evaluation that trained a step before its JobSet was gone: tunix would
    # restore this step over the loaded params, so it goes before the JobSet is submitted.
    _put(cloud["gcs"], f"{scratch_paths.actor_checkpoints}1/commit_success.txt")
    cloud["kube"].plan(f"{scratch}-train", ticks=2, logs=evaluation_line("pre", 30, 64, 33, 58, 1.1) + "\n",
                       outcome="hang")
    wait, at_submit = evaluate._wait_for_evaluation, {}

    def running_scratch_job(session, job, step):  # what the JobSet finds, and what it writes meanwhile
        at_submit["objects"] = gcs_io.object_names(cloud["gcs"], scratch_paths.run_root)
        at_submit["configmap"] = cloud["kube"].configmaps[f"{scratch}-user-files"]["data"]
        _put(cloud["gcs"], f"{scratch_paths.actor_checkpoints}1/commit_success.txt")
        _put(cloud["gcs"], f"{scratch_paths.tensorboard}events.out.tfevents.1")
        return wait(session, job, step)

    monkeypatch.setattr(evaluate, "_wait_for_evaluation", running_scratch_job)
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    assert at_submit == {"objects": [], "configmap": {"mine.py": REWARDS}}
    assert not gcs_io.object_names(cloud["gcs"], scratch_paths.run_root)
    assert f"{scratch}-user-files" not in cloud["kube"].configmaps
    assert f"{scratch}-train" not in cloud["kube"].jobsets
    _left_alone(cloud, paths, neighbour, before)
    [entry] = [e for e in record(cloud["gcs"], paths)["evaluations"] if e["phase"] == "checkpoint"]
    assert entry["corr"] == 30


def test_eval_deletes_what_it_created_when_it_fails(cloud, tmp_path, monkeypatch):
    from tpu_rl.scripts.pipeline.gke import evaluate

    monkeypatch.setattr(evaluate, "EVAL_WAIT_MINUTES", 0)
    paths, scratch, scratch_paths, neighbour, before = _scratch_setup(cloud, tmp_path)
    cloud["kube"].plan(f"{scratch}-train", ticks=3, logs="restoring\n", outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 1, result.output
    assert f"{scratch}-train" in cloud["kube"].created  # it was submitted
    assert f"{scratch}-train" not in cloud["kube"].jobsets and f"{scratch}-user-files" not in cloud["kube"].configmaps
    assert not gcs_io.object_names(cloud["gcs"], scratch_paths.run_root)
    _left_alone(cloud, paths, neighbour, before)
    assert not [e for e in record(cloud["gcs"], paths).get("evaluations", []) if e["phase"] == "checkpoint"]


def test_eval_refuses_a_scratch_name_that_is_a_real_runs_and_deletes_nothing(cloud, tmp_path):
    paths, scratch, scratch_paths, neighbour, before = _scratch_setup(cloud, tmp_path)
    _put(cloud["gcs"], scratch_paths.run_record, "{}")
    _put(cloud["gcs"], f"{scratch_paths.actor_checkpoints}5/commit_success.txt")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 2
    assert "is a real run's, whose files eval would delete" in " ".join(result.output.split())
    assert gcs_io.exists(cloud["gcs"], f"{scratch_paths.actor_checkpoints}5/commit_success.txt")
    assert f"{scratch}-train" not in cloud["kube"].created


# -- review of issue 17: the eval's own limit counts from its slice, not from submit ----------------------
def test_eval_limit_counts_from_the_slice_not_from_the_queue(cloud, monkeypatch):
    """Kueue holds the JobSet for 20 min and the slice takes 10 more (within reservation's 30 min
    CAPACITY_WAIT); the Pre line comes 20 min after the slice is up. With a 25 min limit counted from
    submit the eval failed at the first poll of the granted slice."""
    from tpu_rl.jobs.evaluate import eval_run_name
    from tpu_rl.scripts.pipeline.gke import evaluate
    from cli_helpers import slow_polls

    _, paths = trained_run(cloud)
    slow_polls(monkeypatch)  # 10 virtual minutes a poll
    monkeypatch.setattr(evaluate, "EVAL_WAIT_MINUTES", 25)
    scratch = eval_run_name(paths.run_name, 20)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    cloud["kube"].plan(f"{scratch}-train", ticks=10, admitted_after=2, outcome="hang",
                       log_reads=["restoring\n"] * 3 + [f"restoring\n{pre}\n"])
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "eval: waiting for admission and the slice (CAPACITY_WAIT), then up to 25 min" in out
    assert "eval: the slice is up; waiting up to 25 min for the head's Pre RL Training line" in out
    assert f"run {paths.run_name}: accuracy 46.9% (30/64) at checkpoint 20" in out


def test_eval_reads_only_new_lines_of_a_long_log_and_survives_a_failed_read(cloud, monkeypatch):
    """While the tail holds no Pre line, each read of the head's log after the first asks for the lines from
    the kubelet's time of the last one read (sinceTime), not the whole log; a read that fails is retried at
    the next poll, from the same line."""
    from tpu_rl.jobs.evaluate import eval_run_name
    from tpu_rl.recipes.outcome import ApiError
    from tpu_rl.scripts.cloud.cluster import Cluster
    from tpu_rl.scripts.pipeline.gke.steps import PROGRESS_LOG_LINES

    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    pre = evaluation_line("pre", 30, 64, 33, 58, 1.1)
    debug = "".join(f"I1201 10:00:00.000000 140 rl_learner.py:1] debug line {i}\n"
                    for i in range(PROGRESS_LOG_LINES + 50))
    cloud["kube"].plan(f"{scratch}-train", ticks=8, outcome="hang",
                       log_reads=[debug] * 5 + [f"{debug}{pre}\n{debug}"])
    read, failed = Cluster.read_log, []

    def read_log(self, pod, container, tail_lines=None, timestamps=False, since_time=None):
        if since_time is not None and not failed:  # the first read of the new lines times out
            failed.append(since_time)
            raise ApiError("reading logs of the head: timed out")
        return read(self, pod, container, tail_lines, timestamps, since_time)

    monkeypatch.setattr(Cluster, "read_log", read_log)
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    assert "could not read the head's log" in result.output
    assert f"run {paths.run_name}: accuracy 46.9% (30/64) at checkpoint 20" in " ".join(result.output.split())
    reads = [path for method, path, _ in cloud["kube"].requests if method == "GET" and "/log" in path
             and f"/pods/{scratch}-" in path]
    new_lines = [path for path in reads if "tailLines" not in path]  # head_log's reads (the waits' are tails)
    assert failed and len(new_lines) >= 2 and "sinceTime" not in new_lines[0], reads  # the first: all of it
    assert all("sinceTime" in path and "timestamps=true" in path for path in new_lines[1:]), reads


def test_eval_of_a_run_with_train_fraction_below_one_trains_at_most_one_step(cloud):
    """train_rl keeps int(num_batches x batch_size x train_fraction) rows (0.2.4 train_rl.py L375):
    num_batches=1 at train_fraction=0.5 is 0 training steps, which the recipe check refuses; 2 is one."""
    _, paths = trained_run(cloud, "train_fraction=0.5")
    from tpu_rl.jobs.evaluate import eval_run_name

    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=evaluation_line("pre", 30, 64, 33, 58, 1.1) + "\n",
                       outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    [body] = [json.loads(body) for method, path, body in cloud["kube"].requests
              if method == "POST" and path.endswith("/jobsets") and f"{scratch}-train".encode() in body]
    cloud["kube"].jobsets[f"{scratch}-train"] = body
    script = train_script(cloud["kube"], f"{scratch}-train").split()
    assert "num_batches=2" in script and "train_fraction=0.5" in script


def _submitted_script(cloud, scratch: str) -> list[str]:
    [body] = [json.loads(body) for method, path, body in cloud["kube"].requests
              if method == "POST" and path.endswith("/jobsets") and f"{scratch}-train".encode() in body]
    cloud["kube"].jobsets[f"{scratch}-train"] = body
    return train_script(cloud["kube"], f"{scratch}-train").split()


def test_eval_set_items_join_the_runs_own(cloud):
    """The run's --set items, then eval's: an evaluation key may change, the run's items stay."""
    from tpu_rl.jobs.evaluate import eval_run_name

    _, paths = trained_run(cloud, "learning_rate=1e-5", "max_target_length=1024")
    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=evaluation_line("pre", 30, 64, 33, 58, 1.1) + "\n",
                       outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20",
                                 "--set", "num_test_batches=3", "--set", "max_target_length=1024"])
    assert result.exit_code == 0, result.output
    script = _submitted_script(cloud, scratch)
    for item in ("learning_rate=1e-5", "max_target_length=1024", "num_test_batches=3"):
        assert item in script, item


def test_eval_refuses_a_set_item_that_changes_the_model_the_run_trained(cloud):
    _, paths = trained_run(cloud, "max_target_length=1024")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20",
                                 "--set", "max_target_length=2048"])
    assert result.exit_code == 2, result.output
    assert (f"--set max_target_length=2048: run {paths.run_name} was trained with max_target_length=1024"
            in " ".join(result.output.split()))
    assert not any("-e20-" in name for name in cloud["kube"].created)


def test_eval_refuses_a_reward_copy_that_is_missing_or_changed(cloud, tmp_path):
    paths, scratch, *_ = _scratch_setup(cloud, tmp_path)
    copy = record(cloud["gcs"], paths)["files"]["rewards"]["copy"]
    _put(cloud["gcs"], copy, REWARDS.replace("0.0", "1.0"))
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 2, result.output
    assert f"--rewards copy {copy} differs from the file it trained with" in " ".join(result.output.split())
    from tpu_rl.jobs.paths import split_gs_url

    bucket, name = split_gs_url(copy)
    cloud["gcs"].bucket(bucket).blob(name).delete()
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 2, result.output
    assert f"--rewards copy {copy} is missing" in " ".join(result.output.split())
    assert f"{scratch}-train" not in cloud["kube"].created


def test_eval_evaluates_a_record_naming_a_reward_function_twice_as_it_trained_with_one_warning(cloud, tmp_path):
    """A run.json written before run refused a repeat (`--rewards mine.py:short,short`): the run trained
    with the function weighed twice (tunix's reward manager adds every listed function's score), so eval
    keeps the repeat as recorded, with one warning line, rather than never evaluate the run."""
    paths, scratch, *_ = _scratch_setup(cloud, tmp_path)
    kept = record(cloud["gcs"], paths)
    kept["files"]["rewards"]["functions"] = "short,short"
    _put(cloud["gcs"], paths.run_record, json.dumps(kept))
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=evaluation_line("pre", 30, 64, 33, 58, 1.1) + "\n",
                       outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"])
    assert result.exit_code == 0, result.output
    warning = f"! eval: run {paths.run_name} weighs reward short twice; kept, as trained"
    assert result.output.splitlines().count(warning) == 1, result.output
    assert "reward_functions=short,short" in _submitted_script(cloud, scratch)


def test_eval_refuses_a_model_key_the_run_did_not_set_naming_the_value_it_trained_with(cloud):
    """A key MaxText's model configs set (configs/models/*.yml of the wheel, recipes/runs/maxtext_keys/) or the
    weights' dtype: the run left it at its model's or the release's value, and eval's --set would load the
    checkpoint as another model, which fails only once a slice was granted. Refused before anything is
    created, naming the run's value and where it came from."""
    _, paths = trained_run(cloud)
    cases = {("--set", "override_model_config=true", "--set", "base_emb_dim=1024"):
             f"--set base_emb_dim=1024: run {paths.run_name} was trained with base_emb_dim=2048 "
             "(configs/models/qwen3-30b-a3b.yml), which makes the model its checkpoint holds (ModelArchitecture)",
             # maxtext 0.2.4 configs/post_train/rl.yml L88 weight_dtype: 'bfloat16' (base.yml's is float32)
             ("--set", "weight_dtype=float32"):
             f"--set weight_dtype=float32: run {paths.run_name} was trained with weight_dtype=bfloat16 "
             "(MaxText 0.2.4's own value, rl.yml or types.py), which makes the model its checkpoint holds "
             "(DataTypes)",
             # 0.2.4 configs/types.py L455-458: quantization Field(QuantizationType.NONE), whose value is ""
             ("--set", "quantization=int8"):
             f"--set quantization=int8: run {paths.run_name} was trained with quantization= (MaxText 0.2.4's "
             "own value, rl.yml or types.py), which makes the model its checkpoint holds (Quantization)",
             # types.py L546 fused_mlp False: layers/linears.py L492 builds one wi instead of wi_0/wi_1
             ("--set", "fused_mlp=true"):
             f"--set fused_mlp=true: run {paths.run_name} was trained with fused_mlp=false",
             # types.py attn_logits_soft_cap Field(None): no value in the release, read as null
             ("--set", "attn_logits_soft_cap=30.0"):
             f"--set attn_logits_soft_cap=30.0: run {paths.run_name} was trained with attn_logits_soft_cap=null"}
    for argv, line in cases.items():
        result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20", *argv])
        assert result.exit_code == 2, result.output
        assert line in " ".join(result.output.split()), result.output
    assert not any("-e20-" in name for name in cloud["kube"].created)


def test_eval_takes_a_model_key_at_the_runs_own_value_and_evaluation_keys(cloud):
    from tpu_rl.jobs.evaluate import eval_run_name

    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=5, logs=evaluation_line("pre", 30, 64, 33, 58, 1.1) + "\n",
                       outcome="hang")
    result = runner.invoke(app, ["eval", RECIPE, "--run", paths.run_name, "--step", "20", "--set", "base_emb_dim=2048",
                                 "--set", "eval_sampling_strategy=standard"])
    assert result.exit_code == 0, result.output
    assert "eval_sampling_strategy=standard" in _submitted_script(cloud, scratch)


def test_the_model_keys_come_from_the_wheels_model_configs_and_leave_evaluation_keys_alone():
    from tpu_rl.jobs.evaluate import EVALUATION_SETTINGS
    from tpu_rl.recipes.runs.maxtext_values import model_keys

    for version in ("0.2.3", "0.2.4"):
        keys = model_keys(version)
        assert {"base_emb_dim", "base_num_decoder_layers", "num_experts", "vocab_size", "weight_dtype"} <= set(keys)
        assert not set(keys) & set(EVALUATION_SETTINGS), version
        assert not {"max_target_length", "learning_rate", "eval_dataset_name", "checkpoint_period"} & set(keys)


def test_the_model_keys_hold_the_shape_keys_no_model_yml_sets_and_not_the_harmless_ones():
    """Keys that change the weights' shapes or layout (tests/contracts/maxtext_types.py SHAPE_KEYS, each
    with its types.py line and the layer reading it) are refused; keys a model yml sets that only the
    training loss, logging or a kernel read (HARMLESS_KEYS) are not."""
    from tpu_rl.recipes.runs.maxtext_values import model_keys

    for version in ("0.2.3", "0.2.4"):
        keys = model_keys(version)
        assert {"global_parameter_scale", "fused_mlp", "qk_norm_with_scale", "mtp_num_layers", "use_qk_norm_in_gdn",
                "param_scan_axis", "inhomogeneous_layer_cycle_interval", "quantization"} <= set(keys), version
        assert not {"load_balance_loss_weight", "routed_bias_update_rate", "log_moe_bias_norms",
                    "use_batch_split_schedule", "attention", "attention_dropout_for_audio"} & set(keys), version


def test_the_evaluation_keys_are_keys_both_releases_accept():
    """eval_temperature/top_k/top_p are no keys of rl.yml: they sit in generation_configs.<strategy>
    (0.2.3 L147-158, 0.2.4 L142-153), so the evaluation keys name generation_configs instead."""
    from tpu_rl.jobs.evaluate import EVALUATION_SETTINGS
    from tpu_rl.recipes.runs.maxtext_values import maxtext_keys

    for version in ("0.2.3", "0.2.4"):
        assert set(EVALUATION_SETTINGS) <= maxtext_keys(version), version
    assert "generation_configs" in EVALUATION_SETTINGS


def test_eval_sets_refuses_an_unknown_or_dotted_key_in_one_line():
    from tpu_rl.jobs.evaluate import eval_sets
    from tpu_rl.recipes import UserError, all_recipes

    recipe = all_recipes()[RECIPE]
    for item in ("generation_configs.greedy.eval_temperature=0.5", "nosuchkey=1"):
        with pytest.raises(UserError, match=re.escape(f"--set {item.partition('=')[0]}: not a key MaxText")):
            eval_sets(recipe, "rl", (), (item,))
