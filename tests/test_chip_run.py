"""What a real TPU chip wrote, read by the package: the trainer's log and TensorBoard event file of
llama31-v6e8's own train command run on a v5e chip by the real-chip smoke (tests/chip_run/README.md),
beside the fixtures built from tunix's format strings (tests/contracts/tunix_log.py, which the chip's
lines are checked against here), and the pairing of a rollout's step with the train step it fed
(scripts/rundata/tags.py paired_step) through `run`, `runs` and `metrics` against the local peers.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import sys
from pathlib import Path

from typer.testing import CliRunner

from contracts.tunix_log import EVAL_CALL_LINE, TRAIN_STEP_CALL_LINE
from peers.fixtures import jobset_of, put_step_output
from tpu_rl.jobs.paths import split_gs_url
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.rundata.evaluation import parse_evaluations
from tpu_rl.scripts.rundata.events import read_scalars
from tpu_rl.scripts.rundata.progress import TRAIN_STEP, TrainProgress, last_train_step
from tpu_rl.scripts.rundata.tags import COMPLETION_LENGTH, LOSS, REWARD_MEAN, SUMMARY_TAGS, paired_step

HERE = Path(__file__).parent
CHIP = HERE / "chip_run"
LOG = (CHIP / "train.log").read_text()
EVENTS = next(CHIP.glob("events.out.tfevents.*"))
sys.path.insert(0, str(HERE.parent / "bench" / "chip_smoke"))
from plan import RECIPES, SETS, Plan  # noqa: E402  the smoke's run: its num_batches is the chip's step count

STEPS = int(SETS["num_batches"][0])
RELEASE = "0.2.3"  # llama31-v6e8's MaxText, which the chip ran
RECIPE = "qwen3-v6e32"  # a GKE recipe's bucket and JobSets carry the chip's files through the peers
runner = CliRunner()


def call_site(line: str) -> tuple[str, int]:
    found = re.search(r" (\S+\.py):(\d+)\] ", line)
    return found[1], int(found[2])


def test_the_chips_train_step_lines_are_the_ones_the_progress_parser_reads():
    lines = [line for line in LOG.splitlines() if TRAIN_STEP.search(line)]
    assert [int(TRAIN_STEP.search(line)[1]) for line in lines] == list(range(1, STEPS + 1))
    # the call site the format-string fixtures give 0.2.3
    assert {call_site(line) for line in lines} == {("peft_trainer.py", TRAIN_STEP_CALL_LINE[RELEASE])}
    assert last_train_step(LOG) == TrainProgress(STEPS, -0.000001)


def test_the_chips_evaluation_lines_are_before_and_after_training():
    evaluations = parse_evaluations(LOG)
    assert [(e.phase, e.step, e.corr, e.total, e.accuracy) for e in evaluations] == [
        ("pre", 0, 0, 1, 0.0), ("post", STEPS, 0, 1, 0.0)]
    assert [call_site(e.line) for e in evaluations] == [EVAL_CALL_LINE[(RELEASE, "pre")],
                                                       EVAL_CALL_LINE[(RELEASE, "post")]]


def test_the_chips_event_file_has_every_summary_tag_and_rollouts_a_step_before_the_loss():
    scalars = read_scalars([EVENTS])
    assert {tag.name for tag in SUMMARY_TAGS} <= set(scalars)
    assert scalars[LOSS.name].steps == tuple(range(1, STEPS + 1))
    for tag in (REWARD_MEAN.name, COMPLETION_LENGTH.name):
        assert scalars[tag].steps == tuple(range(STEPS))
        assert tuple(paired_step(tag, step) for step in scalars[tag].steps) == scalars[LOSS.name].steps


def test_the_smokes_own_reader_gives_the_event_file_as_tensorboards_does():
    """bench/chip_smoke/report.py reads event files without tensorboard (the chip's machine lacks it)."""
    import report

    ours = report.event_scalars(CHIP)
    theirs = read_scalars([EVENTS])
    assert set(ours) == set(theirs)
    for tag, series in theirs.items():
        assert [step for step, _ in ours[tag]] == list(series.steps), tag
        # both as the float32 the file stores (the package gives its shortest decimal)
        assert [struct.pack("<f", value) for _, value in ours[tag]] == [struct.pack("<f", v) for v in series.values], tag


def upload_chip_run(gcs, run: str) -> str:
    """The chip's event file where train_rl writes a run's, under RECIPE's trained/ prefix."""
    from cli_helpers import SETTINGS

    url = f"gs://{SETTINGS['GCS_BUCKET']}/{get_recipe(RECIPE).model.maxtext_name}/trained/{run}/tensorboard/"
    bucket, prefix = split_gs_url(url)
    gcs.bucket(bucket).blob(prefix + EVENTS.name).upload_from_filename(str(EVENTS))
    return url


def test_metrics_puts_each_rollout_point_at_the_train_step_it_fed(tmp_path):
    shutil.copy(EVENTS, tmp_path / EVENTS.name)
    result = runner.invoke(app, ["metrics", RECIPE, "--from", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    [run] = json.loads(result.output)["runs"]
    loss, length = run["tags"][LOSS.name], run["tags"][COMPLETION_LENGTH.name]
    assert length["steps"] == list(range(STEPS)) and length["train_steps"] == loss["train_steps"] == loss["steps"]
    from tpu_rl.scripts.metrics import plot
    from tpu_rl.scripts.rundata.events import read_run

    fig = plot.figure([read_run("chip", str(tmp_path))], "chip")
    [line] = next(ax for ax in fig.axes if ax.get_ylabel() == COMPLETION_LENGTH.name).get_lines()
    # the chip's completion lengths, batch by batch, at the steps 1..8 that trained on them
    assert list(line.get_xdata()) == list(range(1, STEPS + 1))
    assert list(line.get_ydata()) == [128.0, 90.0, 66.0, 118.5, 124.0, 38.0, 73.0, 128.0]
    compared = runner.invoke(app, ["metrics", RECIPE, "--from", str(tmp_path), "--from", str(CHIP)])
    assert compared.exit_code == 0, compared.output
    last = next(line for line in compared.output.splitlines() if line.startswith("last step"))
    assert last.split()[2:] == [str(STEPS), str(STEPS)]


def test_runs_shows_the_chips_last_train_step_with_the_reward_of_the_batch_it_trained_on(cloud):
    upload_chip_run(cloud["gcs"], "chip-smoke")
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    [row] = [row for row in json.loads(result.output)["runs"] if row["run"] == "chip-smoke"]
    scalars = read_scalars([EVENTS])
    assert row["last_step"] == STEPS == paired_step(REWARD_MEAN.name, scalars[REWARD_MEAN.name].steps[-1])
    assert row["reward"] == scalars[REWARD_MEAN.name].values[-1]


def test_run_shows_the_chips_last_step_and_loss_with_the_latest_reward(cloud):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    from peers.fixtures import peer_settings, spec_of
    from tpu_rl.jobs.paths import ArtifactPaths

    url = ArtifactPaths(spec_of(recipe), peer_settings()).tensorboard
    bucket, prefix = split_gs_url(url)
    cloud["gcs"].bucket(bucket).blob(prefix + EVENTS.name).upload_from_filename(str(EVENTS))
    cloud["kube"].plan(jobset_of(RECIPE, "train"), ticks=3, logs=LOG,
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("train: step ")]
    assert lines and lines[-1].startswith(f"train: step {STEPS}/50, loss -1e-06, reward 0, "), result.output


def test_the_smoke_plans_each_recipe_on_one_chip_with_its_familys_chip_model(tmp_path):
    """bench/chip_smoke/plan.py: every recipe the smoke takes has its chip model (llama's -Instruct name is
    its base architecture's) and its train arguments hold no axis above 1 and no fraction of the chip."""
    for recipe in RECIPES:
        argv = Plan("chip", tmp_path, tmp_path / "model", recipe=recipe).argv("train")
        values = dict(arg.partition("=")[::2] for arg in argv if "=" in arg and not arg.startswith("-"))
        assert "base_emb_dim" in values, recipe
        assert all(value in ("1", "-1") for key, value in values.items() if key.endswith("_parallelism")), recipe
        assert all(float(value) == 1 for key, value in values.items() if key.endswith("_devices_fraction")), recipe


def test_the_chip_models_have_the_expert_counts_the_smoke_gives_them():
    """tiny.py tiny_config with plan.py's chip sizes, in MaxText 0.2.3's environment (the chip's release):
    each MoE family's Hugging Face config has CHIP_SIZES' experts under its own field names. Qwen3-MoE's
    config names them num_local_experts, and transformers 5 read that over the num_experts given, which
    built the chip's qwen3 model with 128 experts (1.54 B parameters) and its conversion refused it."""
    import subprocess

    from maxtext_cpu.chain import need_venv
    from plan import CHIP_SIZES

    names = ("qwen3-30b-a3b", "gemma4-26b")
    probe = ("import json, sys; sys.path[:0] = sys.argv[1:3]; from maxtext_cpu.tiny import tiny_config;"
             "from plan import CHIP_SIZES\nfor name in sys.argv[3:]:\n"
             " config, _ = tiny_config(name, {'eos_token_id': 2}, CHIP_SIZES[name]);"
             " text = getattr(config, 'text_config', config).to_dict();"
             " print(json.dumps({k: v for k, v in text.items() if 'expert' in k}))")
    from kept import kept

    python = need_venv(RELEASE)

    def ask() -> list:
        done = subprocess.run([str(python), "-c", probe, str(HERE), str(HERE.parent / "bench" / "chip_smoke"),
                               *names], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(names):]]

    # the answer is a function of the probe, tiny.py, plan.py and the venv: kept by their digest (tests/kept.py)
    sources = [HERE / "maxtext_cpu" / "tiny.py", HERE.parent / "bench" / "chip_smoke" / "plan.py"]
    answers = kept("chip-models", python.parent.parent, [probe, *names, *(path.read_text() for path in sources)], ask)
    for name, experts in zip(names, answers, strict=True):
        counts = {value for field, value in experts.items() if field in ("num_experts", "num_local_experts")}
        per_token = {value for field, value in experts.items() if field in ("num_experts_per_tok", "top_k_experts")}
        sizes = CHIP_SIZES[name]
        assert counts == {sizes["num_experts"]}, (name, experts)
        assert per_token == {sizes.get("num_experts_per_tok", sizes.get("top_k_experts"))}, (name, experts)
