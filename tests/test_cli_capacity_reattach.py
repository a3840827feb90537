"""A `run` that reattaches to a JobSet an earlier `run` submitted long ago never takes a healthy step for
a shortfall (review of issue 16): a pod scheduled on a node, or that has run, has had its capacity, so
only pods that never had a node wait for it, each since its creation, not since the JobSet's. And a
train head that waits for a node of the CPU pool has an end: CAPACITY_WAIT's `cpu`, one line naming the
CPU pool, the JobSet deleted, and the TPU time its workers billed meanwhile in run.json."""

from __future__ import annotations

import json
from datetime import timedelta

from typer.testing import CliRunner

from cli_helpers import RECIPE, TRAIN, error_line, run_record, run_train, slow_polls, succeeds
from tpu_rl.jobs import jobset_name, render_manifests
from peers import kueue
from peers.fixtures import peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe, load_settings
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()
CPU_UNSCHEDULABLE = "0/3 nodes are available: the CPU pool cannot scale up (n4 out of stock)"


def _submitted_an_hour_ago(kube, step: str, name: str) -> None:
    """The step's JobSet as an earlier `run` submitted it an hour ago, running since."""
    manifest = render_manifests(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings())[step]
    kube.put_jobset(manifest)
    kube.jobsets[name]["metadata"]["creationTimestamp"] = kueue.stamp(kueue.moment() - timedelta(hours=1))


def test_a_reattaching_run_keeps_an_hour_old_reservation_train_through_a_container_restart(cloud, monkeypatch):
    monkeypatch.setenv("CAPACITY", "reservation,spot")
    kube = cloud["kube"]
    plan = kube.plan(TRAIN, capacity="reservation", ticks=12, **succeeds(cloud))
    _submitted_an_hour_ago(kube, "train", TRAIN)
    # at one of the driver's polls (the attaching `run` read the JobSet once first): a worker not Ready
    plan.container_restart_at = kube._ticks[TRAIN] + 3
    result = run_train(cloud, monkeypatch, "reservation,spot", "30m")
    assert result.exit_code == 0, result.output
    assert "reattaching to it" in result.output and "Error (exit code 137)" in result.output, result.output
    assert kube.deleted == [] and kube.created == [] and "no reservation capacity" not in result.output
    assert "capacity_attempts" not in run_record(cloud)["steps"]["train"]


def test_a_reattaching_run_keeps_an_hour_old_train_in_its_finishing_window(cloud, monkeypatch):
    monkeypatch.setenv("CAPACITY", "reservation,spot")
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="reservation", ticks=2, finishing=3, **succeeds(cloud))
    _submitted_an_hour_ago(kube, "train", TRAIN)  # at tick 2: its next polls are the head finishing
    result = run_train(cloud, monkeypatch, "reservation,spot", "30m")
    assert result.exit_code == 0, result.output
    assert kube.deleted == [] and kube.created == [], result.output


def test_a_reattaching_run_keeps_an_hour_old_convert_step_in_its_finishing_window(cloud, monkeypatch):
    convert = jobset_name(spec_of(get_recipe(RECIPE)), "convert")
    kube = cloud["kube"]
    kube.plan(convert, ticks=2, finishing=3,
              on_success=lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert"))
    _submitted_an_hour_ago(kube, "convert", convert)
    monkeypatch.setenv("CAPACITY_WAIT", "cpu=30m")
    result = runner.invoke(app, ["run", RECIPE, "--steps", "convert"])
    assert result.exit_code == 0, result.output
    assert kube.deleted == [] and kube.created == [], result.output


def _head_without_a_cpu_node(kube, monkeypatch, workers: bool) -> None:
    """The Pathways head stays Unschedulable (the CPU pool cannot scale up). `workers` False: JobSet's
    InOrder startup, which resumes the workers' Job only once the head's is ready (JobSet v0.12.0,
    f22e565a, pkg/controllers/jobset_controller.go 609-626), so no TPU pod exists and the fake JobSet
    keeps its Suspended condition True with spec.suspend false, as JobSet does; True: AnyOrder
    (flex-start), the workers up and Ready meanwhile."""
    original = kube._advance

    def advance(name, tick_only=False):
        original(name, tick_only)
        main = kube._main_rj(name)
        for pod in list(kube._pods_of(name)):
            if pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == main:
                pod["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": CPU_UNSCHEDULABLE}]}
            elif not workers:
                del kube.pods[pod["metadata"]["name"]]
        if kube._ticks[name] > 40 and name in kube.jobsets:  # 40 polls, 6 h 40 min: a wait with no end
            kube._finish(name, "fail")
    monkeypatch.setattr(kube, "_advance", advance)


