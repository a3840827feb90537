"""Consent before a large spend, once (issue 37, item 1; recipes/costs/consent.py): `run` and `sweep` ask
when the work is submitted and is estimated at COSTLY_RATIO times the recipe's own run or more; without a
terminal they refuse unless --yes or a --max-cost the estimate fits; reattaching and a sweep's runs ask
nothing again; a sweep's size is bounded, and its dry run leads with its size and total."""

from __future__ import annotations

import json
import math
import re
import threading

import pytest
from typer.testing import CliRunner

from cli_helpers import error_line, interrupt, session_hook
from peers.fixtures import jobset_of
from tpu_rl.jobs.driver import REQUEST_FILE
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.consent import COSTLY_RATIO
from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.costs.run import pipeline_run_estimate
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.sweeps import SWEEP_MAX_RUNS
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
LARGE = "num_batches=500"  # ten times the recipe's 50 steps: well past COSTLY_RATIO times its own run
runner = CliRunner()


def _estimate(*sets: str) -> float:
    return pipeline_run_estimate(RunSpec.requested(get_recipe(RECIPE), sets)).total


def test_the_large_run_is_over_the_threshold_and_the_recipes_own_is_not():
    """The premise of the tests below, from the price table: not a figure of the code under test's own."""
    own = _estimate()
    assert _estimate(LARGE) >= COSTLY_RATIO * own > own


