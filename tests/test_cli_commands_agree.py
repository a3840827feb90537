"""Commands agree about the same settings and cloud state (issue 18, part 2), against the local peers:

- read-only commands (`status`, `runs`, `logs`, `metrics`, and `cancel`, which only deletes what runs)
  and `run` start without RESERVATION and AUTHORIZED_CIDR, which only deploy (and preflight) read
  (tests/test_settings_needs.py runs every command with only what recipes/settings/specs.py says it needs);
- a missing bucket stops `run` before it touches the cluster (the bad-input table has a row per command).
"""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from cli_helpers import fits_80_columns_with_whole_paths
from tpu_rl.jobs import render_manifests
from peers.fixtures import jobset_of, peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()
DEPLOY_ONLY = ("RESERVATION", "AUTHORIZED_CIDR")


@pytest.fixture
def teammate(cloud, monkeypatch):
    """The healthy peers, and settings without what only deploy needs."""
    for name in DEPLOY_ONLY:
        monkeypatch.delenv(name)
    return cloud


def test_status_needs_no_reservation_or_authorized_cidr(teammate):
    put_step_output(teammate["gcs"], get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    assert "output verified" in result.output
    assert not any(name in result.output for name in DEPLOY_ONLY), result.output


def test_runs_needs_no_reservation_or_authorized_cidr(teammate):
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"no run of {RECIPE} in gs://rl-test-artifacts/"), result.output


def test_logs_needs_no_reservation_or_authorized_cidr(teammate):
    teammate["kube"].plan(jobset_of(RECIPE, "convert"), outcome="hang", logs="converting layer 1\n")
    teammate["kube"].put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["convert"], "running")
    result = runner.invoke(app, ["logs", RECIPE, "convert"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["converting layer 1"]


def test_metrics_needs_no_reservation_or_authorized_cidr(teammate, tmp_path):
    from cli_helpers import RUN_RL, upload_run

    from tpu_rl.recipes.runs.spec import default_run_name

    upload_run(teammate["gcs"], tmp_path, default_run_name(spec_of(get_recipe(RECIPE))), RUN_RL)
    result = runner.invoke(app, ["metrics", RECIPE])
    assert result.exit_code == 0, result.output
    assert "rewards/train/mean" in result.output


def test_cancel_needs_no_reservation_or_authorized_cidr(teammate):
    result = runner.invoke(app, ["cancel", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("nothing to cancel"), result.output


def test_run_reads_neither_so_needs_neither_but_preflight_checks_the_reservation(teammate):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])  # the stack holds the reservation and the allowlist
    assert result.exit_code == 0, result.output
    assert not any(name in result.output for name in DEPLOY_ONLY), result.output
    result = runner.invoke(app, ["preflight", RECIPE])  # preflight looks the reservation up
    assert result.exit_code == 2, result.output
    assert "RESERVATION is not set, but recipe 'qwen3-v6e32' uses capacity 'reservation'" in result.output


def test_run_with_a_missing_bucket_stops_before_it_reads_the_cluster(cloud):
    cloud["gcs"].bucket("rl-test-artifacts").delete(force=True)  # with the driver's staged wheels in it
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "error: bucket gs://rl-test-artifacts does not exist: deploy the artifacts stack (`npx cdktf deploy "
        "artifacts`) or fix GCS_BUCKET"]
    assert cloud["kube"].requests == [] and cloud["kube"].secrets == {}


@pytest.mark.parametrize("name, magic", [("curves.svg", b"<svg"), ("curves.PDF", b"%PDF-"), ("curves.png", b"\x89PNG")])
def test_metrics_picture_is_in_the_format_its_extension_names(settings_env, gcs, tmp_path, name, magic):
    from cli_helpers import RUN_RL, upload_run

    upload_run(gcs, tmp_path, "rl", RUN_RL)
    picture = tmp_path / name
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--png", str(picture)])
    assert result.exit_code == 0, result.output
    head = picture.read_bytes()[:400]
    assert (magic in head) if magic == b"<svg" else head.startswith(magic), head[:40]


def test_metrics_picture_with_another_extension_is_one_line_before_anything_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # any read of the bucket would fail
    picture = tmp_path / "curves.jpg"
    result = runner.invoke(app, ["metrics", RECIPE, "--from", str(tmp_path), "--png", str(picture)])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"error: --png {picture}: '.jpg' is not a format it writes: name the file .png, .svg or .pdf"]
    assert not picture.exists()