def _head_stops(cloud, monkeypatch, mode: str, capacity: str, wait: str, workers: bool):
    """`run` on a train step whose head gets no CPU node: it stops; the result and its error line."""
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity=mode, ticks=400, outcome="hang", **succeeds(cloud))
    _head_without_a_cpu_node(kube, monkeypatch, workers=workers)
    result = run_train(cloud, monkeypatch, capacity, wait)
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    return result, error_line(result)


def test_a_train_head_without_a_cpu_node_and_no_workers_yet_stops_after_the_cpu_wait(cloud, monkeypatch):
    kube = cloud["kube"]
    result, line = _head_stops(cloud, monkeypatch, "spot", "spot,on-demand", "cpu=30m", workers=False)
    assert line.startswith("error: step train stopped: waiting for a node of the CPU pool (n4-standard-64)") and \
        f"for the Pathways head: {CPU_UNSCHEDULABLE} for " in line, line
    assert "longer than CAPACITY_WAIT's cpu=30m" in line and "no spot capacity" not in result.output
    assert f"JobSet {TRAIN} deleted, so no TPU bills" in line
    assert kube.deleted == [TRAIN] and kube.created == [TRAIN]  # not moved on to on-demand: no TPU mode at fault


def test_a_train_head_without_a_cpu_node_while_its_workers_bill_stops_after_the_cpu_wait(cloud, monkeypatch):
    kube = cloud["kube"]
    result, line = _head_stops(cloud, monkeypatch, "flex-start", "flex-start,spot", "flex-start=4h,spot=30m,cpu=30m",
                               workers=True)
    assert "waiting for a node of the CPU pool (n4-standard-64)" in line and "for the Pathways head" in line, line
    assert "flex-start" not in line and "workers" not in line
    assert "train: waiting for a node of the CPU pool (" in result.output
    assert kube.deleted == [TRAIN] and kube.created == [TRAIN]
    train = run_record(cloud)["steps"]["train"]
    phases = [p["phase"] for p in train["phases"]]
    assert "waiting for head" in phases, json.dumps(train)
    # The workers had their flex-start nodes from the first poll that saw them until the JobSet went.
    waited = sum(p["seconds"] for p in train["phases"] if p["phase"] == "waiting for head")
    assert waited >= 30 * 60 and train["tpu_idle"]["seconds"] == waited, json.dumps(train)
    assert train["tpu_idle"]["capacity"] == "flex-start" and train["tpu_idle"]["usd_estimate"] > 0


