"""`tpu-rl status` and `tpu-rl logs` on GKE against the local Kubernetes API and the GCS emulator."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from cli_helpers import fits_80_columns_with_whole_paths, status_blocks
from contracts.tunix_log import train_step_line
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.event_files import put_event_files
from peers.fixtures import jobset_of, peer_settings, put_step_output, spec_of
from tpu_rl.jobs import render_manifests
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def test_status_shows_each_step_state_pods_time_and_output_in_80_columns(cloud, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")
    recipe = get_recipe(RECIPE)
    manifests = render_manifests(spec_of(recipe), peer_settings())
    convert = cloud["kube"].put_jobset(manifests["convert"], "succeeded")
    # Times as the API reports them: creation, and the Completed condition's lastTransitionTime.
    convert["metadata"]["creationTimestamp"] = "2026-11-30T10:00:00Z"
    convert["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-30T10:41:12Z"
    put_step_output(cloud["gcs"], recipe, "convert")
    # train runs: the head has logged step 12, and the event files hold a mean reward.
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="hang", logs=f"loading\n{train_step_line(12, 0.412)}\n")
    train = cloud["kube"].put_jobset(manifests["train"], "running")
    paths = ArtifactPaths(spec_of(recipe), peer_settings())
    put_event_files(cloud["gcs"], paths.tensorboard, {"rewards/train/mean": [(11, 0.37)]}, tmp_path)
    # export's config.json is there, the rest is not (a half-written export).
    bucket, name = split_gs_url(f"{paths.hf_export}config.json")
    cloud["gcs"].bucket(bucket).blob(name).upload_from_string(b"{}")
    started = datetime.now(timezone.utc) - timedelta(hours=2, minutes=3)
    train["metadata"]["creationTimestamp"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    run = jobset_of(RECIPE, "train").removesuffix("-train")
    assert result.output.startswith(f"{RECIPE}: run {run}, JobSets {run}-<step>")
    assert f"({jobset_of(RECIPE, 'convert')} for convert), outputs in gs://rl-test-artifacts" in result.output
    blocks = status_blocks(result.output)
    assert blocks["convert"] == ["succeeded, pods done, took 0:41:12", "output verified"], result.output
    # A step with none of its output yet is one line; a running train shows its step, loss and reward.
    assert blocks["train"][0].startswith("running, pods 9/9 ready, 2:03:"), result.output
    assert blocks["train"][0].endswith(" elapsed, no output yet")
    assert blocks["train"][1:] == ["step 12/50, loss 0.412, reward 0.37"], result.output
    assert blocks["export"][0] == "no JobSet" and blocks["export"][1].startswith("output missing:")
    # A path moves to a line of its own, whole, so that a copied path works.
    assert f"gs://rl-test-artifacts/qwen3-30b-a3b/hf-trained/{run}/tokenizer_config.json," in blocks["export"], \
        result.output
    assert cloud["kube"].created == []


def test_logs_prints_the_main_container_of_the_step(cloud):
    recipe = get_recipe(RECIPE)
    step_line = train_step_line(3, 0.25)
    cloud["kube"].plan(jobset_of(RECIPE, "train"), outcome="hang", logs=f"line one\n{step_line}\nline three\n")
    cloud["kube"].put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"], "running")
    result = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [step_line, "line three"]
    [(_, path, _)] = [r for r in cloud["kube"].requests if r[1].endswith("/log") or "/log?" in r[1]]
    assert "container=workload-container" in path and "pathways-head" in path


def _convert(cloud, phase: str, **plan) -> None:
    cloud["kube"].plan(jobset_of(RECIPE, "convert"), outcome="hang", **plan)
    cloud["kube"].put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["convert"], phase)


def test_logs_follow_streams_until_the_container_ends(cloud):
    _convert(cloud, "succeeded", logs="a\nb\n")
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    assert result.exit_code == 0 and result.output.splitlines() == ["a", "b"], result.output
    assert any("follow=true" in path for _, path, _ in cloud["kube"].requests)


def test_logs_follow_starts_from_the_last_tail_lines(cloud):
    _convert(cloud, "succeeded", logs="a\nb\nc\nd\ne\n")
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f", "--tail", "3"])
    assert result.exit_code == 0 and result.output.splitlines() == ["c", "d", "e"], result.output
    [path] = [path for _, path, _ in cloud["kube"].requests if "follow=true" in path]
    assert "tailLines=3" in path


def test_logs_follow_broken_midway_is_reopened_and_loses_no_line(cloud):
    from peers.http import Fault

    _convert(cloud, "succeeded", logs="a\nb\n")
    cloud["kube"].faults.append(Fault("GET", "/log", "cut"))
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    assert result.exit_code == 0 and result.output.splitlines() == ["a", "b"], result.output


def test_logs_follow_reopens_a_dropped_stream_and_ends_in_one_line_when_it_keeps_dropping(cloud):
    """The container runs, but each stream ends (as a dropped one does): each reopening shows only the new
    lines, and once DROPS_WITHOUT_A_LINE reopenings in a row bring none, `logs -f` ends in one line, exit 4."""
    from tpu_rl.scripts.pipeline.gke.log_stream import DROPS_WITHOUT_A_LINE

    _convert(cloud, "running", log_reads=["a\n", "a\nb\n", "a\nb\nc\n"])
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    assert result.exit_code == 4, result.output
    *lines, error = result.output.splitlines()
    assert lines == ["a", "b", "c"]
    pod = next(name for name in cloud["kube"].pods if "convert" in name)
    assert error == (f"error: the log stream of pod {pod} dropped {DROPS_WITHOUT_A_LINE} times in a row with no "
                     "new line while its container runs: the cluster does not serve its log now; run the command "
                     "again")
    follows = [path for _, path, _ in cloud["kube"].requests if "follow=true" in path]
    assert len(follows) == 3 + DROPS_WITHOUT_A_LINE  # three with a new line, then the drops


@pytest.mark.parametrize("phase", ["running", "succeeded"])
def test_logs_follow_answered_minutes_after_a_drop_shows_every_line_once(cloud, phase):
    """The stream drops after a; the reopened stream (the container runs) or the read after it ended is answered
    minutes later by the node's clock, while this machine's monotonic one hardly moved (a laptop asleep stops it;
    a slow answer, retries): b and c, written in between, still come, once. Each asks for the lines from the
    node's second of the last line shown (sinceTime), whatever this machine's clock says. The window of the seconds
    elapsed here and a 10 s margin (sinceSeconds=11 here) lost them."""
    from peers import kueue

    kube, opened = cloud["kube"], datetime.now(timezone.utc)
    # the node's clock: a minute on at each read of the log
    kueue.use_clock(lambda: opened + timedelta(minutes=sum("/log" in path for _, path, _ in kube.requests)))
    try:
        _convert(cloud, phase, log_reads=[[(0, "a")], [(0, "a"), (5, "b"), (30, "c")]])
        result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    finally:
        kueue.use_clock(None)
    assert result.exit_code == (4 if phase == "running" else 0), result.output  # running: it keeps dropping
    assert [line for line in result.output.splitlines() if not line.startswith("error: ")] == ["a", "b", "c"]
    reads = [parse_qs(urlsplit(path).query) for _, path, _ in kube.requests if "/log" in path]
    created = next(pod for name, pod in kube.pods.items() if "convert" in name)["metadata"]["creationTimestamp"]
    after_c = f"{datetime.fromisoformat(created) + timedelta(seconds=30):%Y-%m-%dT%H:%M:%S}Z"
    assert [query.get("sinceTime", [None])[0] for query in reads] == [None, created, *[after_c] * (len(reads) - 2)]
    assert not any("sinceSeconds" in query for query in reads)
    # running: each a stream (follow=true, sinceTime with it); ended: the stream, then one read of what it left
    follows = [query.get("follow", [None])[0] for query in reads]
    assert follows == (["true"] * len(reads) if phase == "running" else ["true", None]), follows


def test_run_with_follow_logs_streams_the_step_logs(cloud):
    cloud["kube"].plan(jobset_of(RECIPE, "convert"), ticks=4, logs="converting layer 1\n",
                       on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert", "--follow-logs"])
    assert result.exit_code == 0, result.output
    assert "converting layer 1" in result.output


def test_status_of_a_step_whose_jobset_is_gone_agrees_with_its_verified_output(cloud, monkeypatch):
    """convert's JobSet deleted after it finished: not `absent` on one line and `output verified` on the next."""
    monkeypatch.setenv("COLUMNS", "80")
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    blocks = status_blocks(result.output)
    assert blocks["convert"] == ["done, no JobSet left", "output verified"], result.output
    assert blocks["train"] == ["no JobSet, no output yet"], result.output


def test_a_jobset_kueue_has_not_admitted_reads_queued_in_plain_words():
    # issue 37: `status` said `suspended (SuspendedJobs)`, JobSet's words for a JobSet Kueue holds in its queue.
    from tpu_rl.scripts.cloud.jobsets import jobset_state
    from tpu_rl.scripts.pipeline.gke.status import jobset_step_status

    # as JobSet v0.12.0 writes it (tests/peers/jobset_life.py)
    held = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"suspend": True},
            "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
                                       "message": "jobset is suspended"}]}}
    now = datetime(2026, 1, 1, 0, 5, tzinfo=timezone.utc)
    state, pods, time = jobset_step_status(jobset_state(held), None, 9, now)
    assert state == "queued in Kueue" and "Suspended" not in state and time == "0:05:00 elapsed"