def test_preflight_lines_fit_80_columns_under_the_check_name_with_urls_whole(settings_env, gcs, google, monkeypatch):
    from cli_helpers import CONSOLE, with_quota
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(48, 32))
    result = runner.invoke(app, ["preflight", RECIPE])
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED, result.output
    lines = result.output.splitlines()
    assert fits_80_columns_with_whole_paths(result.output), result.output  # an image reference stays whole
    start = next(index for index, line in enumerate(lines) if line.startswith("FAIL  preemptible quota: "))
    message = [lines[start], *itertools.takewhile(lambda line: line.startswith("      "), lines[start + 1:])]
    # The same words as the one-line message, the URL whole on its own line.
    assert " ".join(" ".join(message).split()) == (
        "FAIL  preemptible quota: preemptible TPU v6e quota in us-east5 (PREEMPTIBLE_TPU_V6E) is 48 chips, 32 in "
        "use, 16 free; recipe 'qwen3-v6e32' needs 32 chips for spot: wait until the TPUs using it are gone, or "
        f"request more at {CONSOLE}").replace("FAIL  ", "FAIL ")
    assert f"      {CONSOLE}" in message


def test_the_training_line_has_the_elapsed_time_and_the_time_left_from_the_pace_in_80_columns():
    from datetime import datetime, timedelta, timezone

    from tpu_rl.scripts.pipeline.progress import StepPace, training_line
    from tpu_rl.scripts.rundata.progress import TrainProgress

    pace, start = StepPace(), datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    assert pace.seconds_left(0, TrainProgress(10, 0.5), 50, start) is None  # one step seen: no pace yet
    assert pace.seconds_left(0, TrainProgress(10, 0.5), 50, start + timedelta(seconds=50)) is None
    # Steps 10 -> 12 took 120 s: 60 s a step, 38 steps to go = 2280 s, 30 s of which passed since step 12.
    seen = start + timedelta(seconds=120)
    assert pace.seconds_left(0, TrainProgress(12, 0.412), 50, seen) == 2280
    left = pace.seconds_left(0, TrainProgress(12, 0.412), 50, seen + timedelta(seconds=30))
    assert left == 2250
    line = training_line("train", TrainProgress(12, 0.412), 50, 0.37, "0:12:03 elapsed", left)
    assert line == "train: step 12/50, loss 0.412, reward 0.37, 0:12:03 elapsed, 0:37:30 left"
    # Wide numbers still fit: a run ten times the recipes' 50 steps, a negative loss, hours to go.
    wide = training_line("train", TrainProgress(480, -0.01234), 500, 0.375, "9:59:59 elapsed", 9 * 3600 + 3599)
    assert wide == "train: step 480/500, loss -0.01234, reward 0.375, 9:59:59 elapsed, 9:59:59 left"
    assert len(wide) <= 80
    # A restart resumes behind the old step: the pace starts afresh.
    assert pace.seconds_left(1, TrainProgress(8, 0.5), 50, seen + timedelta(seconds=60)) is None
    assert training_line("train", None, 50, None, "0:01:00 elapsed", None) is None