def test_a_spot_reclaim_is_recorded_in_run_json_with_the_pods_own_words_and_the_step_resumed_from(cloud, monkeypatch):
    from tpu_rl.jobs.paths import ArtifactPaths
    from peers.fixtures import put_checkpoint

    kube = cloud["kube"]
    put_checkpoint(cloud["gcs"], ArtifactPaths(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings()), 20)
    kube.plan(TRAIN, capacity="spot", ticks=3, reclaimed_after=3, **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == 0, result.output
    [restart] = run_record(cloud)["steps"]["train"]["restarts"]
    # The kubelet's graceful node shutdown, as the fake's pod says it (jobset_life._reclaim_node).
    assert restart["preempted"] is True and restart["restart"] == 1 and restart["at"].endswith("Z")
    assert "DisruptionTarget TerminationByKubelet: Pod was terminated in response to imminent node shutdown." \
        in restart["reason"], restart
    assert restart["resumes_from_step"] == 20, restart


def test_a_revoked_slice_met_by_a_reattaching_run_is_submitted_again_from_the_first_mode(cloud, monkeypatch):
    """An earlier `run` moved the step on to flex-start (its JobSet pins it there); this one reattaches,
    and GKE revokes the slice before this run saw it ready. The slice was had (GKE revokes only a
    provisioned one), so the step is submitted again as rendered: Kueue tries the reservation first."""
    from tpu_rl.jobs.k8s import pin_capacity
    from peers.jobset_plan import Plan
    from cli_helpers import tpu_selector

    monkeypatch.setenv("CAPACITY", "reservation,flex-start")
    kube = cloud["kube"]
    plan = kube.plan(TRAIN, capacity="flex-start", reclaimed_after=10_000, nodes_return=False, revoked=True,
                     outcome="hang", resubmitted=Plan(capacity="reservation", **succeeds(cloud)))
    manifest = render_manifests(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings())["train"]
    kube.put_jobset(pin_capacity(manifest, "flex-start", None))
    for _ in range(6):  # provisioned, admitted, its pods ready: an earlier `run` trained on it
        kube._advance(TRAIN)
    assert kube.jobsets[TRAIN]["status"]["replicatedJobsStatus"][0]["ready"]
    plan.reclaimed_after = kube._ticks[TRAIN] + 1  # revoked at the driver's first look (after its `run`'s)
    result = run_train(cloud, monkeypatch, "reservation,flex-start", "4h")
    assert result.exit_code == 0, result.output
    assert "reattaching to it" in result.output
    [lost] = [line for line in result.output.splitlines() if line.startswith("train: the flex-start slice went away")]
    assert "CapacityRevoked" in lost
    assert kube.deleted == [TRAIN] and kube.created == [TRAIN]
    assert "tpu-rl/capacity" not in tpu_selector(kube.jobsets[TRAIN]), tpu_selector(kube.jobsets[TRAIN])


def _cold_start(cloud, monkeypatch, reattach: bool):
    """A reservation train (CAPACITY without flex-start: startupPolicy InOrder) whose pods have their
    nodes but pull their images for 6 polls, 60 min: longer than the mode's 30 min. Under InOrder the
    fake JobSet keeps Suspended True until every replicated job is ready, as JobSet v0.12.0 does."""
    monkeypatch.setenv("CAPACITY", "reservation,spot")
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="reservation", pulling_ticks=6, ticks=3, **succeeds(cloud))
    if reattach:
        _submitted_an_hour_ago(kube, "train", TRAIN)
    manifest = render_manifests(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings())["train"]
    assert manifest["spec"]["startupPolicy"]["startupPolicyOrder"] == "InOrder"
    return kube, run_train(cloud, monkeypatch, "reservation,spot", "30m")


def test_a_reservation_train_whose_in_order_cold_start_outlasts_the_mode_wait_is_not_deleted(cloud, monkeypatch):
    kube, result = _cold_start(cloud, monkeypatch, reattach=False)
    assert result.exit_code == 0, result.output
    assert kube.deleted == [] and kube.created == [TRAIN], result.output
    assert "waiting for Kueue to resume" not in result.output, result.output
    phases = [p["phase"] for p in run_record(cloud)["steps"]["train"]["phases"]]
    assert "pulling images" in phases and "queued" not in phases, phases


def test_a_reattaching_run_keeps_an_in_order_train_still_pulling_its_images_after_an_hour(cloud, monkeypatch):
    kube, result = _cold_start(cloud, monkeypatch, reattach=True)
    assert result.exit_code == 0, result.output
    assert "reattaching to it" in result.output, result.output
    assert kube.deleted == [] and kube.created == [], result.output


