"""Our runs in Kueue's queue: waiting behind our own workload is told apart from waiting for capacity
(scripts/pipeline/gke/queue.py), a reattaching `run` counts a queued step's capacity wait from its
admission, and a sweep's runs are named best-first by `runs` and drawn together by `metrics --sweep`.
Workloads are built by the fake Kueue (peers/kueue.py), as Kueue v0.17.1 writes them."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from typer.testing import CliRunner

from cli_helpers import CONVERT, RECIPE, TRAIN, error_line, slow_polls
from contracts.tunix_log import evaluation_line
from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers import kueue
from peers.event_files import put_event_files
from peers.fixtures import peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.pipeline.gke.queue import behind_our_own, positions
from tpu_rl.scripts.rundata.evaluation import parse_evaluations

runner = CliRunner()
RUNS_OF_THE_SWEEP = {"lr-a": 33, "lr-b": 45, "lr-c": 38}  # correct answers of 64 after training


def _jobset(name: str, uid: str, tpu: bool = True) -> dict:
    limits = {"google.com/tpu": "4"} if tpu else {"cpu": "8"}
    return {"metadata": {"name": name, "uid": uid}, "spec": {"replicatedJobs": [{"name": "worker", "replicas": 1,
            "template": {"spec": {"parallelism": 8, "template": {"spec": {"containers": [
                {"name": "c", "image": "i", "resources": {"limits": limits}}]}}}}}]}}


def _workloads() -> tuple[dict, dict, dict]:
    """A train holding the slice's quota, and two waiting for it, created in this order."""
    holder, first, second = (kueue.workload_for(_jobset(f"{run}-train", f"uid-{run}")) for run in ("a", "b", "c"))
    kueue.reserve(holder, "tpu", checked=False)
    kueue.admit(holder)
    for waiting in (first, second):
        kueue.pending(waiting, "tpu", 32)
    first["metadata"]["creationTimestamp"], second["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z", \
        "2026-12-01T10:05:00Z"
    return holder, first, second


def test_a_workload_waiting_for_quota_our_own_train_holds_is_behind_our_own_run():
    holder, first, second = _workloads()
    place = behind_our_own(second, [second, holder, first])
    assert (place.position, place.waiting, place.ahead_of) == (2, 2, ("a-train",))
    assert positions([second, holder, first]) == {"b-train": 1, "c-train": 2}


def test_a_train_is_placed_only_among_the_workloads_waiting_for_tpu_quota_not_behind_a_cpu_export():
    holder, first, second = _workloads()
    export = kueue.workload_for(_jobset("z-export", "uid-z", tpu=False))
    kueue.pending(export, "cpu", 8)
    export["metadata"]["creationTimestamp"] = "2026-12-01T09:00:00Z"  # before both trains
    everything = [holder, export, first, second]
    assert positions(everything) == {"z-export": 1, "b-train": 1, "c-train": 2}
    place = behind_our_own(second, everything)
    assert (place.position, place.waiting, place.ahead_of) == (2, 2, ("a-train",))


def test_waiting_for_quota_nobody_of_ours_holds_or_for_capacity_is_not_behind_our_own_run():
    holder, first, _ = _workloads()
    assert behind_our_own(first, [first]) is None  # nothing of ours holds it: a quota the stack lacks
    kueue.finish(holder, True, "jobset completed successfully")
    assert behind_our_own(first, [holder, first]) is None  # a finished workload's quota is free
    checking = kueue.workload_for(_jobset("d-train", "uid-d"))
    kueue.reserve(checking, "tpu-flex-start", checked=True)  # quota, waiting for its flex-start capacity
    assert behind_our_own(checking, [holder, checking]) is None


def test_a_retried_flex_start_request_goes_to_the_back_of_the_queue():
    """GetQueueOrderTimestamp: a workload evicted by its admission check queues from its eviction."""
    holder, first, second = _workloads()
    kueue.use_clock(lambda: kueue.datetime(2026, 12, 1, 11, tzinfo=kueue.timezone.utc))
    try:
        kueue.reserve(first, "tpu-flex-start", checked=True)
        kueue.retry(first, "the test's Failed message")
    finally:
        kueue.use_clock(None)
    assert positions([holder, first, second]) == {"c-train": 1, "b-train": 2}


def test_an_evicted_workload_requeued_behind_our_own_train_waits_in_the_queue_not_for_capacity():
    """Evicted stays True until the quota is reserved again (workload.go SetQuotaReservation): once its
    backoff is over and it is pending for quota our own train holds, it is queued behind our own run,
    placed by its eviction time (GetQueueOrderTimestamp); during the backoff it is not."""
    holder, first, second = _workloads()
    at = kueue.datetime(2026, 12, 1, 11, tzinfo=kueue.timezone.utc)
    kueue.use_clock(lambda: at)
    try:
        kueue.reserve(first, "tpu-flex-start", checked=True)
        kueue.retry(first, "the test's Failed message")
        kueue.pending(first, "tpu-flex-start", 32)
        assert behind_our_own(first, [holder, first, second], at) is None  # backing off until requeueAt
        kueue.use_clock(lambda: at + timedelta(hours=1))
        assert not kueue.backing_off(first)  # requeued: requeueAt cleared, Evicted still True
        kueue.pending(first, "tpu-flex-start", 32)
    finally:
        kueue.use_clock(None)
    place = behind_our_own(first, [holder, first, second], at + timedelta(hours=1))
    assert place is not None and (place.position, place.waiting, place.ahead_of) == (2, 2, ("a-train",))
    assert [wl["metadata"]["uid"] for wl in kueue.queue_order([first, second])] == [second["metadata"]["uid"],
                                                                                    first["metadata"]["uid"]]


def test_a_reattaching_run_counts_a_queued_trains_capacity_wait_from_its_admission(cloud, monkeypatch):
    """The train JobSet waited two hours behind our own run, then got the quota and waits for its flex-start
    slice. A `run` that reattaches now (a restarted driver) ends that wait 30 min after the quota came, not
    at once for the 2 h since the JobSet's creation."""
    kube = cloud["kube"]
    clock = slow_polls(monkeypatch)
    monkeypatch.setenv("CAPACITY", "flex-start")
    monkeypatch.setenv("CAPACITY_WAIT", "flex-start=30m")
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    recipe = get_recipe(RECIPE).with_capacity(("flex-start",), "CAPACITY")
    kube.plan(TRAIN, capacity="flex-start", stockout=("flex-start",), admitted_after=1)
    kube.put_jobset(render_manifests(spec_of(recipe), peer_settings())["train"])  # created, queued
    clock[0] += timedelta(hours=2)
    with kube._lock:
        kube._advance(TRAIN)  # Kueue reserves its quota now and files its ProvisioningRequest
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code != 0, result.output
    assert "reattaching to it" in result.output
    waited = re.search(r"for (\d+):(\d\d):\d\d, longer than CAPACITY_WAIT", result.output)
    assert waited and int(waited[1]) == 0 and 30 <= int(waited[2]) <= 50, result.output


def _record(cloud, run: str, correct: int, phase: str = "post", overrides: tuple[str, ...] = ()) -> ArtifactPaths:
    recipe = spec_of(get_recipe(RECIPE)).with_run(run)
    paths = ArtifactPaths(spec_of(recipe), peer_settings())
    step = 20 if phase == "intermediate" else None
    lines = [evaluation_line("pre", 26, 64, 30, 50, 0.8123), evaluation_line(phase, correct, 64, 40, 63, 1.9, step)]
    record = {"recipe": RECIPE, "run": run, "status": "succeeded", "sweep": "lr",
              "overrides": {"train": list(overrides)},
              "created": f"2026-12-01T1{len(run)}:00:00+00:00", "evaluations": [e.as_record() for e in parse_evaluations("\n".join(lines), last_step=50)]}
    bucket, name = split_gs_url(paths.run_record)
    cloud["gcs"].bucket(bucket).blob(name).upload_from_string(json.dumps(record))
    return paths


def test_runs_names_a_sweeps_best_run_by_held_out_accuracy(cloud):
    for run, correct in RUNS_OF_THE_SWEEP.items():
        _record(cloud, run, correct)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    # lr-b: 45 of 64 correct after training, 26 of 64 before
    assert "sweep lr: best run lr-b, held-out accuracy 40.6→70.3 (3 of 3 runs evaluated)" in result.output


def test_a_sweeps_best_run_is_ranked_by_evaluations_after_training_on_one_held_out_set(cloud):
    """lr-a is still training (an intermediate evaluation, 60 of 64), lr-c was evaluated after training on
    another set (eval_split=train): neither is the best; lr-b (45 of 64 on gsm8k test) is, and lr-c is
    named as not ranked."""
    _record(cloud, "lr-a", 60, phase="intermediate")
    _record(cloud, "lr-b", 45)
    _record(cloud, "lr-c", 62, overrides=("eval_split=train",))
    _record(cloud, "lr-d", 40)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the line as printed, whatever its wrapping
    assert ("sweep lr: best run lr-b, held-out accuracy 40.6→70.3 (2 of 4 runs evaluated); not ranked, evaluated "
            "on another held-out set than 64 gsm8k test: lr-c (64 gsm8k train)") in text, text


def test_metrics_draws_every_run_of_a_sweep_side_by_side(cloud, tmp_path):
    for number, (run, correct) in enumerate(RUNS_OF_THE_SWEEP.items()):
        paths = _record(cloud, run, correct)
        put_event_files(cloud["gcs"], paths.tensorboard, {"rewards/train/mean": [(1, 0.1), (50, 0.3 + number / 10)]},
                        tmp_path / run)
    result = runner.invoke(app, ["metrics", RECIPE, "--sweep", "lr", "--png", str(tmp_path / "lr.png")])
    assert result.exit_code == 0, result.output
    assert all(run in result.output for run in RUNS_OF_THE_SWEEP), result.output
    assert (tmp_path / "lr.png").stat().st_size > 0
    missing = runner.invoke(app, ["metrics", RECIPE, "--sweep", "nope"])
    assert missing.exit_code == 2 and "--sweep nope: no run of qwen3-v6e32 in" in error_line(missing)


def test_metrics_leaves_out_a_run_of_the_sweep_without_curves_yet_and_names_it(cloud, tmp_path):
    """A queued run has a record and no event files yet: `metrics --sweep` draws the others."""
    for number, (run, correct) in enumerate(RUNS_OF_THE_SWEEP.items()):
        paths = _record(cloud, run, correct)
        if run != "lr-c":
            put_event_files(cloud["gcs"], paths.tensorboard, {"rewards/train/mean": [(1, 0.1), (50, 0.4)]},
                            tmp_path / run)
    result = runner.invoke(app, ["metrics", RECIPE, "--sweep", "lr"])
    assert result.exit_code == 0, result.output
    assert "--sweep lr: no curves yet for lr-c; left out" in result.output
    assert "lr-a" in result.output and "lr-b" in result.output


def test_the_convert_jobset_of_a_sweep_is_the_recipes_shared_one():
    assert CONVERT == render_manifests(spec_of(get_recipe(RECIPE)).with_run("lr-a"),
                                       peer_settings())["convert"]["metadata"]["name"]


def test_runs_prices_each_run_by_the_time_its_steps_billed_not_the_time_train_sat_in_the_queue(cloud):
    from tpu_rl.recipes.costs.run import hourly_estimate
    from tpu_rl.recipes.costs.prices import usd

    paths = _record(cloud, "lr-a", 40)
    bucket, name = split_gs_url(paths.run_record)
    blob = cloud["gcs"].bucket(bucket).blob(name)
    record = json.loads(blob.download_as_bytes())
    record["steps"] = {
        "convert": {"status": "succeeded", "started": "2026-12-01T10:00:00+00:00",
                    "ended": "2026-12-01T10:30:00+00:00"},
        "train": {"status": "succeeded", "started": "2026-12-01T10:30:00+00:00", "ended": "2026-12-01T14:30:00+00:00",
                  "phases": [{"phase": "queued", "started": "2026-12-01T10:30:00Z", "seconds": 3 * 3600},
                             {"phase": "training", "started": "2026-12-01T13:30:00Z", "seconds": 3600}]}}
    blob.upload_from_string(json.dumps(record))
    hourly = hourly_estimate(get_recipe(RECIPE))  # half an hour of convert, one of train: the queue bills nothing
    expected = hourly.during("convert") * 0.5 + hourly.during("train") * 1.0
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    [run] = json.loads(result.output)["runs"]
    assert usd(run["cost_usd"]) == usd(expected)


def test_phases_written_as_they_change_never_overwrite_a_record_tpu_rl_cancel_marked(cloud):
    """The phases go into run.json at each new phase (for `runs`' cost), but not over the record `tpu-rl
    cancel` wrote meanwhile: it says why the JobSet went away."""
    from tpu_rl.scripts.cli.cloud import make_session
    from tpu_rl.scripts.cli.core import cloud_recipe
    from tpu_rl.scripts.pipeline.record import RunRecord

    recipe, settings = cloud_recipe("run", RECIPE)
    session = make_session(spec_of(recipe).with_run("lr-a"), settings, "writes")
    bucket, name = split_gs_url(session.paths.run_record)
    blob = cloud["gcs"].bucket(bucket).blob(name)
    spans = [{"phase": "queued", "started": "2026-12-01T10:00:00Z", "seconds": 0}]
    for status, kept in (("cancelled", False), ("running", True)):
        blob.upload_from_string(json.dumps({"run": "lr-a", "status": status}))
        RunRecord(session, {"run": "lr-a", "status": "running"}).note_while_running("train", phases=spans)
        stored = json.loads(blob.download_as_bytes())
        assert (stored["status"], "steps" in stored) == ("running" if kept else "cancelled", kept), stored
