"""`tpu-rl sweep`: the runs of a grid or a file, each named from its values, checked and priced whole before
any is started, then each started detached (Platform.run(detach=True)); refused on the VM recipe."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from cli_helpers import error_line, fits_80_columns_with_whole_paths
from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.k8s import spec_digest
from peers.fixtures import peer_settings, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.costs.run import pipeline_run_estimate
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.recipes.runs.identity import check_run_name
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.sweeps import parse_grid
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
GRID = ["--grid", "learning_rate=1e-6,3e-6,1e-5", "--grid", "rl.grpo_beta=0.04,0.08"]
runner = CliRunner()


def _started(monkeypatch, fail_at: int | None = None) -> list[tuple[str, str | None]]:
    """The real start of each run's driver (tpu_rl.scripts.pipeline.gke.driver.start_driver, reached through
    Platform.run(detach=True)), recording the runs it was asked to start; the `fail_at`-th call fails as a
    cluster that refuses would, before it creates anything."""
    from tpu_rl.scripts.pipeline.gke import attach

    calls: list[tuple[str, str | None]] = []
    real = attach.start_driver

    def start(session, steps, **kwargs):
        if fail_at is not None and len(calls) + 1 == fail_at:
            raise ApiError("the test's refusal")
        calls.append((session.spec.run, session.spec.sweep))
        return real(session, steps, **kwargs)

    monkeypatch.setattr(attach, "start_driver", start)
    return calls


def test_a_grid_gives_the_product_of_its_axes_first_axis_slowest():
    runs = parse_grid(["learning_rate=1e-6,3e-6", "rl.grpo_beta=0.04,0.08,0.1"])
    assert [run.sets for run in runs] == [
        ("learning_rate=1e-6", "rl.grpo_beta=0.04"), ("learning_rate=1e-6", "rl.grpo_beta=0.08"),
        ("learning_rate=1e-6", "rl.grpo_beta=0.1"), ("learning_rate=3e-6", "rl.grpo_beta=0.04"),
        ("learning_rate=3e-6", "rl.grpo_beta=0.08"), ("learning_rate=3e-6", "rl.grpo_beta=0.1")]


def test_a_derived_name_is_cut_to_a_valid_run_name_and_lengthens_its_hash_when_taken():
    from tpu_rl.recipes.runs.sweeps import derived_name

    sets = ("rl.num_generations=16", "learning_rate=3.5e-6", "decode_sampling_temperature=0.95")
    identity = {"the test's": "identity"}
    name = derived_name(sets, identity)
    assert name.startswith("ng16-lr3p5e-6-") and len(name) == 20 and check_run_name(name) == name
    longer = derived_name(sets, identity, {name})
    assert longer != name and len(longer) <= 20 and check_run_name(longer) == longer


def test_dry_run_names_each_run_from_its_values_and_prices_the_sweep_with_one_convert(settings_env, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    calls = _started(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, *GRID, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert fits_80_columns_with_whole_paths(result.output), result.output
    names = re.findall(r"^\d\. (\S+):", result.output, re.MULTILINE) or re.findall(r"│ \d │ (\S+)", result.output)
    assert [name[:-5] for name in names] == ["lr1e-6-gb0p04", "lr1e-6-gb0p08", "lr3e-6-gb0p04", "lr3e-6-gb0p08",
                                             "lr1e-5-gb0p04", "lr1e-5-gb0p08"], result.output
    assert len(set(names)) == 6 and all(check_run_name(name) for name in names)
    # convert once, train and export for each run, from the recipes' price table (recipes/costs/run.py)
    estimates = [pipeline_run_estimate(RunSpec.requested(get_recipe(RECIPE), (lr, beta)))
                 for lr in ("learning_rate=1e-6", "learning_rate=3e-6", "learning_rate=1e-5")
                 for beta in ("rl.grpo_beta=0.04", "rl.grpo_beta=0.08")]
    total = estimates[0].step("convert").usd + sum(e.total - e.step("convert").usd for e in estimates)
    assert f"expected: {usd(total)} in all" in result.output
    assert "nothing is started" in result.output and calls == []


def test_one_costly_run_of_a_sweep_is_said_in_the_singular(settings_env, monkeypatch):
    """num_batches=500 trains ten times the recipe's 50 steps: well past COSTLY_RATIO times its own run."""
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "num_batches=50,500", "--dry-run"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert re.search(r"warning: 1 of the sweep's runs \(\S+\) is estimated at 3 times the recipe's own run", said), said