def test_a_large_run_without_a_terminal_is_refused_in_one_line_and_submits_nothing(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"])
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert re.match(rf"error: run \S+ is estimated at {re.escape(usd(_estimate(LARGE)))}, [\d.]+ times the "
                    rf"recipe's own run \({re.escape(usd(_estimate()))}\), and there is no terminal to ask in: "
                    r"rerun with --yes, or with --max-cost \d+; nothing was started$", line), line
    assert cloud["kube"].job_calls == [] and cloud["kube"].created == [] and cloud["kube"].configmaps == {}


def _fit_check_fails(monkeypatch) -> None:
    """The fit check (a TPU compile of minutes for a new memory shape) fails the test if it is reached."""
    from tpu_rl.scripts.fit import check

    for name in ("require_fit", "require_fits"):
        monkeypatch.setattr(check, name, lambda *args, **kwargs: pytest.fail("the fit check ran before consent"))


def test_a_large_run_without_a_terminal_is_refused_before_the_fit_check(cloud, monkeypatch):
    """issue 37 review: a script without a terminal waited out the fit check's compile, then was refused."""
    _fit_check_fails(monkeypatch)
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--detach"])
    assert result.exit_code == 2, result.output
    assert error_line(result).endswith("and there is no terminal to ask in: rerun with --yes, or with --max-cost "
                                       f"{math.ceil(_estimate(LARGE))}; nothing was started"), result.output
    assert cloud["kube"].job_calls == [] and cloud["kube"].created == [] and cloud["kube"].configmaps == {}


def test_a_large_sweep_without_a_terminal_is_refused_before_the_fit_check(cloud, monkeypatch):
    _fit_check_fails(monkeypatch)
    result = runner.invoke(app, ["sweep", RECIPE, *GRID[:-1], "--name", "big"])
    assert result.exit_code == 2, result.output
    assert re.match(r"error: sweep big \(4 runs\) is estimated at \$[\d,.]+, [\d.]+ times the recipe's own run "
                    r".*no terminal to ask in: rerun with --yes", error_line(result)), result.output
    assert cloud["kube"].job_calls == []


def test_a_large_run_with_a_terminal_is_asked_once_after_the_fit_check(cloud, monkeypatch):
    """With a terminal the question stays where it was: once, when the run is first known new."""
    from tpu_rl.scripts.fit import check

    order: list[str] = []
    real = check.require_fit
    monkeypatch.setattr(check, "require_fit", lambda *args, **kwargs: order.append("fit") or real(*args, **kwargs))
    session_hook(monkeypatch, confirm=lambda question: order.append("asked") or False)
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--detach"])
    assert result.exit_code == 2 and error_line(result).startswith("error: answered no: run "), result.output
    assert order == ["fit", "asked"]


def test_the_warning_and_the_refusal_on_one_screen_give_one_ratio():
    """The dry run's warning and the refusal without a terminal say the same ratio, in one rounding: one
    decimal, rounded down (9.96 times is not yet 10), worked by hand from the two estimates."""
    import math

    from tpu_rl.recipes.costs.consent import Spend
    from tpu_rl.recipes.costs.run import costly_run_warning

    ratio = f"{math.floor(_estimate(LARGE) / _estimate() * 10) / 10:.1f} times"
    spec = RunSpec.requested(get_recipe(RECIPE), (LARGE,))
    assert f", {ratio} the recipe's own run" in costly_run_warning(spec)
    with pytest.raises(Exception) as refused:
        Spend("this run", _estimate(LARGE), _estimate(), yes=False, max_cost=None).require(None)
    assert f", {ratio} the recipe's own run" in str(refused.value)
    assert Spend("this run", 9.96, 1.0, yes=False, max_cost=None).question().startswith(
        "Start this run, estimated at $9.96 (9.9 times")


@pytest.mark.parametrize("consent", [["--yes"], ["--max-cost", "100000"]])
def test_yes_or_a_max_cost_it_fits_starts_it_without_a_question(cloud, monkeypatch, consent):
    questions: list[str] = []
    session_hook(monkeypatch, confirm=lambda question: questions.append(question) or False)
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach", *consent])
    assert result.exit_code == 0, result.output
    assert questions == [] and [verb for verb, _ in cloud["kube"].job_calls] == ["create"]


def test_a_max_cost_below_the_estimate_is_refused_even_with_yes(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--yes", "--max-cost", "500"])
    assert result.exit_code == 2, result.output
    assert error_line(result) == (f"error: this run is estimated at {usd(_estimate(LARGE))}, over --max-cost "
                                  "$500.00: change its --set items or raise --max-cost; nothing was started")
    assert cloud["kube"].job_calls == []


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_max_cost_that_is_no_amount_is_refused_in_our_words(settings_env, value):
    for command in (["run", RECIPE, "--dry-run"], ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6"]):
        result = runner.invoke(app, [*command, "--max-cost", value])
        assert result.exit_code == 2, result.output
        assert error_line(result).startswith(f"error: --max-cost {float(value)}: give a number of US dollars"), \
            result.output


def test_the_terminal_is_asked_once_and_a_reattaching_run_asks_nothing(cloud, monkeypatch):
    cloud["kube"].plan(jobset_of(RECIPE, "convert"), outcome="hang")
    questions: list[str] = []
    attached = threading.Event()

    def sleep(seconds: float) -> None:
        """The CLI's waits end at once; the driver's (its thread) once the second `run` attached to it, or it
        could end first, and that `run` start another driver instead of attaching."""
        if threading.current_thread() is not threading.main_thread():
            attached.wait(60)
        interrupt(seconds)

    session_hook(monkeypatch, confirm=lambda question: questions.append(question) or True, sleep=sleep)
    command = ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"]
    try:
        first = runner.invoke(app, command)
        assert first.exit_code == 0, first.output
        [question] = questions
        assert question.startswith("Start run ") and f"estimated at {usd(_estimate(LARGE))}" in question
        again = runner.invoke(app, command)  # its driver runs: attached to, not submitted again
    finally:
        attached.set()
    assert again.exit_code == 0, again.output
    assert len(questions) == 1 and [verb for verb, _ in cloud["kube"].job_calls] == ["create"]


def test_a_no_at_the_prompt_submits_nothing(cloud, monkeypatch):
    session_hook(monkeypatch, confirm=lambda question: False)
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"])
    assert result.exit_code == 2, result.output
    assert error_line(result).startswith("error: answered no: run ")
    assert cloud["kube"].job_calls == [] and cloud["kube"].configmaps == {}


def test_a_run_with_a_record_of_its_settings_resumes_without_a_question(cloud, monkeypatch):
    """A run whose record the bucket holds (its driver ended) is resumed, not submitted anew."""
    from peers.fixtures import peer_settings
    from tpu_rl.jobs.paths import ArtifactPaths
    from tpu_rl.recipes.runs.spec import run_identity
    from tpu_rl.scripts.cloud import gcs as bucket

    spec = RunSpec.requested(get_recipe(RECIPE), (LARGE,))
    bucket.write_json(cloud["gcs"], ArtifactPaths(spec, peer_settings()).run_record,
             {"identity": run_identity(spec), "status": "interrupted"})
    session_hook(monkeypatch, confirm=lambda question: pytest.fail(f"asked again: {question}"))
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"])
    assert result.exit_code == 0, result.output


def test_a_run_the_bucket_records_resumes_without_a_terminal_and_without_yes(cloud):
    """The early refusal is of a new run only: a recorded one (its driver ended) asks nothing, as before."""
    from peers.fixtures import peer_settings
    from tpu_rl.jobs.paths import ArtifactPaths
    from tpu_rl.recipes.runs.spec import run_identity
    from tpu_rl.scripts.cloud import gcs as bucket

    spec = RunSpec.requested(get_recipe(RECIPE), (LARGE,))
    bucket.write_json(cloud["gcs"], ArtifactPaths(spec, peer_settings()).run_record,
                      {"identity": run_identity(spec), "status": "interrupted"})
    result = runner.invoke(app, ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"])
    assert result.exit_code == 0, result.output


GRID = ["--grid", "num_batches=500,1000", "--grid", "rl.num_generations=8,16", "--skip-fit-check"]


def test_a_sweeps_dry_run_leads_with_its_size_and_total(settings_env, monkeypatch):
    result = runner.invoke(app, ["sweep", RECIPE, *GRID, "--dry-run", "--name", "big"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    total = re.search(r"expected: (\$[\d,.]+) in all", result.output).group(1)
    assert first == f"sweep big: 4 runs, estimated at {total} in all", result.output
    assert "started without a dry run, it asks first" in " ".join(result.output.split())


def test_a_large_sweep_without_a_terminal_is_refused_and_with_yes_asks_nothing_more(cloud, monkeypatch):
    from tpu_rl.scripts.cli import core as cli_core

    cloud["kube"].kubelet.close()  # the drivers' pods stay Pending: the sweep ends once each Job exists
    cloud["kube"].kubelet = None
    refused = runner.invoke(app, ["sweep", RECIPE, *GRID, "--name", "big"])
    assert refused.exit_code == 2, refused.output
    assert re.match(r"error: sweep big \(4 runs\) is estimated at \$[\d,.]+, [\d.]+ times the recipe's own run "
                    r".*no terminal to ask in: rerun with --yes", error_line(refused)), refused.output
    assert cloud["kube"].job_calls == []
    questions: list[str] = []
    monkeypatch.setattr(cli_core, "asker", lambda: lambda question: questions.append(question) or True)
    started = runner.invoke(app, ["sweep", RECIPE, *GRID, "--name", "big"])
    assert started.exit_code == 0, started.output
    assert len(questions) == 1 and questions[0].startswith("Start sweep big (4 runs), estimated at ")
    assert [verb for verb, _ in cloud["kube"].job_calls] == ["create"] * 4  # each run's driver, unasked
    requests = [json.loads(configmap["data"][REQUEST_FILE]) for configmap in cloud["kube"].configmaps.values()]
    assert len(requests) == 4  # each driver's run.json keeps the sweep's yes (drive.py, RunRecord.start)
    assert {(request["consent"]["what"], request["consent"]["how"]) for request in requests} == {
        ("sweep big (4 runs)", "prompt")}


def test_a_sweep_over_its_size_bound_is_refused_before_any_run_is_checked_and_max_runs_passes_it(settings_env):
    values = ",".join(f"{index}e-7" for index in range(1, SWEEP_MAX_RUNS + 2))
    result = runner.invoke(app, ["sweep", RECIPE, "--grid", f"learning_rate={values}", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert error_line(result) == (f"error: --grid makes {SWEEP_MAX_RUNS + 1} runs, over the sweep's bound of "
                                  f"{SWEEP_MAX_RUNS}: drop values, or pass --max-runs {SWEEP_MAX_RUNS + 1} to start "
                                  "that many; nothing was started")
    small = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,1e-5", "--max-runs", "2",
                                "--dry-run"])
    assert small.exit_code == 2 and "pass --max-runs 3" in error_line(small)
    passed = runner.invoke(app, ["sweep", RECIPE, "--grid", "learning_rate=1e-6,3e-6,1e-5", "--max-runs", "3",
                                 "--dry-run", "--skip-fit-check"])
    assert passed.exit_code == 0, passed.output


def _record(cloud, *sets: str) -> dict:
    from peers.fixtures import peer_settings
    from tpu_rl.jobs.paths import ArtifactPaths
    from tpu_rl.scripts.cloud import gcs as bucket

    cloud["kube"].kubelet.close()  # the driver's thread has written its run.json
    return bucket.read_json(cloud["gcs"], ArtifactPaths(RunSpec.requested(get_recipe(RECIPE), sets),
                                                         peer_settings()).run_record)


@pytest.mark.parametrize("consent, how", [([], "prompt"), (["--yes"], "--yes"),
                                          (["--max-cost", "100000"], "--max-cost")])
def test_run_json_keeps_the_consent_a_new_run_was_given_and_a_resumed_run_keeps_it(cloud, monkeypatch, consent, how):
    session_hook(monkeypatch, confirm=lambda question: True)
    command = ["run", RECIPE, "--set", LARGE, "--skip-fit-check", "--detach"]
    first = runner.invoke(app, [*command, *consent])
    assert first.exit_code == 0, first.output
    given = _record(cloud, LARGE)["consent"]
    assert given["how"] == how and given["estimate_usd"] == round(_estimate(LARGE), 2)
    assert given["threshold_usd"] == round(COSTLY_RATIO * _estimate(), 2) and given["what"].startswith("run ")
    questions: list[str] = []  # the fake's convert leaves no output: resuming asks to submit it again
    session_hook(monkeypatch, confirm=lambda question: questions.append(question) or True)
    again = runner.invoke(app, command)  # resumed from its record: no consent asked, the first one kept
    assert again.exit_code == 0, again.output
    assert not [question for question in questions if question.startswith("Start ")], questions
    assert _record(cloud, LARGE)["consent"] == given


def test_a_run_under_the_threshold_records_that_nothing_needed_a_yes(cloud, monkeypatch):
    session_hook(monkeypatch, confirm=lambda question: pytest.fail(f"asked: {question}"))
    result = runner.invoke(app, ["run", RECIPE, "--skip-fit-check", "--detach"])
    assert result.exit_code == 0, result.output
    assert _record(cloud)["consent"]["how"] == "not asked: under the threshold"


# --- `tpu-rl eval`: it spends TPU time too, and follows the same rule (scripts/pipeline/gke/evaluate.py) -----


def _eval_most(recipe_name: str) -> float:
    """The most an evaluation bills, from the price table and the eval's own bound: the train step's hourly
    rate for EVAL_WAIT_MINUTES, in each attempt the JobSet may make."""
    from tpu_rl.jobs.train import PREEMPTIBLE_MAX_RESTARTS, restarts_after_preemption
    from tpu_rl.recipes.costs.run import hourly_estimate
    from tpu_rl.scripts.pipeline.gke.eval_cost import EVAL_WAIT_MINUTES

    recipe = get_recipe(recipe_name)
    attempts = 1 + PREEMPTIBLE_MAX_RESTARTS * restarts_after_preemption(recipe)
    return hourly_estimate(recipe).total * EVAL_WAIT_MINUTES / 60 * attempts


@pytest.mark.parametrize("recipe_name", ["qwen3-v6e32", "gemma4-v6e64"])
def test_an_evaluation_cannot_reach_the_threshold_so_it_is_never_asked_about(recipe_name):
    own = pipeline_run_estimate(RunSpec.of_catalog(get_recipe(recipe_name))).total
    assert _eval_most(recipe_name) < COSTLY_RATIO * own


def _scored_eval(cloud) -> tuple[str, list[str]]:
    from cli_helpers import trained_run
    from contracts.tunix_log import evaluation_line
    from tpu_rl.jobs.evaluate import eval_run_name

    _, paths = trained_run(cloud)
    scratch = eval_run_name(paths.run_name, 20)
    cloud["kube"].plan(f"{scratch}-train", ticks=3, logs=f"{evaluation_line('pre', 30, 64, 33, 58, 1.1)}\n",
                       outcome="hang")
    return scratch, ["eval", RECIPE, "--run", paths.run_name, "--step", "20"]


def test_an_eval_over_the_threshold_without_a_terminal_is_refused_and_with_yes_runs(cloud, monkeypatch):
    """The rule as run's, were the threshold below the eval's bound (a lower COSTLY_RATIO stands for it)."""
    from tpu_rl.recipes.costs import consent

    scratch, command = _scored_eval(cloud)
    monkeypatch.setattr(consent, "COSTLY_RATIO", 0.01)  # after the run it evaluates was trained
    refused = runner.invoke(app, command)
    assert refused.exit_code == 2, refused.output
    assert re.match(rf"error: the evaluation of run \S+ is estimated at {re.escape(usd(_eval_most(RECIPE)))}, .* "
                    r"no terminal to ask in: rerun with --yes, or with --max-cost \d+; nothing was started$",
                    error_line(refused)), refused.output
    assert not [name for name in cloud["kube"].created if scratch in name]
    started = runner.invoke(app, [*command, "--yes"])
    assert started.exit_code == 0, started.output
    assert f"{scratch}-train" in cloud["kube"].created


def test_an_eval_over_its_max_cost_is_refused_before_anything_is_made(cloud):
    scratch, command = _scored_eval(cloud)
    result = runner.invoke(app, [*command, "--max-cost", "1"])
    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(f"error: the evaluation of run {command[3]} is estimated at "
                                         f"{usd(_eval_most(RECIPE))}, over --max-cost $1.00")
    assert not [name for name in cloud["kube"].created if scratch in name]
