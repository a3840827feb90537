"""Held-out accuracy: MaxText's evaluation lines (built from the wheels' format strings with absl's prefix,
tests/contracts/tunix_log.py) shown by `run` as they arrive, kept in run.json, summed up at the end, and
read back from Cloud Logging (a local peer answering entries:list in the API's JSON shape) once the head's
pod is gone or when `run` was not attached; on the VM from the serial console."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli_helpers import MIDDLE, POST, PRE, RESUMED_PRE
from contracts.tunix_log import evaluation_line, train_step_line
from tpu_rl.jobs.k8s import MAIN_CONTAINER
from tpu_rl.jobs.paths import ArtifactPaths
from peers.fixtures import SETTINGS, jobset_of, peer_settings, put_step_output, spec_of
from peers.google_apis import container_log_entry
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud import gcs as gcs_io
from tpu_rl.scripts.rundata.evaluation import accuracy_points, parse_evaluations, summary_line

RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"
runner = CliRunner()

# 26/64 = 40.625%, 38/64 = 59.375%: the change is +18.75 points.
SUMMARY = "accuracy 40.6% → 59.4% (+18.8) on 64 gsm8k test questions"


def record_of(client, recipe_name: str = RECIPE) -> dict:
    return gcs_io.read_json(client, ArtifactPaths(spec_of(get_recipe(recipe_name)), peer_settings()).run_record)


def test_both_releases_lines_parse_with_their_steps():
    for maxtext in ("0.2.3", "0.2.4"):
        text = "\n".join([evaluation_line("pre", 26, 64, 30, 50, 0.8123, maxtext=maxtext),
                          train_step_line(20, 0.3, maxtext), evaluation_line("intermediate", 33, 64, 36, 60, 1.25,
                                                                               step=20, maxtext=maxtext),
                          train_step_line(50, 0.2, maxtext), evaluation_line("post", 38, 64, 40, 63, 1.9,
                                                                               maxtext=maxtext)])
        found = parse_evaluations(text)
        assert [(e.phase, e.step, e.corr, e.total) for e in found] == [
            ("pre", 0, 26, 64), ("intermediate", 20, 33, 64), ("post", 50, 38, 64)], maxtext
        assert found[0].accuracy == 40.625 and found[0].format_accuracy == 78.125 and found[0].mean_reward == 0.8123


def test_the_lines_carry_absls_warning_prefix_and_parse_from_it():
    # max_logging.warning (absl logging.warning, stacklevel=2) at maxtext 0.2.4 train_rl.py L785 and L823,
    # hooks.py L98: severity W, then MMDD HH:MM:SS.micro, the thread id in 5 columns, caller file:line]
    # (abseil-py absl/logging/__init__.py get_absl_log_prefix). Written out here, not rebuilt.
    pre = evaluation_line("pre", 26, 64, 30, 50, 0.8123)
    assert pre.startswith("W0805 12:40:30.123456 140234 train_rl.py:785] Pre RL Training: corr=26, total=64, ")
    middle = evaluation_line("intermediate", 33, 64, 36, 60, 1.25, step=20, second=40)
    assert middle.startswith("W0805 12:40:40.123456 140234 hooks.py:98] Intermediate Eval (step=20): corr=33")
    for line in (pre, middle):
        [found] = parse_evaluations(line, last_step=20)
        assert found.line == line  # the record keeps the line from absl's prefix on
    # Another severity is not MaxText's evaluation line: its prefix is not kept as one.
    [info] = parse_evaluations("I" + pre[1:])
    assert not info.line.startswith("I0805")


def test_a_pass_at_1_count_and_a_nan_reward_parse():
    # eval_mode pass_at_1 sums fractions (evaluate_rl.score_responses), so corr is a float.
    line = evaluation_line("post", 12.5, 64, 20, 60, float("nan"))
    [found] = parse_evaluations(line, last_step=50)
    assert found.corr == 12.5 and found.accuracy == 19.53125 and found.mean_reward is None and found.step == 50


def test_a_resumed_step_keeps_the_latest_evaluation_in_the_curve():
    # of 64 questions: 26 (40.625%), 29 at step 20, 28 after a resume (step unknown), 30 at step 20 again, 35 after
    lines = [evaluation_line("pre", 26, 64, 30, 50, 0.8), train_step_line(20, 0.3),
             evaluation_line("intermediate", 29, 64, 30, 50, 0.9, step=20), evaluation_line("pre", 28, 64, 30, 50, 0.9),
             evaluation_line("intermediate", 30, 64, 30, 50, 1.0, step=20), train_step_line(50, 0.2),
             evaluation_line("post", 35, 64, 30, 50, 1.1)]
    entries = [e.as_record() for e in parse_evaluations("\n".join(lines))]
    assert [(e["phase"], e["step"]) for e in entries] == [("pre", 0), ("intermediate", 20), ("pre", None),
                                                          ("intermediate", 20), ("post", 50)]
    assert accuracy_points(entries) == ([0, 20, 50], [40.625, 46.875, 54.6875])


def test_the_summary_names_the_eval_set_the_overrides_choose():
    entries = [e.as_record() for e in parse_evaluations(f"{PRE}\n{POST}")]
    assert summary_line(entries, ["eval_dataset_name=openai/gsm8k"]) == SUMMARY
    assert summary_line(entries, ["eval_dataset_name='nvidia/OpenMathInstruct-2'", "eval_split=train"]) == (
        "accuracy 40.6% → 59.4% (+18.8) on 64 OpenMathInstruct-2 train questions")
    assert summary_line([], []) is None


def test_run_shows_each_evaluation_as_it_arrives_and_records_them(cloud):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    early = f"loading\n{PRE}\n"
    middle = early + f"{train_step_line(20, 0.3)}\n{MIDDLE}\n"
    done = middle + f"{train_step_line(50, 0.2)}\n{POST}\n"
    cloud["kube"].plan(jobset_of(RECIPE, "train"), ticks=4, log_reads=["loading\n", early, middle, done],
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "train: accuracy 40.6% (26/64) before training, format 78.1%, reward 0.812" in lines
    assert "train: accuracy 51.6% (33/64) at step 20, format 93.8%, reward 1.25" in lines
    assert "train: accuracy 59.4% (38/64) after training, format 98.4%, reward 1.9" in lines
    assert SUMMARY in lines and lines.index(SUMMARY) < lines.index("next:")
    evaluations = record_of(cloud["gcs"])["evaluations"]
    assert [(e["phase"], e["step"], e["corr"], e["source"]) for e in evaluations] == [
        ("pre", 0, 26, "log"), ("intermediate", 20, 33, "log"), ("post", 50, 38, "log")]
    assert not cloud["google"].log_queries  # the pod's own log had them all


def _stamp(minutes: float) -> str:
    """An entry's timestamp `minutes` from now (the run's record is created now)."""
    from datetime import datetime, timedelta, timezone

    return (datetime.now(timezone.utc) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _log_entries(recipe_name: str, lines: list[str]) -> list[dict]:
    pod = f"{jobset_of(recipe_name, 'train')}-pathways-head-0-0-x7k2p"
    return [container_log_entry(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"], pod, MAIN_CONTAINER,
                                line, _stamp(1 + index)) for index, line in enumerate(lines)]


def test_cloud_logging_fills_the_record_when_the_heads_pod_is_gone(cloud):
    recipe = get_recipe(RECIPE)
    kube, google = cloud["kube"], cloud["google"]
    put_step_output(cloud["gcs"], recipe, "convert")

    def finished():
        put_step_output(cloud["gcs"], recipe, "train")
        for pod in kube._pods_of(jobset_of(RECIPE, "train")):  # the JobSet's TTL deleted its pods
            del kube.pods[pod["metadata"]["name"]]

    kube.plan(jobset_of(RECIPE, "train"), ticks=2, logs="loading\n", on_success=finished)
    # Another run's head must not count, nor a line of this run's name logged before the run started.
    other = container_log_entry(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"],
                                "qwen3-v6e32-other-train-pathways-head-0-0-abcde", MAIN_CONTAINER, MIDDLE, _stamp(1))
    [older] = _log_entries(RECIPE, [MIDDLE])
    older["timestamp"] = _stamp(-60 * 24 * 40)
    # ':' would also match a run whose name ends with this one's (x-<run>), and another resource type.
    [suffixed, node] = _log_entries(RECIPE, [MIDDLE, MIDDLE])
    suffixed["resource"]["labels"]["pod_name"] = "x-" + suffixed["resource"]["labels"]["pod_name"]
    node["resource"]["type"] = "k8s_pod"
    google.log_entries += [other, older, suffixed, node, *_log_entries(RECIPE, [PRE, train_step_line(50, 0.2), POST])]
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert SUMMARY in result.output.splitlines()
    evaluations = record_of(cloud["gcs"])["evaluations"]
    assert [(e["phase"], e["step"], e["source"]) for e in evaluations] == [
        ("pre", 0, "cloud logging"), ("post", 50, "cloud logging")]
    [query] = google.log_queries
    assert query["resourceNames"] == [f"projects/{SETTINGS['PROJECT']}"] and query["orderBy"] == "timestamp asc"
    assert f'resource.labels.container_name="{MAIN_CONTAINER}"' in query["filter"]
    assert f'resource.labels.pod_name=~"^{jobset_of(RECIPE, "train")}' in query["filter"]
    assert 'timestamp>="' in query["filter"]  # from the run's start: entries:list has no default time range


def test_a_train_done_without_run_attached_gets_its_evaluations_from_cloud_logging(cloud, monkeypatch):
    from tpu_rl.scripts.cloud import cloud_logging

    monkeypatch.setattr(cloud_logging, "PAGE_SIZE", 1)  # every entry on its own page: the token is followed
    recipe = get_recipe(RECIPE)
    for step in ("convert", "train"):
        put_step_output(cloud["gcs"], recipe, step)
    cloud["google"].log_entries += _log_entries(RECIPE, [PRE, MIDDLE, POST])
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert SUMMARY in result.output.splitlines()
    assert [e["phase"] for e in record_of(cloud["gcs"])["evaluations"]] == ["pre", "intermediate", "post"]
    assert len(cloud["google"].log_queries) == 3 and cloud["google"].log_queries[-1]["pageToken"] == "2"
    # A second run finds them in the record and asks Cloud Logging nothing.
    assert runner.invoke(app, ["run", RECIPE, "--steps", "train"]).exit_code == 0
    assert len(cloud["google"].log_queries) == 3


def test_a_cloud_logging_error_is_a_warning(cloud):
    from peers.http import Fault

    recipe = get_recipe(RECIPE)
    for step in ("convert", "train"):
        put_step_output(cloud["gcs"], recipe, step)
    cloud["google"].faults.append(Fault("POST", "/v2/entries:list", 403))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    # the run's driver reads it, whose Google account has no logging role: a warning, never a failure
    assert ("! evaluations not filled in: the run's driver may not read Cloud Logging (reading Cloud Logging "
            "failed: HTTP 403") in result.output


def test_the_vm_reads_its_evaluations_from_the_console(settings_env, gcs, google):
    from vm_helpers import console, finish, progress
    from tpu_rl.jobs.vm import STARTING
    from peers.fixtures import SETTINGS, deploy_vm

    deploy_vm(google, SETTINGS)  # with the recipe's own startup script, which run checks first
    finish(google, gcs, "convert")()
    agent = "".join(f"startup-script: {line}\n" for line in (
        evaluation_line("pre", 3, 10, 3, 6, 0.5, maxtext="0.2.3"), train_step_line(50, 0.2, "0.2.3"),
        evaluation_line("post", 6, 10, 6, 10, 1.5, maxtext="0.2.3")))
    google.on_serial_read += [console(google, progress("train", STARTING) + agent), finish(google, gcs, "train")]
    result = runner.invoke(app, ["run", VM_RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert "accuracy 30.0% → 60.0% (+30.0) on 10 gsm8k test questions" in result.output.splitlines()
    record = record_of(gcs, VM_RECIPE)
    assert [(e["phase"], e["step"], e["source"]) for e in record["evaluations"]] == [("pre", 0, "console"),
                                                                                   ("post", 50, "console")]
    assert json.dumps(record)  # still plain JSON


def test_the_experiments_page_states_each_recipes_evaluation_cost():
    from pathlib import Path

    from tpu_rl.recipes import all_recipes
    from tpu_rl.recipes.costs.run import evaluation_table

    page = (Path(__file__).resolve().parents[1] / "docs" / "experiments.md").read_text()
    assert evaluation_table(list(all_recipes().values())) in page


# -- review of issue 17: a resumed attempt's Pre is not the accuracy before training -----------------------


def _resumed_train(cloud, head_log: str) -> None:
    """`run` was not attached to attempt 1 (it logged PRE, trained to checkpoint 20 and was preempted);
    the rerun's attempt restores checkpoint 20, evaluates it as Pre and trains on. Cloud Logging kept both
    attempts' lines."""
    from contracts.tunix_log import restored_line
    from peers.fixtures import put_checkpoint

    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    put_checkpoint(cloud["gcs"], ArtifactPaths(spec_of(recipe), peer_settings()), 20)
    cloud["kube"].plan(jobset_of(RECIPE, "train"), ticks=3, logs=head_log,
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    cloud["google"].log_entries += _log_entries(RECIPE, [PRE, MIDDLE, restored_line(20), RESUMED_PRE, POST])


def test_a_resumed_attempts_pre_is_not_before_training_and_the_real_one_comes_from_cloud_logging(cloud):
    from contracts.tunix_log import restored_line

    _resumed_train(cloud, f"{restored_line(20)}\n{RESUMED_PRE}\n{train_step_line(50, 0.2)}\n{POST}\n")
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert "train: accuracy 51.6% (33/64) at resume from step 20, format 93.8%, reward 1.2" in result.output
    assert SUMMARY in result.output.splitlines()  # 40.6% before, from attempt 1's line in Cloud Logging
    steps = {(e["phase"], e["corr"]): e["step"] for e in record_of(cloud["gcs"])["evaluations"]}
    assert steps[("pre", 33.0)] == 20 and steps[("pre", 26.0)] == 0


def test_a_resumed_pre_whose_restore_line_left_the_tail_is_not_before_training(cloud, monkeypatch):
    """The tail `run` polls may have lost the restore line (qwen3 logs debug lines): a new Pre read from a
    tail while the bucket holds a finished checkpoint is a resumed attempt's."""
    from tpu_rl.scripts.pipeline.gke import submit

    monkeypatch.setattr(submit, "_head_log", lambda session, job: None)  # the pod is gone at the end
    _resumed_train(cloud, f"{RESUMED_PRE}\n{train_step_line(50, 0.2)}\n{POST}\n")
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert "train: accuracy 51.6% (33/64) at resume, format 93.8%, reward 1.2" in result.output
    assert SUMMARY in result.output.splitlines()


def test_a_resumed_pre_read_from_a_tail_says_at_resume_step_unknown_in_run_json(cloud, monkeypatch):
    """run.json says in words what is known of each evaluation's step: the tail's Pre (its restore line
    gone, a finished checkpoint in the bucket) is "at resume, step unknown", not "before training"."""
    from tpu_rl.scripts.pipeline.gke import submit

    monkeypatch.setattr(submit, "_head_log", lambda session, job: None)
    _resumed_train(cloud, f"{RESUMED_PRE}\n{train_step_line(50, 0.2)}\n{POST}\n")
    assert runner.invoke(app, ["run", RECIPE, "--steps", "train"]).exit_code == 0
    when = {(e["phase"], e["corr"]): (e["step"], e["when"]) for e in record_of(cloud["gcs"])["evaluations"]}
    assert when[("pre", 33.0)] == (None, "at resume, step unknown")
    assert when[("pre", 26.0)] == (0, "before training")  # attempt 1's, from Cloud Logging
    assert when[("post", 38.0)] == (50, "after training")


def test_a_tail_pre_is_not_before_training_when_the_bucket_cannot_say_whether_the_attempt_resumed():
    """Only an attempt known to start at step 0 has its Pre "before training": when the bucket's
    checkpoints cannot be listed, a tail's Pre is recorded at step None."""
    from types import SimpleNamespace

    from tpu_rl.scripts.pipeline.accuracy import EvaluationWatch

    def unreadable():
        raise OSError("no route to storage.googleapis.com")

    from tpu_rl.recipes import get_recipe

    # its 50 steps are the last one an evaluation after training can be at (trained_steps)
    session = SimpleNamespace(recipe=get_recipe("qwen3-v6e32"), console=SimpleNamespace(print=lambda *a: None),
                              clients=SimpleNamespace(storage=unreadable), paths=None)
    record = SimpleNamespace(data={}, write=lambda: None)
    assert EvaluationWatch(session, record).see(f"{RESUMED_PRE}\n", tail=True) == 1
    [entry] = record.data["evaluations"]
    assert (entry["step"], entry["when"]) == (None, "at resume, step unknown")
    whole = SimpleNamespace(data={}, write=lambda: None)  # a whole log: the line's own reading stands
    assert EvaluationWatch(SimpleNamespace(**{**vars(session), "clients": None}), whole).see(f"{PRE}\n") == 1
    assert whole.data["evaluations"][0]["when"] == "before training"


def test_an_evaluation_after_training_without_a_step_in_its_text_is_at_the_step_reached(monkeypatch):
    """qwen3-v6e32 could train 50 steps (trained_steps), but a run can stop below (long prompts dropped): the
    Post line logs no step, so it is put at the last train step logged in an earlier text, else at the
    bucket's newest finished checkpoint (tunix saves the step it reached on close), never above them."""
    from types import SimpleNamespace

    from tpu_rl.scripts.pipeline import accuracy

    session = SimpleNamespace(recipe=get_recipe(RECIPE), console=SimpleNamespace(print=lambda *a: None),
                              clients=SimpleNamespace(storage=lambda: None), paths=None)
    record = SimpleNamespace(data={}, write=lambda: None)
    watch = accuracy.EvaluationWatch(session, record)
    watch.see(f"{train_step_line(36, 0.2)}\n{train_step_line(37, 0.2)}\n")  # a poll with no evaluation
    assert watch.see(f"{POST}\n") == 1
    assert (record.data["evaluations"][0]["step"], record.data["evaluations"][0]["when"]) == (37, "after training")

    monkeypatch.setattr(accuracy.gcs, "latest_checkpoint_step", lambda storage, paths: 41)
    fresh = SimpleNamespace(data={}, write=lambda: None)  # a text with the Post only: Cloud Logging's
    assert accuracy.EvaluationWatch(session, fresh).see(f"{POST}\n") == 1
    assert fresh.data["evaluations"][0]["step"] == 41
