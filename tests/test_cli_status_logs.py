"""`tpu-rl status` and `tpu-rl logs` on GKE against the local Kubernetes API and the GCS emulator."""

from __future__ import annotations

from typer.testing import CliRunner

from contracts.tunix_log import train_step_line
from peers.fixtures import cloud, gcs, gcs_server, google, kube, peer_settings, put_step_output, settings_env  # noqa: F401
from jobs import render_manifests
from recipes import get_recipe
from scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def test_status_shows_each_step_jobset_pods_and_output(cloud, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    recipe = get_recipe(RECIPE)
    manifests = render_manifests(recipe, peer_settings())
    cloud["kube"].put_jobset(manifests["convert"], "succeeded")
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(f"{RECIPE}-train", outcome="hang")
    cloud["kube"].put_jobset(manifests["train"], "running")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 4}
    assert "succeeded (AllJobsCompleted)" in rows["convert"] and "verified" in rows["convert"]
    assert "running" in rows["train"] and "9/9 ready" in rows["train"] and "missing" in rows["train"]
    assert "absent" in rows["export"]
    assert cloud["kube"].created == []


def test_logs_prints_the_main_container_of_the_step(cloud):
    recipe = get_recipe(RECIPE)
    step_line = train_step_line(3, 0.25)
    cloud["kube"].plan(f"{RECIPE}-train", outcome="hang", logs=f"line one\n{step_line}\nline three\n")
    cloud["kube"].put_jobset(render_manifests(recipe, peer_settings())["train"], "running")
    result = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [step_line, "line three"]
    [(_, path, _)] = [r for r in cloud["kube"].requests if r[1].endswith("/log") or "/log?" in r[1]]
    assert "container=workload-container" in path and "pathways-head" in path


def test_logs_follow_streams_until_the_container_ends(cloud):
    recipe = get_recipe(RECIPE)
    cloud["kube"].plan(f"{RECIPE}-convert", outcome="hang", logs="a\nb\n")
    cloud["kube"].put_jobset(render_manifests(recipe, peer_settings())["convert"], "running")
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    assert result.exit_code == 0 and result.output.splitlines() == ["a", "b"]
    assert any("follow=true" in path for _, path, _ in cloud["kube"].requests)


def test_logs_follow_broken_midway_is_one_line(cloud):
    from peers.http import Fault

    recipe = get_recipe(RECIPE)
    cloud["kube"].plan(f"{RECIPE}-convert", outcome="hang", logs="a\nb\n")
    cloud["kube"].put_jobset(render_manifests(recipe, peer_settings())["convert"], "running")
    cloud["kube"].faults.append(Fault("GET", "/log", "cut"))
    result = runner.invoke(app, ["logs", RECIPE, "convert", "-f"])
    assert result.exit_code == 4, result.output
    [error] = result.output.splitlines()  # urllib3 drops the partial chunk with the broken read
    assert error.startswith("error: lost the connection to the cluster") and "run the command again" in error


def test_run_with_follow_logs_streams_the_step_logs(cloud):
    cloud["kube"].plan(f"{RECIPE}-convert", ticks=4, logs="converting layer 1\n",
                       on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert", "--follow-logs"])
    assert result.exit_code == 0, result.output
    assert "converting layer 1" in result.output
