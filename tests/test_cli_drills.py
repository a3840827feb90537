"""Failure drills for `tpu-rl run` (issue 5): flaky API, job failures, interruption, missing output,
stale runs. All against the local Kubernetes API peer, the GCS emulator and Secret Manager peer."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import tpu_rl.scripts.cli.cloud as scripts_cli_cloud
from cli_helpers import put_actor_checkpoint
from peers import simulated_run
from peers.fixtures import jobset_of, put_step_output, spec_of
from peers.http import Fault
from tpu_rl.recipes.outcome import DRIVER_BACKOFF_LIMIT
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def tpu_rl(*args: str):
    return runner.invoke(app, list(args))


def name(step: str) -> str:
    return jobset_of(RECIPE, step)


def succeed_writing_output(cloud, step: str, **plan):
    simulated_run.succeed_writing_output(cloud["kube"], cloud["gcs"], get_recipe(RECIPE), step, **plan)


def with_convert_done(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")


def error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


# -- flaky or failing API -------------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_on_get_and_list_are_retried_and_the_run_succeeds(cloud, status):
    with_convert_done(cloud)
    succeed_writing_output(cloud, "train")
    kube = cloud["kube"]
    kube.faults += [Fault("GET", f"/jobsets/{name('train')}", status, times=2),
                    Fault("GET", "/pods", status, times=2)]
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert kube.created == [name("train")]
    assert all(fault.hits == 2 for fault in kube.faults)


def test_throttled_create_is_retried_once_accepted(cloud):
    with_convert_done(cloud)
    succeed_writing_output(cloud, "train")
    cloud["kube"].faults.append(Fault("POST", "/jobsets", 429, times=2, headers={"Retry-After": "0"}))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert cloud["kube"].created == [name("train")]


def test_create_that_happened_but_answered_500_is_not_submitted_twice(cloud):
    with_convert_done(cloud)
    succeed_writing_output(cloud, "train")
    cloud["kube"].faults.append(Fault("POST", "/jobsets", 500, apply=True))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert cloud["kube"].created == [name("train")]  # the retry met our own JobSet (409) and adopted it


def test_create_that_timed_out_is_adopted_not_duplicated(cloud, monkeypatch):
    monkeypatch.setenv("TPU_RL_REQUEST_TIMEOUT_SECONDS", "0.3")
    with_convert_done(cloud)
    succeed_writing_output(cloud, "train")
    cloud["kube"].faults.append(Fault("POST", "/jobsets", "timeout", delay=0.8))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert cloud["kube"].created == [name("train")]


def test_get_that_times_out_is_retried(cloud, monkeypatch):
    monkeypatch.setenv("TPU_RL_REQUEST_TIMEOUT_SECONDS", "0.3")
    with_convert_done(cloud)
    succeed_writing_output(cloud, "train")
    cloud["kube"].faults.append(Fault("GET", f"/jobsets/{name('train')}", "timeout", delay=0.8, times=2))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output


def test_a_create_rejected_by_the_server_is_reported_without_retrying(cloud):
    with_convert_done(cloud)
    cloud["kube"].faults.append(Fault("POST", "/jobsets", 422, times=5))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == ExitCode.API_ERROR
    assert "rejected with HTTP 422" in error_line(result)
    assert cloud["kube"].faults[0].hits == 1


def test_an_api_that_keeps_failing_gives_up_after_the_limit_with_a_reattach_hint(cloud):
    with_convert_done(cloud)
    cloud["kube"].plan(name("train"), outcome="hang")
    # The attaching `run`'s and its driver's planning look-ups pass.
    cloud["kube"].faults.append(Fault("GET", f"/jobsets/{name('train')}", 503, times=10_000, after=2))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == ExitCode.API_ERROR
    line = error_line(result)  # one line, though every pod of the driver's Job ended with its own
    tries = DRIVER_BACKOFF_LIMIT + 1  # a 503 is transient: the Job starts the driver again until its limit
    assert f"gave up after {tries} tries" in line
    assert "failed 6 times" in line and "HTTP 503" in line
    assert f"keeps running: rerun `tpu-rl run {RECIPE} --steps train` to reattach" in line
    assert cloud["kube"].faults[0].hits == 6 * tries  # each pod: the retry policy's 6 attempts


def test_an_api_failing_before_submission_says_nothing_was_submitted(cloud):
    with_convert_done(cloud)
    cloud["kube"].faults.append(Fault("GET", f"/jobsets/{name('train')}", 500, times=10_000))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == ExitCode.API_ERROR
    assert "nothing was submitted" in error_line(result)
    assert cloud["kube"].created == []


# -- job failures -----------------------------------------------------------------------------------
# An OOM-killed head leads with what ran out and its limit: rl.memory_max = "190Gi" of the recipe, on its
# cpu_machine_type n4-standard-64 of 256 GiB (recipes/recipes.toml).
OOM_HEADLINE = ("train_rl ran out of memory (limit 190Gi, rl.memory_max in recipes.toml; the CPU machine "
                "n4-standard-64 has 256 GiB); ")


@pytest.mark.parametrize("outcome, headline, expected", [
    ("oom", OOM_HEADLINE, "container workload-container OOMKilled (exit code 137)"),
    ("evicted", "", "Evicted: The node was low on resource: memory."),
    ("preempted", "", "disrupted (PreemptionByScheduler)"),
    ("fail", "", "Error (exit code 1)"),
])
def test_a_failed_step_says_which_why_and_how_to_see_logs(cloud, outcome, headline, expected):
    with_convert_done(cloud)
    cloud["kube"].plan(name("train"), outcome=outcome)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == ExitCode.JOB_FAILED
    line = error_line(result)
    assert line.startswith(f"error: step train failed: {headline}JobSet {name('train')} FailedJobs")
    assert expected in line
    assert f"tpu-rl logs {RECIPE} train" in line and "kubectl logs -l" in line
    assert name("export") not in cloud["kube"].created


# -- preemption on spot capacity ---------------------------------------------------------------------
def test_a_preempted_spot_worker_restarts_the_jobset_and_training_resumes_from_the_checkpoint(cloud, monkeypatch):
    from contracts.tunix_log import train_step_line

    from tpu_rl.jobs import jobset_name

    monkeypatch.setenv("CAPACITY", "spot")
    recipe = get_recipe(RECIPE)
    train = jobset_name(spec_of(recipe), "train")
    with_convert_done(cloud)
    put_actor_checkpoint(cloud["gcs"], recipe, 10)
    saved = put_actor_checkpoint(cloud["gcs"], recipe, 20)
    # Before the reclaim the head had logged step 27 (steps 21-27 were never saved); the new head restores
    # step 20 and logs from 21 on.
    before = "".join(f"{train_step_line(step, 0.5)}\n" for step in range(1, 28))
    after = "".join(f"{train_step_line(step, 0.25)}\n" for step in (21, 22, 23))
    cloud["kube"].plan(train, reclaimed_after=3, logs=before, logs_after_restart=after, capacity="spot",
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    [restart] = [index for index, line in enumerate(lines) if "JobSet restarted" in line]
    assert lines[restart].startswith(f"train: preempted (pod {train}-worker-0-7-"), lines[restart]
    assert lines[restart].endswith(
        " DisruptionTarget TerminationByKubelet: Pod was terminated in response to imminent node shutdown.); "
        f"JobSet restarted (1 of 3); training resumes from checkpoint step 20 ({saved.rstrip('/')})"), lines[restart]
    assert saved.endswith("/checkpoints/actor/20/")
    assert any("train: step 27/50" in line for line in lines[:restart])
    shown = [line.split("train: step ")[1].split("/")[0] for line in lines[restart:] if "train: step " in line]
    assert shown and set(shown) == {"23"}, result.output  # the new head's step; 27 from before the restart does not stick
    assert "train: output verified" in result.output and "error" not in result.output, result.output
    assert cloud["kube"].created == [train]  # restarted by JobSet, not resubmitted


# -- interruption ---------------------------------------------------------------------------------
def _interrupt_while_waiting(monkeypatch):
    real = scripts_cli_cloud.make_session

    def make_session(*args, **kwargs):
        session = real(*args, **kwargs)

        def sleep(seconds):
            raise KeyboardInterrupt

        session.sleep = sleep
        return session

    monkeypatch.setattr(scripts_cli_cloud, "make_session", make_session)


def test_ctrl_c_leaves_the_jobset_running_and_says_how_to_reattach(cloud, monkeypatch):
    with_convert_done(cloud)
    cloud["kube"].plan(name("train"), outcome="hang")
    _interrupt_while_waiting(monkeypatch)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == ExitCode.INTERRUPTED
    line = error_line(result)
    assert "keeps running" in line and f"tpu-rl run {RECIPE} --steps train,export" in line
    assert name("train") in cloud["kube"].jobsets and not cloud["kube"].deleted


def test_rerun_after_interruption_reattaches_instead_of_submitting_a_duplicate(cloud, monkeypatch):
    with_convert_done(cloud)
    cloud["kube"].plan(name("train"), outcome="hang")
    with monkeypatch.context() as patch:
        _interrupt_while_waiting(patch)
        assert tpu_rl("run", RECIPE, "--steps", "train").exit_code == ExitCode.INTERRUPTED
    # the job goes on and finishes, after the next run's driver saw it running
    succeed_writing_output(cloud, "train", ticks=cloud["kube"]._ticks[name("train")] + 3)
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert f"train: JobSet {name('train')} is running; reattaching to it (not submitting a duplicate)" in result.output
    assert cloud["kube"].created == [name("train")]


def test_rerun_after_a_dropped_connection_reattaches(cloud):
    with_convert_done(cloud)
    kube = cloud["kube"]
    kube.plan(name("train"), outcome="hang")
    # The planning look-ups (the attaching `run`'s, its driver's) pass; every GET while waiting loses its
    # connection.
    kube.faults.append(Fault("GET", f"/jobsets/{name('train')}", "drop", times=10_000, after=2))
    dropped = tpu_rl("run", RECIPE, "--steps", "train")
    assert dropped.exit_code == ExitCode.API_ERROR
    line = error_line(dropped)  # the driver's pods retried (a dropped connection is transient), then gave up
    assert "gave up after" in line and "MaxRetryError" in line
    assert f"rerun `tpu-rl run {RECIPE} --steps train` to reattach" in line
    kube.faults.clear()
    succeed_writing_output(cloud, "train")
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert kube.created == [name("train")]


# -- missing output -------------------------------------------------------------------------------
def test_success_without_output_stops_before_the_next_step_and_says_where(cloud):
    cloud["kube"].plan(name("convert"))  # succeeds but writes nothing
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == ExitCode.OUTPUT_MISSING
    line = error_line(result)
    assert "convert reported success but its output is missing" in line
    assert re.search(r"gs://rl-test-artifacts/qwen3-30b-a3b/max-text-format/0\.2\.4-scan-[0-9a-f]{7}/0/items/", line)
    assert "train was not started" in line
    assert cloud["kube"].created == [name("convert")]


# -- stale runs -----------------------------------------------------------------------------------
def _manifest(step: str) -> dict:
    from tpu_rl.jobs import render_manifests
    from peers.fixtures import peer_settings

    return render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())[step]


def test_a_succeeded_jobset_with_verified_output_is_reused(cloud):
    cloud["kube"].put_jobset(_manifest("convert"), "succeeded")
    with_convert_done(cloud)
    result = tpu_rl("run", RECIPE, "--steps", "convert")
    assert result.exit_code == 0, result.output
    assert f"output verified (JobSet {name('convert')} succeeded)" in result.output
    assert cloud["kube"].created == [] and cloud["kube"].deleted == []


@pytest.mark.parametrize("phase", ["failed", "succeeded"])
def test_a_finished_jobset_without_output_is_not_replaced_silently(cloud, phase):
    cloud["kube"].put_jobset(_manifest("convert"), phase)
    result = tpu_rl("run", RECIPE)
    assert result.exit_code == ExitCode.BAD_INPUT
    line = error_line(result)
    assert f"JobSet {name('convert')} from an earlier run {phase}" in line and "--replace" in line
    assert cloud["kube"].created == [] and cloud["kube"].deleted == []
    assert "tpu-rl-hf-token" not in cloud["kube"].secrets  # nothing done before the decision


def test_replace_deletes_the_failed_jobset_and_submits_again(cloud):
    cloud["kube"].put_jobset(_manifest("convert"), "failed")
    succeed_writing_output(cloud, "convert")
    result = tpu_rl("run", RECIPE, "--steps", "convert", "--replace")
    assert result.exit_code == 0, result.output
    assert cloud["kube"].deleted == [name("convert")]
    assert cloud["kube"].created == [name("convert")]


# -- backoff ----------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_the_cap_and_honours_retry_after():
    from kubernetes.client.exceptions import ApiException

    from tpu_rl.recipes.outcome import RetryPolicy
    from tpu_rl.scripts.cloud.retry import call
    from tpu_rl.recipes.outcome import ApiError

    slept: list[float] = []
    policy = RetryPolicy(attempts=5, base_delay=1.0, max_delay=5.0, sleep=slept.append)

    def always_503():
        raise ApiException(status=503, reason="Service Unavailable")

    with pytest.raises(ApiError, match="failed 5 times, last with HTTP 503"):
        call(policy, "reading x", always_503)
    assert slept == [1.0, 2.0, 4.0, 5.0]

    slept.clear()
    throttled = ApiException(status=429, reason="Too Many Requests")
    throttled.headers = {"Retry-After": "3"}
    answers = iter([throttled, "ok"])

    def throttled_once():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert call(policy, "creating x", throttled_once, idempotent=False) == "ok"
    assert slept == [3.0]


def test_a_dropped_log_stream_is_reopened_while_following(cloud, monkeypatch):
    monkeypatch.setenv("TPU_RL_POLL_SECONDS", "0.1")  # the step runs ~1 s, time for the follower to reconnect
    succeed_writing_output(cloud, "convert", ticks=10, logs="converting layer 1\n")
    cloud["kube"].faults.append(Fault("GET", "/log", "drop", times=1))
    result = tpu_rl("run", RECIPE, "--steps", "convert", "--follow-logs")
    assert result.exit_code == 0, result.output
    assert result.output.count("converting layer 1") == 1
    follows = [path for method, path, _ in cloud["kube"].requests if "/log" in path and "follow=true" in path]
    assert len(follows) >= 2  # the dropped one and the reopened one


def test_a_running_step_is_reattached_even_if_its_input_was_removed_meanwhile(cloud):
    kube = cloud["kube"]
    kube.plan(name("train"), outcome="hang")
    kube.put_jobset(_manifest("train"), "running")
    succeed_writing_output(cloud, "train", ticks=6)  # no convert output in the bucket at all
    result = tpu_rl("run", RECIPE, "--steps", "train")
    assert result.exit_code == 0, result.output
    assert "reattaching" in result.output and kube.created == []