def test_every_run_of_a_sweep_shares_one_convert_jobset():
    recipes = [RunSpec.requested(get_recipe(RECIPE), (f"learning_rate={lr}",)) for lr in ("1e-6", "3e-6", "1e-5")]
    converts = [render_manifests(spec_of(recipe), peer_settings())["convert"] for recipe in recipes]
    trains = [render_manifests(spec_of(recipe), peer_settings())["train"] for recipe in recipes]
    assert len({manifest["metadata"]["name"] for manifest in converts}) == 1
    assert len({spec_digest(manifest) for manifest in converts}) == 1  # a later run attaches to it (plan.py)
    assert len({manifest["metadata"]["name"] for manifest in trains}) == 3


def _objects(gcs) -> list[str]:
    return [blob.name for bucket in gcs.list_buckets() for blob in bucket.list_blobs()]


def test_one_bad_set_among_many_refuses_the_whole_sweep_before_anything_starts(cloud, monkeypatch):
    calls = _started(monkeypatch)
    before = _objects(cloud["gcs"])  # the driver's locked wheels, as an earlier run staged them
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,fast", "--grid",
                                 "rl.grpo_beta=0.04,0.08"])
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert line.startswith("error: sweep run 5 of 6 (--set learning_rate=fast --set rl.grpo_beta=0.04): ")
    assert "nothing was started" in line
    assert calls == [] and cloud["kube"].created == [] and _objects(cloud["gcs"]) == before
    assert cloud["kube"].job_calls == [] and cloud["kube"].configmaps == {}


def test_two_runs_that_train_the_same_weights_are_refused(settings_env, tmp_path):
    (tmp_path / "sweep.toml").write_text('[[runs]]\nset = ["learning_rate=2e-5"]\n'
                                         '[[runs]]\nset = ["learning_rate=0.00002"]\n')
    result = runner.invoke(app, ["sweep", RECIPE, "--file", "sweep.toml", "--dry-run"])
    assert result.exit_code == 2
    assert "error: --file sweep.toml: runs 1 and 2 of the sweep train the same weights" in error_line(result)