def test_vm_status_while_train_runs_shows_its_step_loss_and_reward(settings_env, gcs, google, tmp_path):
    from contracts.tunix_log import train_step_line
    from tpu_rl.jobs.paths import ArtifactPaths
    from tpu_rl.jobs.vm import DONE, STARTING
    from peers.event_files import put_event_files
    from peers.fixtures import SETTINGS, deploy_vm
    from vm_helpers import RECIPE as VM_RECIPE
    from vm_helpers import VM, finish, progress

    deploy_vm(google, SETTINGS)  # with the recipe's own startup script, which status checks first
    finish(google, gcs, "convert")()
    put_event_files(gcs, ArtifactPaths(spec_of(get_recipe(VM_RECIPE)), peer_settings()).tensorboard,
                    {"rewards/train/mean": [(2, 0.37)]}, tmp_path)
    google.serial[VM] = (progress("convert", STARTING) + progress("convert", DONE) + progress("train", STARTING)
                         + f"startup-script: {train_step_line(3, 0.5)}\n")
    result = runner.invoke(app, ["status", VM_RECIPE])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    train = next(index for index, line in enumerate(lines) if line.startswith("train "))
    assert lines[train:train + 2] == ["train    running, no output yet", "         step 3/50, loss 0.5, reward 0.37"]
    assert lines[train + 2] == "export   waiting, no output yet"
    # issue 37: `runs` shows the step `status` shows, from the same console (the event files hold no loss yet)
    listed = runner.invoke(app, ["runs", VM_RECIPE, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [run["last_step"] for run in json.loads(listed.output)["runs"]] == [3], listed.output


@pytest.mark.parametrize("columns", ["0", "-3", "abc", " "])
def test_a_columns_value_that_is_no_width_counts_as_unset(settings_env, gcs, google, monkeypatch, columns):
    """COLUMNS=0 made rich's console 0 wide and textwrap raised `invalid width 0`."""
    from cli_helpers import with_quota
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(48, 32))
    result = runner.invoke(app, ["preflight", RECIPE])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED, result.output
    # unset COLUMNS and no terminal: one line per check, for grep
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert all(line.startswith(("pass  ", "FAIL  ", "error: ")) for line in lines), result.output
    assert any(len(line) > 80 for line in lines), result.output


@pytest.mark.parametrize("command", [["status"], ["logs", "train"], ["cancel", "--yes"], ["eval"]],
                         ids=lambda command: command[0])
def test_a_mistyped_run_is_refused_by_every_command_naming_the_runs_that_exist(cloud, monkeypatch, command):
    # issue 28: `cancel --run no-such-run --yes` said "nothing to cancel" and exited 0, `status` printed an
    # empty table. exp1 has a record in the bucket; exp2 only a JobSet on the cluster (no record yet).
    from cli_helpers import left_running, run_of

    exp1, _ = run_of(run="exp1")
    put_step_output(cloud["gcs"], exp1, "convert")
    cloud["kube"].plan("exp1-train", outcome="hang")
    left_running(cloud, monkeypatch, "--run", "exp1")
    exp2, _ = run_of(run="exp2")
    cloud["kube"].put_jobset(render_manifests(spec_of(exp2), peer_settings())["train"], "running")
    before = set(cloud["kube"].jobsets)
    result = runner.invoke(app, [command[0], RECIPE, *command[1:], "--run", "no-such-run"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    trained = "gs://rl-test-artifacts/qwen3-30b-a3b/trained/"
    where = ("the cluster's JobSets (runs: exp1, exp2)" if command[0] == "logs"  # logs reads no bucket on GKE
             else f"{trained} or the cluster's JobSets (runs: exp1, exp2)")
    assert result.output.splitlines() == [
        f"error: --run 'no-such-run': no run of {RECIPE} by that name in {where}: pass one of those "
        f"(`tpu-rl runs {RECIPE}` lists them)"]
    assert set(cloud["kube"].jobsets) == before and not cloud["kube"].deleted
    for known in ("exp1", "exp2"):  # the runs that exist are read as before
        if command[0] in ("status", "logs"):
            again = runner.invoke(app, [command[0], RECIPE, *command[1:], "--run", known])
            assert again.exit_code == 0, again.output


@pytest.mark.parametrize("command, says", [
    ("status", "Select the run started with this --set item"), ("logs", "Select the run started with this --set item"),
    ("cancel", "Select the run started with this --set item"), ("eval", "An evaluation key for this evaluation only"),
])
def test_set_on_the_commands_that_read_a_run_says_it_selects_it_not_that_it_changes_it(command, says):
    # issue 28: their --set help was run's ("Override a MaxText key of the train step ... Changes the run name").
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert says in text and "Override a MaxText key" not in text, text


BOX = set("┃│━─┏┓┗┛┡┩└┘┌┐╇┼")


def test_piped_output_is_plain_lines_not_a_box_table(cloud, monkeypatch):
    # issue 28: `tpu-rl recipes | less` was a box table as wide as its longest row. Piped (no terminal, no
    # COLUMNS): one fact a line; a terminal as wide as the table still gets the table.
    from tpu_rl.jobs.paths import ArtifactPaths
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.scripts.cloud import gcs as bucket

    paths = ArtifactPaths(RunSpec.requested(get_recipe(RECIPE), (), "exp1"), peer_settings())
    bucket.write_json(cloud["gcs"], paths.run_record, {"recipe": RECIPE, "status": "succeeded", "steps": {}})
    monkeypatch.delenv("COLUMNS", raising=False)
    for command, first in ((["recipes"], "tpu-rl recipes (cost: "), (["runs", RECIPE], f"{RECIPE}: runs in gs://")):
        piped = runner.invoke(app, command)
        assert piped.exit_code == 0, piped.output
        assert piped.output.startswith(first) and not BOX & set(piped.output), piped.output
        wide = runner.invoke(app, command, env={"COLUMNS": "400"})
        assert wide.exit_code == 0 and BOX & set(wide.output), wide.output
