"""Two identical `tpu-rl run`s at once (issues 27 and 28): the second finds the run's driver, which the
first started, and attaches to it; no second driver and no second JobSet of any step, and both follow the
run to its end. Before the driver (issue 28), both drove the run, and the second attached to each JobSet
the first submitted (scripts/pipeline/gke/submit.py still does, for a driver that submits a JobSet twice).
Two real `tpu-rl` processes against the local peers (the in-process CLI runner cannot run twice at once)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tpu_rl.jobs.driver import driver_name
from peers.fixtures import REPO, VENV_BIN, jobset_of, put_step_output, spec_of
from tpu_rl.recipes import get_recipe

RECIPE = "qwen3-v6e32"
BOUND_SECONDS = 120


def _start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TPU_RL_POLL_SECONDS": "0.2", "COLUMNS": "200"}
    process = subprocess.Popen([str(VENV_BIN / "tpu-rl"), "run", RECIPE], stdin=subprocess.DEVNULL,
                               stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    return process, log


def _wait_for(what: str, condition, runs: list[tuple[subprocess.Popen, Path]]) -> None:
    deadline = time.monotonic() + BOUND_SECONDS
    while not condition():
        said = "\n----\n".join(log.read_text() for _, log in runs)
        assert time.monotonic() < deadline, f"waited {BOUND_SECONDS} s for {what}:\n{said}"
        assert all(process.poll() is None for process, _ in runs), f"a run ended before {what}:\n{said}"
        time.sleep(0.1)


def test_a_second_identical_run_attaches_to_the_first_runs_driver_and_both_finish(cloud, tmp_path):
    recipe, kube = get_recipe(RECIPE), cloud["kube"]
    convert = kube.plan(jobset_of(RECIPE, "convert"), outcome="hang")  # until the second run attached
    for step in ("train", "export"):
        kube.plan(jobset_of(RECIPE, step), ticks=4,
                  on_success=lambda step=step: put_step_output(cloud["gcs"], recipe, step))
    first, first_log = _start(tmp_path, "first")
    second = None
    try:
        _wait_for("the first run's convert JobSet", lambda: jobset_of(RECIPE, "convert") in kube.jobsets,
                  [(first, first_log)])
        second, second_log = _start(tmp_path, "second")
        _wait_for("the second run to attach", lambda: "attaching to it" in second_log.read_text(),
                  [(first, first_log), (second, second_log)])
        convert.on_success = lambda: put_step_output(cloud["gcs"], recipe, "convert")
        convert.outcome = "succeed"
        codes = [process.wait(timeout=BOUND_SECONDS) for process in (first, second)]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    outputs = [first_log.read_text(), second_log.read_text()]
    assert codes == [0, 0], "\n----\n".join(outputs)
    assert kube.job_calls == [("create", driver_name(spec_of(recipe)))]
    assert sorted(kube.created) == sorted(jobset_of(RECIPE, step) for step in ("convert", "train", "export"))
    for output in outputs:  # both follow the one driver to its end
        assert "done: convert, train, export verified" in output, output
    assert f"its driver, Job {driver_name(spec_of(recipe))}, is running; attaching to it" in outputs[1]
    assert "already exists" not in " ".join(outputs)


def test_a_jobset_submitted_meanwhile_with_another_spec_is_still_a_conflict(cloud):
    import copy

    from typer.testing import CliRunner

    from tpu_rl.jobs import render_manifests
    from tpu_rl.jobs.k8s import SPEC_DIGEST_ANNOTATION
    from peers.fixtures import peer_settings
    from tpu_rl.recipes.outcome import ExitCode
    from tpu_rl.scripts.cli import app

    recipe, kube = get_recipe(RECIPE), cloud["kube"]
    put_step_output(cloud["gcs"], recipe, "convert")
    other = copy.deepcopy(render_manifests(spec_of(recipe), peer_settings())["export"])  # someone's own edit of it
    other["spec"]["ttlSecondsAfterFinished"] = 60
    other["metadata"].setdefault("annotations", {})[SPEC_DIGEST_ANNOTATION] = "0" * 64

    def train_done_and_someone_submits_export():
        put_step_output(cloud["gcs"], recipe, "train")
        kube.put_jobset(other, "running")

    kube.plan(jobset_of(RECIPE, "train"), on_success=train_done_and_someone_submits_export)
    result = CliRunner().invoke(app, ["run", RECIPE, "--steps", "train,export"])
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert (f"error: JobSet {jobset_of(RECIPE, 'export')} already exists (created by someone else meanwhile)"
            in " ".join(result.output.split()))
    assert kube.created == [jobset_of(RECIPE, "train")]