def test_a_file_lists_named_runs_and_names_the_sweep(settings_env, tmp_path, monkeypatch):
    calls = _started(monkeypatch)
    (tmp_path / "sweep.toml").write_text('name = "beta-sweep"\n[[runs]]\nname = "beta-low"\n'
                                         'set = ["rl.grpo_beta=0.02"]\n[[runs]]\nset = ["rl.grpo_beta=0.2"]\n')
    result = runner.invoke(app, ["sweep", RECIPE, "--file", "sweep.toml", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep beta-sweep: 2 runs" in result.output
    assert "beta-low" in result.output and re.search(r"gb0p2-[0-9a-f]{4}", result.output), result.output
    assert calls == []


def test_a_sweep_of_one_run_says_one_run(settings_env, tmp_path, monkeypatch):
    # issue 37: `1 runs`
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep.toml").write_text('name = "one"\n[[runs]]\nset = ["rl.grpo_beta=0.02"]\n')
    result = runner.invoke(app, ["sweep", RECIPE, "--file", "sweep.toml", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep one: 1 run, " in result.output and "1 runs" not in result.output, result.output


def test_over_max_cost_is_refused_in_one_line_naming_the_total_and_the_cap(settings_env, monkeypatch):
    calls = _started(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, *GRID, "--max-cost", "100"])
    assert result.exit_code == 2
    assert re.fullmatch(r"error: sweep \S+ is estimated at \$[\d,]+\.\d\d for 6 runs, over --max-cost \$100\.00: "
                        r"drop values from the grid or raise --max-cost; nothing was started", error_line(result))
    assert calls == []


def test_the_vm_recipe_refuses_a_sweep_in_one_line_that_says_why(settings_env):
    result = runner.invoke(app, ["sweep", "llama31-v6e8", "--grid", "learning_rate=1e-6,3e-6"])
    assert result.exit_code == 2
    line = error_line(result)
    assert "one TPU VM runs one startup script" in line and "GKE recipe" in line


def _no_driver_runs(kube) -> None:
    """The drivers' pods stay Pending: what a sweep does ends once each run's driver Job exists."""
    kube.kubelet.close()
    kube.kubelet = None


def test_each_run_is_started_detached_in_order_with_the_sweeps_name(cloud, monkeypatch):
    _no_driver_runs(cloud["kube"])
    calls = _started(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,1e-5", "--name", "lr"])
    assert result.exit_code == 0, result.output
    assert [name[:-5] for name, _ in calls] == ["lr1e-6", "lr3e-6", "lr1e-5"]
    assert {sweep for _, sweep in calls} == {"lr"}
    assert "sweep lr: 3 runs started" in result.output and cloud["kube"].created == []  # the drivers submit
    # each run's driver Job, whose request names the sweep its run.json records
    assert [name for verb, name in cloud["kube"].job_calls] == [f"tpu-rl-driver-{name}" for name, _ in calls]
    requests = [json.loads(configmap["data"]["request.json"]) for configmap in cloud["kube"].configmaps.values()
                if "request.json" in configmap.get("data", {})]
    assert sorted((request["run"], request["sweep"]) for request in requests) == sorted(calls)
    assert "sweep lr: 3 runs, none evaluated after training yet" in result.output


def test_a_run_that_cannot_start_names_the_started_ones_and_how_to_stop_them(cloud, monkeypatch):
    _no_driver_runs(cloud["kube"])
    calls = _started(monkeypatch, fail_at=3)
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,1e-5", "--name", "lr"])
    assert result.exit_code == ApiError.code, result.output  # the exit code of what stopped it
    first, second = (name for name, _ in calls)
    line = error_line(result)
    assert line.startswith("error: sweep lr: run lr1e-5-") and "(the test's refusal)" in line
    assert line.endswith(f"2 runs were started ({first}, {second}); stop them with `tpu-rl cancel {RECIPE} --run "
                         f"{first} --yes`; `tpu-rl cancel {RECIPE} --run {second} --yes`")




def test_a_run_whose_driver_runs_another_request_is_refused_before_the_sweep_starts_it(cloud, monkeypatch):
    _no_driver_runs(cloud["kube"])
    grid = ["--grid", "learning_rate=1e-6,3e-6", "--name", "lr"]
    planned = runner.invoke(app, ["sweep", RECIPE, *grid, "--dry-run"])
    [first] = set(re.findall(r"lr1e-6-[0-9a-f]+", planned.output))
    convert_only = runner.invoke(app, ["run", RECIPE, "--set", "learning_rate=1e-6", "--run", first,
                                       "--steps", "convert", "--detach"])
    assert convert_only.exit_code == 0, convert_only.output
    calls = _started(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, *grid])
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert line.startswith(f"error: sweep lr: run {first} was not started (run {first} has a driver running "
                           "another request"), line
    assert line.endswith("no run was started") and [name for name, _ in calls] == [first]
    assert [name for _, name in cloud["kube"].job_calls] == [f"tpu-rl-driver-{first}"]  # only run's own


def test_the_sweeps_lines_promise_one_slice_at_a_time_and_no_order_of_its_runs(cloud, monkeypatch):
    """Kueue orders the trains by their Workloads' creation, which follows whichever driver submits train
    first: neither the plan nor the start line nor the README promises the plan's order."""
    _no_driver_runs(cloud["kube"])  # run 1's driver would finish convert, without its output, under run 2's check
    _started(monkeypatch)
    dry = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6", "--name", "lr", "--dry-run"])
    started = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6", "--name", "lr"])
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for text in (dry.output, started.output, readme):
        assert "in this order" not in text and "in turn" not in text
    assert "trained one after another on one slice" in dry.output
    assert "in the order their drivers submit train" in started.output, started.output


def test_a_run_name_the_bucket_holds_for_other_settings_refuses_the_whole_sweep_before_any_starts(cloud, tmp_path,
                                                                                                  monkeypatch):
    """`run`'s guard on its name (RunRecord.open) runs inside each driver; the sweep applies it to every
    run first, so run 1 is not started when run 2's name is taken."""
    import json

    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from tpu_rl.recipes.runs.spec import run_identity

    calls = _started(monkeypatch)
    other = RunSpec.requested(get_recipe(RECIPE), ("rl.grpo_beta=0.5",), "beta-low")
    bucket, name = split_gs_url(ArtifactPaths(spec_of(other), peer_settings()).run_record)
    cloud["gcs"].bucket(bucket).blob(name).upload_from_string(json.dumps(
        {"run": "beta-low", "identity": run_identity(other)}))
    (tmp_path / "sweep.toml").write_text('name = "beta"\n[[runs]]\nset = ["rl.grpo_beta=0.2"]\n'
                                         '[[runs]]\nname = "beta-low"\nset = ["rl.grpo_beta=0.02"]\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["sweep", RECIPE, "--file", "sweep.toml"])
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert line.startswith("error: sweep beta: run 'beta-low' was started with other settings (") and \
        "grpo_beta" in line and line.endswith("nothing was started"), line
    assert calls == []


def test_a_derived_name_spells_a_numbers_value_not_its_spelling_and_keeps_its_sign():
    from tpu_rl.recipes.runs.sweeps import derived_name

    identity = {"any": "identity"}
    assert derived_name(("learning_rate=0.000002",), identity)[:-5] == derived_name(("learning_rate=2e-6",),
                                                                                   identity)[:-5] == "lr2e-6"
    assert derived_name(("rl.grpo_beta=0.040",), identity)[:-5] == "gb0p04"
    assert derived_name(("learning_rate_schedule_steps=-1",), identity)[:-5] == "lrss-1"


def test_a_sweep_prints_a_warning_its_runs_share_once(settings_env, monkeypatch):
    """`run` prints the schedule warning of learning_rate_schedule_steps=-1; a sweep of three such runs
    prints it once, not three times."""
    from tpu_rl.recipes.runs.schedule import SCHEDULE_KEY

    _started(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,1e-5", "--grid",
                                 f"{SCHEDULE_KEY}=-1", "--dry-run", "--unusual-values"])
    assert result.exit_code == 0, result.output
    assert result.output.count(f"warning: {SCHEDULE_KEY}=-1 lets MaxText pick the length") == 1, result.output


def test_any_error_starting_a_run_names_the_runs_already_started(cloud, monkeypatch):
    from tpu_rl.scripts.pipeline.gke import attach

    started: list[str] = []
    real = attach.start_driver

    def start(session, steps, **kwargs):
        if started:
            raise RuntimeError("the test's unexpected error")
        started.append(session.spec.run)
        return real(session, steps, **kwargs)

    monkeypatch.setattr(attach, "start_driver", start)
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6", "--name", "lr"])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert f"1 run was started ({started[0]}); stop it with `tpu-rl cancel {RECIPE} --run {started[0]} " \
           "--yes`" in text, result.output
