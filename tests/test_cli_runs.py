"""`tpu-rl runs` against the local peers: runs started by `tpu-rl run` (fake Kubernetes API, GCS emulator),
their records, and event files written by tensorboardX under each run's tensorboard/ as train_rl writes them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli_helpers import POST, PRE, names, plan_success, record, run_of
from tpu_rl.jobs.paths import split_gs_url
from peers.event_files import put_event_files
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.rundata.evaluation import parse_evaluations

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def edit_record(gcs, paths, **fields) -> None:
    """The run's record with `fields`, and each step billed 0 s: the peer's steps last about a second, which
    a loaded machine stretches to a few, so the cost (billed_usd) is pinned like the times are."""
    data = record(gcs, paths)
    data.update(fields)
    for entry in data["steps"].values():
        for phase in entry.get("phases") or []:
            phase["seconds"] = 0
        if not entry.get("phases") and entry.get("ended"):
            entry["ended"] = entry.get("started")
    bucket, name = split_gs_url(paths.run_record)
    gcs.bucket(bucket).blob(name).upload_from_string(json.dumps(data))


def three_runs(cloud, tmp_path) -> tuple[str, str, str]:
    """A run that succeeded, one whose train failed, a directory with event files only, and a run of another
    recipe with the same model; returns the names of the first three."""
    first, first_paths = run_of()
    plan_success(cloud, first)
    assert runner.invoke(app, ["run", RECIPE]).exit_code == 0
    second, second_paths = run_of("learning_rate=1e-5")
    cloud["kube"].plan(names(second)["train"], outcome="fail")
    assert runner.invoke(app, ["run", RECIPE, "--set", "learning_rate=1e-5"]).exit_code == 1
    # Fixed times, so that the durations are known: 2:13:05 and 0:30:00.
    evaluations = [e.as_record() for e in parse_evaluations(f"{PRE}\n{POST}", last_step=50)]
    edit_record(cloud["gcs"], first_paths, created="2026-11-30T10:00:00+00:00", ended="2026-11-30T12:13:05+00:00",
                evaluations=evaluations)
    edit_record(cloud["gcs"], second_paths, created="2026-11-30T13:00:00+00:00", ended="2026-11-30T13:30:00+00:00")
    put_event_files(cloud["gcs"], first_paths.tensorboard, {
        "rewards/train/mean": [(0, 0.1), (49, 0.37)], "actor/train/loss": [(1, 0.5), (50, 0.2)]}, tmp_path / "a")
    put_event_files(cloud["gcs"], second_paths.tensorboard, {
        "rewards/train/mean": [(0, 0.05), (11, 0.125)], "actor/train/loss": [(12, 0.4)]}, tmp_path / "b")
    trained = first_paths.trained
    put_event_files(cloud["gcs"], f"{trained}old-run/tensorboard/", {"rewards/train/mean": [(3, 0.2)]}, tmp_path / "c")
    bucket, prefix = split_gs_url(f"{trained}other-recipe-run/run.json")
    cloud["gcs"].bucket(bucket).blob(prefix).upload_from_string(json.dumps({"recipe": "qwen3-other", "status": "failed"}))
    return first_paths.run_name, second_paths.run_name, "old-run"


def test_runs_fit_80_columns_with_each_runs_steps_step_reward_start_and_duration(cloud, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    first, second, old = three_runs(cloud, tmp_path)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    # What the idle cluster still bills follows (tests/test_cli_billing.py): no run is active or queued.
    idle = next(index for index, line in enumerate(lines) if line.startswith(f"no run of {RECIPE} is active"))
    assert "the reservation's 32 chips bill" in " ".join(lines[idle:])  # recipes/costs/standing.py account
    assert lines[:idle] == [
        f"{RECIPE}: runs in gs://rl-test-artifacts/qwen3-30b-a3b/trained/",
        f"{first}  succeeded, step 50/50, reward 0.37, cost $0.00",  # its steps took no time here
        "  accuracy 40.6→59.4 (held-out, before → after training)",
        "  steps    convert succeeded, train succeeded, export succeeded",
        "  started  2026-11-30 10:00 UTC, took 2:13:05",
        f"{second}  failed, step 12/50, reward 0.125, cost $0.00",
        "  steps    convert verified, train failed, export waiting",
        "  started  2026-11-30 13:00 UTC, took 0:30:00",
        "  differs  learning_rate=1e-5",
        f"{old}  no run.json, step -, reward 0.2, cost -",
        "  steps    convert -, train -, export -",
        "  started  -, took -",
        "(1 run of other recipes with the same model is not shown)"], result.output


def test_runs_in_a_wide_terminal_is_one_table(cloud, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "230")
    first, _, _ = three_runs(cloud, tmp_path)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "reward" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")] == [
        "run", "status", "convert", "train", "export", "step", "accuracy", "reward", "cost", "started", "took",
        "differs"]
    row = next(line for line in result.output.splitlines() if first in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        first, "succeeded", "succeeded", "succeeded", "succeeded", "50/50", "40.6→59.4", "0.37", "$0.00",
        "2026-11-30 10:00 UTC", "2:13:05", "-"]


def test_runs_json(cloud, tmp_path):
    first, second, old = three_runs(cloud, tmp_path)
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["other_recipes"] == 1 and [run["run"] for run in data["runs"]] == [first, second, old]
    failed = data["runs"][1]
    assert failed == {
        "run": second, "status": "failed", "steps": {"convert": "verified", "train": "failed", "export": "waiting"},
        "last_step": 12, "train_steps": 50, "reward": 0.125, "started": "2026-11-30T13:00:00+00:00",
        "ended": "2026-11-30T13:30:00+00:00", "duration_seconds": 1800,
        "record": f"gs://rl-test-artifacts/qwen3-30b-a3b/trained/{second}/run.json",
        "accuracy_before": None, "accuracy_after": None, "differs": ["learning_rate=1e-5"], "accuracy_resumed": None,
        "sweep": None, "queued": None, "cost_usd": 0.0, "accuracy_post": None, "held_out": "",
        "accuracy_after_step": None, "left_running": ""}
    assert (data["runs"][0]["accuracy_before"], data["runs"][0]["accuracy_after"]) == (40.625, 59.375)


def test_no_runs_says_how_to_start_one(cloud):
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"no run of {RECIPE} in gs://rl-test-artifacts/qwen3-30b-a3b/trained/ yet: start one with `tpu-rl run {RECIPE}`")
    assert result.output.splitlines()[1].startswith(f"no run of {RECIPE} is active or queued on cluster rl-test")


def test_runs_marks_an_accuracy_at_resume_of_unknown_step_instead_of_showing_it_as_before(cloud, tmp_path,
                                                                                          monkeypatch):
    """A run whose record has no evaluation known to be before training, only a resumed attempt's Pre of an
    unknown step (scripts/pipeline/accuracy.py): `runs` shows it marked, with the words, never as before."""
    from cli_helpers import RESUMED_PRE

    first, second, _ = three_runs(cloud, tmp_path)
    _, paths = run_of("learning_rate=1e-5")
    resumed = [{**e.as_record(), "step": None, "when": "at resume, step unknown"} if e.phase == "pre"
               else e.as_record() for e in parse_evaluations(f"{RESUMED_PRE}\n{POST}", last_step=50)]
    edit_record(cloud["gcs"], paths, evaluations=resumed)
    data = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)
    row = next(run for run in data["runs"] if run["run"] == second)
    assert (row["accuracy_before"], row["accuracy_resumed"], row["accuracy_after"]) == (None, 51.5625, 59.375)
    monkeypatch.setenv("COLUMNS", "200")
    wide = runner.invoke(app, ["runs", RECIPE])
    assert wide.exit_code == 0, wide.output
    assert "51.6*→59.4" in wide.output and "40.6→59.4" in wide.output
    assert "* at resume, step unknown: no evaluation before training was logged" in wide.output.splitlines()
    monkeypatch.setenv("COLUMNS", "80")
    narrow = runner.invoke(app, ["runs", RECIPE]).output.splitlines()
    assert "  accuracy 51.6*→59.4 (held-out, before → after training)" in narrow
    assert "  * at resume, step unknown: no evaluation before training was logged" in narrow
    assert max(map(len, narrow)) <= 80


def test_runs_marks_no_accuracy_of_a_pre_at_a_known_resume_step(cloud, tmp_path):
    """A resumed attempt's Pre whose step is known (tunix logged the restored step) is not "step unknown":
    the note would be false, so `runs` shows no accuracy before for it."""
    from cli_helpers import RESUMED_PRE

    _, second, _ = three_runs(cloud, tmp_path)
    _, paths = run_of("learning_rate=1e-5")
    resumed = [{**e.as_record(), "step": 20, "when": "at resume from step 20"} if e.phase == "pre"
               else e.as_record() for e in parse_evaluations(f"{RESUMED_PRE}\n{POST}", last_step=50)]
    edit_record(cloud["gcs"], paths, evaluations=resumed)
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    row = next(run for run in json.loads(result.output)["runs"] if run["run"] == second)
    assert (row["accuracy_before"], row["accuracy_resumed"], row["accuracy_after"]) == (None, None, 59.375)
    assert "step unknown" not in runner.invoke(app, ["runs", RECIPE]).output


def test_runs_mid_training_calls_its_last_evaluation_by_its_step_not_after_training(cloud, tmp_path, monkeypatch):
    """issue 37: mid-run, `runs` printed `accuracy 40.6→51.6 (held-out, before → after training)` where 51.6
    was an evaluation during training. With no Post yet, the second figure is named by its step."""
    from cli_helpers import MIDDLE

    _, second, _ = three_runs(cloud, tmp_path)
    _, paths = run_of("learning_rate=1e-5")
    edit_record(cloud["gcs"], paths, evaluations=[e.as_record() for e in parse_evaluations(f"{PRE}\n{MIDDLE}",
                                                                                            last_step=50)])
    monkeypatch.setenv("COLUMNS", "200")
    wide = runner.invoke(app, ["runs", RECIPE])
    assert wide.exit_code == 0, wide.output
    assert "40.6→51.6 (step 20)" in wide.output
    monkeypatch.setenv("COLUMNS", "80")
    narrow = runner.invoke(app, ["runs", RECIPE]).output.splitlines()
    assert ("  accuracy 40.6→51.6 (held-out, before → step 20; none after training yet)"
            in narrow), narrow
    assert "  accuracy 40.6→59.4 (held-out, before → after training)" in narrow  # the run that finished
    assert max(map(len, narrow)) <= 80
