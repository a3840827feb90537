"""A sweep of three runs against the quota of one slice (issue 27 §3): the fake Kueue admits one train
workload at a time, in Kueue's order (peers/kueue.py queue_order), so the runs train in turn; `tpu-rl runs`
shows the waiting ones' places, and a run waiting behind our own does not spend its CAPACITY_WAIT.

Each run is driven by the pipeline code its driver runs (Platform.drive), one thread per run as the
three in-cluster drivers would be, on one virtual clock that the fake Kueue shares."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from datetime import datetime, timedelta, timezone

from rich.console import Console
from typer.testing import CliRunner

from peers.settings import spec_of
from tpu_rl.jobs import jobset_name
from peers import kueue
from peers.simulated_run import script_successful_run
from tpu_rl.recipes import STEPS
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cli.core import cloud_recipe
from tpu_rl.scripts.pipeline.platforms import platform_for

RECIPE = "qwen3-v6e32"
POLL = timedelta(minutes=2)  # each poll of each run: three runs queue for far longer than CAPACITY_WAIT
runner = CliRunner()


def _state(wl: dict, kind: str) -> dict:
    return next((c for c in wl["status"].get("conditions") or [] if c["type"] == kind), {})


def _holds(wl: dict) -> bool:
    return _state(wl, "QuotaReserved").get("status") == "True" and _state(wl, "Finished").get("status") != "True"


class Drivers:
    """Three runs, each in its own thread on one virtual clock; `pause_when` stops every run at its next
    poll the first time it holds, until `resume`."""

    def __init__(self, kube, recipes, settings, pause_when):
        self.kube, self.clock, self.errors = kube, [datetime.now(timezone.utc)], {}
        self.tick, self.gate, self.paused = threading.Lock(), threading.Event(), threading.Event()
        self.gate.set()
        self.pause_when, self.outputs = pause_when, {}
        kueue.use_clock(lambda: self.clock[0])
        from tpu_rl.scripts.cli.cloud import make_session

        self.threads = []
        for recipe in recipes:
            session = make_session(recipe, settings, "writes")
            session.now, session.sleep, session.confirm = (lambda: self.clock[0]), self.advance, None
            self.outputs[recipe.run] = io.StringIO()
            session.console = Console(file=self.outputs[recipe.run], width=200, soft_wrap=True)
            self.threads.append(threading.Thread(target=self.drive, args=(session,), daemon=True))

    def drive(self, session) -> None:
        try:
            platform_for(session.recipe).drive(session, STEPS, replace=False, follow_logs=False)
        except BaseException as error:  # noqa: BLE001 -- reported by the test
            self.errors[session.spec.run] = error

    def advance(self, _seconds: float) -> None:
        with self.tick:
            self.clock[0] += POLL
            if not self.paused.is_set():
                with self.kube._lock:
                    if self.pause_when(self.kube):
                        self.paused.set()
                        self.gate.clear()
        self.gate.wait(timeout=60)
        time.sleep(0.002)

    def resume(self) -> None:
        self.gate.set()


def test_three_runs_on_one_slices_quota_train_in_turn_and_runs_shows_them_queued(cloud, monkeypatch):
    monkeypatch.setenv("CAPACITY_WAIT", "reservation=20m")
    monkeypatch.setenv("COLUMNS", "200")
    kube = cloud["kube"]
    kube.slice_quota = 1
    base, settings = cloud_recipe("run", RECIPE)
    recipes = [RunSpec.requested(base, (f"learning_rate={lr}",), name).with_sweep("lr")
               for lr, name in (("1e-6", "lr-a"), ("3e-6", "lr-b"), ("1e-5", "lr-c"))]
    for recipe in recipes:
        script_successful_run(kube, cloud["gcs"], recipe, ticks=2, train_ticks=6, with_train_log=True)
    trains = {jobset_name(spec_of(recipe), "train"): recipe.run for recipe in recipes}

    def two_wait_behind_one(kube) -> bool:
        train = [wl for name, wl in kube.workloads.items() if name in trains]
        return len(train) == 3 and sum(map(_holds, train)) == 1 and all(
            _state(wl, "QuotaReserved").get("reason") == "Pending" for wl in train if not _holds(wl))

    drivers = Drivers(kube, recipes, settings, two_wait_behind_one)
    for thread in drivers.threads:
        thread.start()
    assert drivers.paused.wait(timeout=120), {run: out.getvalue() for run, out in drivers.outputs.items()}
    with kube._lock:
        waiting = kueue.queue_order([wl for name, wl in kube.workloads.items() if name in trains and not _holds(wl)])
        expected = {trains[wl["metadata"]["ownerReferences"][0]["name"]]: place for place, wl in enumerate(waiting, 1)}
    listing = runner.invoke(app, ["runs", RECIPE])
    as_json = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)
    costs = {run["run"]: run["cost_usd"] for run in as_json["runs"]}
    active = {entry["run"]: entry["what"] for entry in as_json["cluster"]["active"]}  # the words `down` refuses in
    statuses = {run: runner.invoke(app, ["status", RECIPE, "--run", run]) for run in expected}  # the same moment
    drivers.resume()
    for thread in drivers.threads:
        thread.join(timeout=180)
    assert not drivers.errors, (drivers.errors, {run: out.getvalue() for run, out in drivers.outputs.items()})

    # `runs`, while one trained and two waited: each waiting run's place in Kueue's order
    assert listing.exit_code == 0, listing.output
    for run, place in expected.items():
        shown = re.search(rf"{run} +│ queued #{place} ", listing.output) or f"{run}  queued #{place}," in listing.output
        assert shown, listing.output
        # issue 37: and its train is queued too, not `train running` beside `queued #1`
        row = re.search(rf"{run} +│ queued #{place} +│[^│]*│ (\S+) ", listing.output)
        block = listing.output.partition(f"{run}  queued #{place},")[2].partition("\n  steps ")[2].partition("\n")[0]
        assert (row.group(1) if row else block.split(", ")[1].removeprefix("train ")) == "queued", listing.output
        # issue 37: and `status` of the run gives its train the place `runs` gives the run
        status = statuses[run]
        assert status.exit_code == 0 and re.search(rf"^train +queued #{place},", status.output, re.M), status.output
        # and `down`, refusing while they wait, names each train by that place too, not `suspended`
        assert active[run] == f"JobSet {run}-train queued #{place}", active
    # a waiting run has billed nothing yet: its train's queue time (phases written as they change) is not
    # billed, and the shared convert is the cost of the run that submitted it (which may itself be waiting
    # then: its convert billed whatever polls of the shared clock it spanned, none or more by the threads' turns)
    converts = [run_record(cloud["gcs"], recipe)["steps"]["convert"].get("submitted") for recipe in recipes]
    assert sorted(converts, key=str) == [False, False, True], converts
    (submitter,) = [recipe.run for recipe, submitted in zip(recipes, converts) if submitted]
    assert all(costs[run] == 0.0 for run in expected if run != submitter), (costs, submitter)
    # they trained in turn: each train admitted only once the one before it finished
    spans = sorted((_state(kube.workloads[name], "Admitted")["lastTransitionTime"],
                    _state(kube.workloads[name], "Finished")["lastTransitionTime"]) for name in trains)
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    # one shared convert, submitted once; every run exported
    assert kube.created.count(jobset_name(spec_of(recipes[0]), "convert")) == 1
    assert all(kube.created.count(jobset_name(spec_of(recipe), step)) == 1 for recipe in recipes for step in ("train", "export"))
    # the waiting ones were told so, and their capacity wait (20 min) stood still for far longer
    last = next(run for run, place in expected.items() if place == 2)
    said = drivers.outputs[last].getvalue()
    assert re.search(r"train: queued behind our own lr-[abc]-train \(position \d of \d in Kueue's queue\); its "
                     r"capacity wait starts when Kueue admits it \(waited 0:00:00\)", said), said
    assert "longer than CAPACITY_WAIT" not in said
    # each run.json names the sweep, and `runs` names its best run once all are evaluated
    assert {run_record(cloud["gcs"], recipe)["sweep"] for recipe in recipes} == {"lr"}
    after = runner.invoke(app, ["runs", RECIPE])
    assert re.search(r"sweep lr: best run lr-[abc], held-out accuracy 40\.6→59\.4 \(3 of 3 runs evaluated\)",
                     after.output), after.output
    assert "queued #" not in after.output


def run_record(gcs, recipe) -> dict:
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from peers.fixtures import peer_settings

    bucket, name = split_gs_url(ArtifactPaths(spec_of(recipe), peer_settings()).run_record)
    return json.loads(gcs.bucket(bucket).blob(name).download_as_bytes())


def test_a_sweeps_runs_queue_for_the_first_modes_slice_rather_than_start_at_once_on_a_dearer_mode(cloud, monkeypatch):
    """CAPACITY=spot,on-demand gives each mode's flavor one slice's quota: Kueue's flavor assigner would
    admit an unpinned second train to on-demand at once while the first holds spot (flavorassigner.go
    findFlavorForPodSetResource). A sweep's trains are pinned to the first mode, so they queue for it and
    the sweep's price (at the first mode) holds."""
    monkeypatch.setenv("CAPACITY", "spot,on-demand")
    monkeypatch.setenv("CAPACITY_WAIT", "spot=20m,on-demand=20m")
    kube = cloud["kube"]
    kube.slice_quota, kube.flavor_order = 1, ("spot", "on-demand")
    base, settings = cloud_recipe("run", RECIPE)
    recipes = [RunSpec.requested(base, (f"learning_rate={lr}",), name).with_sweep("lr")
               for lr, name in (("1e-6", "lr-a"), ("3e-6", "lr-b"))]
    for recipe in recipes:
        script_successful_run(kube, cloud["gcs"], recipe, ticks=2, train_ticks=6)
    trains = [jobset_name(spec_of(recipe), "train") for recipe in recipes]
    drivers = Drivers(kube, recipes, settings, lambda _kube: False)
    for thread in drivers.threads:
        thread.start()
    for thread in drivers.threads:
        thread.join(timeout=180)
    assert not drivers.errors, (drivers.errors, {run: out.getvalue() for run, out in drivers.outputs.items()})
    flavors = {name: {f for ps in kube.workloads[name]["status"]["admission"]["podSetAssignments"]
                      for f in ps["flavors"].values()} - {"cpu"} for name in trains}
    assert flavors == {name: {"tpu-spot"} for name in trains}, flavors
    spans = sorted((_state(kube.workloads[name], "Admitted")["lastTransitionTime"],
                    _state(kube.workloads[name], "Finished")["lastTransitionTime"]) for name in trains)
    assert spans[1][0] >= spans[0][1], spans