def test_an_in_order_train_head_without_a_cpu_node_keeps_the_jobset_suspended_condition(cloud, monkeypatch):
    """JobSet v0.12.0 under InOrder never resumes past the head's Job, so the Suspended condition stays
    True while spec.suspend is false: the step still ends on the cpu wait, not the TPU mode's."""
    result, line = _head_stops(cloud, monkeypatch, "spot", "spot,on-demand", "spot=2h,cpu=30m", workers=False)
    assert "waiting for a node of the CPU pool (n4-standard-64) for the Pathways head" in line, line
    assert "longer than CAPACITY_WAIT's cpu=30m" in line and "waiting for Kueue" not in result.output, line
    phases = [p["phase"] for p in run_record(cloud)["steps"]["train"]["phases"]]
    assert phases and "queued" not in phases, phases


def test_a_replacement_worker_pod_without_a_node_in_an_attempt_that_was_ready_has_an_end(cloud, monkeypatch):
    """After the attempt was ready, a worker's node goes and its Job creates a new pod in the same
    attempt (restartPolicy OnFailure), which no node takes: it waits the mode's bound from its creation,
    not without end; the pods that had their nodes are never counted."""
    monkeypatch.setenv("CAPACITY", "reservation,spot")
    kube = cloud["kube"]
    slow_polls(monkeypatch)
    kube.plan(TRAIN, capacity="reservation", ticks=400, outcome="hang", **succeeds(cloud))
    original, replaced = kube._advance, []

    def advance(name, tick_only=False):
        original(name, tick_only)
        tick = kube._ticks.get(name, 0)
        if tick == 4 and not replaced:  # ready since tick 2: a worker's pod is replaced by a new one
            old = next(p for p in kube._pods_of(name)
                       if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != kube._main_rj(name))
            del kube.pods[old["metadata"]["name"]]
            new = json.loads(json.dumps(old))
            new["metadata"].update(name=old["metadata"]["name"] + "-b", creationTimestamp=kueue.now())
            kube.pods[new["metadata"]["name"]] = new
            replaced.append(new["metadata"]["name"])
        for pod in replaced:
            if pod in kube.pods:
                kube.pods[pod]["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: no reservation capacity"}]}
        if tick > 40 and name in kube.jobsets:  # 40 polls, 6 h 40 min: a wait with no end
            kube._finish(name, "fail")
    monkeypatch.setattr(kube, "_advance", advance)
    result = run_train(cloud, monkeypatch, "reservation,spot", "reservation=30m,spot=30m")
    assert replaced, result.output
    assert "longer than CAPACITY_WAIT's reservation=30m" in result.output, result.output
    assert TRAIN in kube.deleted, result.output


def test_a_second_restart_is_recorded_with_its_own_cause_not_the_first_attempts_problem(cloud, monkeypatch):
    """A spot reclaim restarts the JobSet; later its second attempt's pods are replaced before any of
    them said why: the second restart's reason is that, not the first attempt's exit code."""
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", ticks=6, reclaimed_after=3, **succeeds(cloud))
    original, bumped = kube._advance, []

    def advance(name, tick_only=False):
        original(name, tick_only)
        obj = kube.jobsets.get(name)
        if obj and obj["status"]["restarts"] == 1 and kube._ticks[name] == 3 and not bumped:
            bumped.append(True)
            obj["status"]["restarts"] = 2
            for pod in kube._pods_of(name):
                del kube.pods[pod["metadata"]["name"]]
            kube._create_pods(name)
            kube._ticks[name] = 0
    monkeypatch.setattr(kube, "_advance", advance)
    result = run_train(cloud, monkeypatch, "spot", "30m")
    assert result.exit_code == 0, result.output
    first, second = run_record(cloud)["steps"]["train"]["restarts"]
    assert first["preempted"] is True and "TerminationByKubelet" in first["reason"], first
    assert second == {**second, "restart": 2, "preempted": False,
                      "reason": "its pods were replaced before they said why"}, second
