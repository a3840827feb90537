"""A plan that cannot fit its chips is refused before anything is submitted, by `fit`, `run --dry-run`,
`run` and `sweep` alike; one that fits says so, and a sweep compiles each memory shape once.

The plan that cannot fit is qwen3-v6e32 with a micro-batch 32 times the recipe's (batch_size and
train_micro_batch_size 256 instead of 8): 1,024 sequences a train step. XLA's TPU compiler refuses its
train step for the 16 trainer chips of v6e-32: its result, as the compiler gave it
(tests/fit_results/qwen3-v6e32-micro-256.json), is in each test's own cache, since `make test` compiles
only the recipes' own plans before the suite. 8 times the recipe's still fits.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peers.fixtures import put_step_output
from tpu_rl.jobs.fit import compile_request
from tpu_rl.recipes import example_settings, get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.fit import compiler

RECIPE = "qwen3-v6e32"
TOO_BIG = ["--set", "batch_size=256", "--set", "train_micro_batch_size=256"]
runner = CliRunner()
REFUSED = Path(__file__).parent / "fit_results" / "qwen3-v6e32-micro-256.json"


# The cache the layout tests share with `make test`'s other compiles: a refusal is a function of the
# request and the compile's code (the fit cache's digest), so a clean clone on a machine that compiled it
# before reads it instead of importing MaxText again (16 s a test).
SHARED_CACHE = os.environ.get("TPU_RL_CACHE")


def shared_cache(monkeypatch) -> None:
    if SHARED_CACHE is None:
        monkeypatch.delenv("TPU_RL_CACHE")
    else:
        monkeypatch.setenv("TPU_RL_CACHE", SHARED_CACHE)


@pytest.fixture(autouse=True)
def compiled_before(tmp_path, monkeypatch):
    """The refused plan's compile in this test's own cache, under the digest its plan has now."""
    monkeypatch.setenv("TPU_RL_CACHE", str(tmp_path / "cache"))
    spec = RunSpec.requested(get_recipe(RECIPE), TOO_BIG[1::2], None)
    path = compiler.cache_dir() / f"{compiler.digest(compile_request(spec, example_settings()))}.json"
    path.parent.mkdir(parents=True)
    path.write_text(REFUSED.read_text())


def refused(args: list[str]) -> str:
    """The command's one error line, after nothing but the compiler's progress lines."""
    result = runner.invoke(app, args)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("fit: ")]
    assert "Traceback" not in result.output
    assert lines[-1].startswith("error: "), result.output
    return lines[-1]


def nothing_submitted(cloud) -> None:
    assert cloud["kube"].created == []
    assert [method for method, *_ in cloud["kube"].requests if method in ("POST", "PUT", "PATCH", "DELETE")] == []


def test_the_recipes_own_plan_fits_with_the_margin_and_shows_its_account():
    result = runner.invoke(app, ["fit", RECIPE])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "compiled for             v6e-32, 16 trainer chips (expert 4, fsdp 2, tensor 2)"
    assert any(line.startswith("vLLM                     ") and "of each of its 16 own chips" in line for line in lines)
    assert lines[-1].startswith("fits: ") and "of a v6e-32 chip's 31.2 GiB at its peak" in lines[-1]
    assert lines[-1].endswith("free (the margin: 10%)")


def test_a_micro_batch_32_times_the_recipes_is_refused_by_fit_with_the_figure_and_the_fix():
    line = refused(["fit", RECIPE, *TOO_BIG])
    # the compiler's refusal: 55.15G of temporaries, and the reference model beside them (3.6 GiB)
    assert line.startswith("error: qwen3-v6e32 does not fit: the train step needs 58.7 GiB, more than a v6e "
                           "chip's 31.2 GiB, on the 16 trainer chips (expert 4, fsdp 2, tensor 2) of v6e-32; ")
    assert line.endswith("lower train_micro_batch_size, rl.num_generations or max_target_length")


def test_the_dry_run_refuses_it_with_the_same_line(cloud):
    assert refused(["run", RECIPE, "--dry-run", *TOO_BIG]) == refused(["fit", RECIPE, *TOO_BIG])
    nothing_submitted(cloud)


def test_a_run_of_it_submits_nothing_to_the_cluster_and_asks_for_no_capacity(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    # --yes: its spend is consented, so the fit check is what refuses it (without, consent refuses first)
    line = refused(["run", RECIPE, "--detach", "--yes", *TOO_BIG])
    assert "does not fit" in line
    nothing_submitted(cloud)
    assert cloud["kube"].secrets == {}


def test_a_dry_run_that_fits_says_so_after_its_plan(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("dry run of run qwen3-v6e32-")
    assert lines[-1].startswith("fits: ") and lines[-1].endswith("free (the margin: 10%)")


def test_a_sweep_with_one_point_that_cannot_fit_starts_none(cloud, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[[runs]]\nset = ["learning_rate=1e-5"]\n\n'
                     '[[runs]]\nset = ["batch_size=256", "train_micro_batch_size=256"]\n')
    line = refused(["sweep", RECIPE, "--file", str(sweep), "--name", "too-big", "--yes"])  # past consent
    assert line.startswith("error: sweep too-big: run ") and "qwen3-v6e32 does not fit: the train step needs" in line
    assert line.endswith("; nothing was started")
    nothing_submitted(cloud)


def test_a_sweep_compiles_each_memory_shape_once(cloud, monkeypatch):
    asked: list[str] = []
    # it counts compiles, not bytes: a shape compiled nowhere yet stands in with the recipe's own figures
    own = compiler.known(compile_request(RunSpec.of_catalog(get_recipe(RECIPE)), example_settings()))
    monkeypatch.setattr(compiler, "compiled", lambda request, say=None: asked.append(compiler.digest(request))
                        or compiler.known(request) or own)
    monkeypatch.setattr("tpu_rl.scripts.fit.check.compiled", compiler.compiled)
    # four runs, two memory shapes: learning_rate changes no buffer, rl.num_generations does
    result = runner.invoke(app, ["sweep", RECIPE, "--dry-run", "--grid", "learning_rate=1e-5,2e-5",
                                 "--grid", "rl.num_generations=4,2", "--name", "shapes"])
    assert result.exit_code == 0, result.output
    assert len(asked) == 2 == len(set(asked)), asked
    assert "(the tightest of 2 memory shapes)" in result.output


def test_parallelism_the_trainer_chips_cannot_hold_is_refused_before_any_memory_is_counted(cloud, monkeypatch):
    shared_cache(monkeypatch)
    line = refused(["run", RECIPE, "--dry-run", "--set", "ici_tensor_parallelism=3"])
    assert line == ("error: qwen3-v6e32 cannot be laid out on its 16 trainer chips of v6e-32: its "
                    "ici_*_parallelism (expert 4 × fsdp -1 × tensor 3; -1 takes what is left) must multiply to "
                    "16; change them (MaxText: Unspecified value unable to be determined with the given ICI "
                    "parallelism values)")
    nothing_submitted(cloud)


def test_a_rollout_the_sampler_chips_cannot_hold_is_refused_before_any_compile(cloud, monkeypatch):
    """MaxText's own get_rollout_kwargs_for_parallelism (train_rl.py) answers before the train step is
    compiled: 3 does not divide qwen3's 16 sampler chips."""
    shared_cache(monkeypatch)
    line = refused(["run", RECIPE, "--dry-run", "--set", "rollout_tensor_parallelism=3"])
    assert line.startswith("error: qwen3-v6e32 cannot lay out its rollout on its 16 sampler chips of v6e-32: "
                           "rollout_data, _tensor and _expert_parallelism (at most one -1, which takes what is "
                           "left) must multiply to 16; change them (MaxText: num_sampler_devices(16) must be "
                           "divisible by rollout_tensor_parallelism(3) * rollout_expert_parallelism(4)"), line
    nothing_submitted(cloud)


def test_a_compile_that_stops_says_where_and_keeps_its_traceback(tmp_path, monkeypatch):
    """A failure that is no refusal of ours (a KeyError deep in tunix, say) names the innermost frame and
    the file that keeps the traceback, instead of the bare exception."""
    import traceback

    monkeypatch.setattr(compiler, "cache_dir", lambda: tmp_path)

    def deep():
        return {}["local_layers"]

    try:
        deep()
    except KeyError:
        trace = traceback.format_exc()
    request = compile_request(RunSpec.of_catalog(get_recipe(RECIPE)), example_settings())
    said = compiler.failed_at({"error": "KeyError: 'local_layers'", "traceback": trace}, request)
    kept = tmp_path / "errors" / f"{compiler.digest(request)}.txt"
    assert said == f" (stopped in {__file__}:{deep.__code__.co_firstlineno + 1} deep; the traceback: {kept})"
    assert kept.read_text() == trace
    assert compiler.failed_at({"error": "no result"}, request) == ""


def test_skipping_the_check_is_said_and_recorded(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--skip-fit-check", *TOO_BIG])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("warning: not judged by the TPU compiler (--skip-fit-check)")
