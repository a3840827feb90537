"""`tpu-rl metrics` against event files written the way train_rl writes them, served from the GCS emulator.

train_rl logs through tunix's MetricsLogger into metrax's TensorboardBackend, which is a tensorboardX
SummaryWriter on `<base_output_directory>/<run_name>/tensorboard/` calling `add_scalar(tag, value, step)`
(metrax 0.2.3/0.2.4 metrax/logging/tensorboard_backend.py L25-33, L49-59). The tests write with the same
SummaryWriter and the tag names from tunix (scripts/rundata/tags.py has their source). Every expected
number below is worked out by hand from the values written.

`python tests/test_cli_metrics.py docs/metrics-example.png` redraws the picture in docs/experiments.md from synthetic
runs (see `synthetic_runs`), labelled as synthetic in its title and legend.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli_helpers import RUN_RL, upload_run
from peers.event_files import write_events
from peers.fixtures import SETTINGS
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.runs.spec import RunSpec, default_run_name
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()

# A second setting: fewer points, and no KL (as with grpo_beta=0).
RUN_LOW_LR = {
    "rewards/train/mean": [(0, 0.2), (1, 0.3)],
    "actor/train/loss": [(1, 0.4), (2, 0.45)],
    "completions/train/mean_length": [(0, 310.0), (1, 290.0)],
}


def table_rows(output: str) -> dict[str, list[str]]:
    """The table lines of the output, by tag, split at whitespace."""
    return {line.split()[0]: line.split()[1:] for line in output.splitlines()
            if line.split() and line.split()[0].count("/") == 2 and not line.startswith(" ")}


def test_table_gives_each_tag_first_last_best_steps_and_trend_in_80_columns(settings_env, gcs, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    default_run = default_run_name(RunSpec.of_catalog(get_recipe(RECIPE)))  # what `tpu-rl run` trains without --run or --set
    prefix = upload_run(gcs, tmp_path, default_run, RUN_RL)
    result = runner.invoke(app, ["metrics", RECIPE])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    assert lines[:2] == [f"{default_run}: 1 event file in", f"  {prefix}"]
    # Sparklines: reward (0.1, 0.4, 1.1) spans 1.0, so 0.4 is 0.3 of the way: 2.1 of 7 steps, ▃;
    # loss (0.5, 0.2, 0.3) spans 0.3, 0.3 is 1/3 up: ▃; length 260 is 0.6 of the way from 200 to 300: ▅.
    assert table_rows(result.output) == {
        "rewards/train/mean": ["3", "0.1", "1.1", "max", "1.1", "▁▃█"],
        "actor/train/loss": ["3", "0.5", "0.3", "min", "0.2", "█▁▃"],
        "actor/train/kl": ["3", "0", "0.02", "min", "0", "▁▅█"],
        "completions/train/mean_length": ["3", "300", "200", "-", "█▅▁"],
    }, result.output
    assert "not written: rewards/train/sum, rewards/train/min, rewards/train/max," in result.output
    assert "actor/train/learning_rate, actor/train/grad_norm" in result.output
    assert "and 1 other tag (--json lists every tag)" in result.output


def test_json_gives_steps_values_and_summary_per_run_and_tag(settings_env, gcs, tmp_path):
    upload_run(gcs, tmp_path, "rl", RUN_RL)
    upload_run(gcs, tmp_path, "low-lr", RUN_LOW_LR)
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "low-lr", "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output)["runs"]
    assert [run["run"] for run in runs] == ["rl", "low-lr"]
    rl, low = runs
    assert sorted(rl["tags"]) == sorted(RUN_RL)
    assert rl["tags"]["rewards/train/mean"] == {
        "steps": [0, 1, 2], "train_steps": [1, 2, 3], "values": [0.1, 0.4, 1.1],  # a reward feeds the next step
        "summary": {"count": 3, "first": 0.1, "last": 1.1, "best": 1.1, "best_is": "max"}}
    assert rl["tags"]["rewards/train/check_numbers"]["summary"] == {
        "count": 3, "first": 0.0, "last": 1.0, "best": None, "best_is": None}
    assert low["tags"]["actor/train/loss"] == {
        "steps": [1, 2], "train_steps": [1, 2], "values": [0.4, 0.45],
        "summary": {"count": 2, "first": 0.4, "last": 0.45, "best": 0.4, "best_is": "min"}}
    assert "actor/train/kl" not in low["tags"]
    assert [name.startswith("events.out.tfevents.") for name in low["event_files"]] == [True]


def put_record(client, run: str, evaluations: list[str], sets: list[str]) -> None:
    """A run.json as `tpu-rl run` writes it, with the evaluations parsed from MaxText's lines."""
    from tpu_rl.scripts.rundata.evaluation import parse_evaluations

    record = {"run": run, "recipe": RECIPE, "overrides": {"set": sets},
              "evaluations": [e.as_record() for e in parse_evaluations("\n".join(evaluations), last_step=50)]}
    path = f"{get_recipe(RECIPE).model.maxtext_name}/trained/{run}/run.json"
    client.bucket(SETTINGS["GCS_BUCKET"]).blob(path).upload_from_string(json.dumps(record))


def two_runs_with_records(gcs, tmp_path) -> None:
    from contracts.tunix_log import evaluation_line
    from cli_helpers import MIDDLE, POST, PRE

    upload_run(gcs, tmp_path, "rl", RUN_RL)
    upload_run(gcs, tmp_path, "low-lr", RUN_LOW_LR)
    put_record(gcs, "rl", [PRE, MIDDLE, POST], [])
    put_record(gcs, "low-lr", [PRE, evaluation_line("post", 30, 64, 33, 60, 1.5)], ["learning_rate=1e-6"])


def test_png_overlays_the_runs_on_accuracy_and_four_tag_panels(settings_env, gcs, tmp_path):
    from matplotlib.image import imread

    from tpu_rl.scripts.metrics import collect, plot

    two_runs_with_records(gcs, tmp_path)
    png = tmp_path / "out" / "curves.png"
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "low-lr", "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"wrote {png}"
    height, width, _ = imread(png).shape
    assert (width, height) == (1000, 1000)

    from tpu_rl.recipes import load_settings

    fig = plot.figure(collect(get_recipe(RECIPE), ["rl", "low-lr"], [], load_settings), "title")
    panels = {ax.get_ylabel(): ax for ax in fig.axes if ax.axison}
    assert list(panels) == ["accuracy (%)", "rewards/train/mean", "actor/train/loss", "actor/train/kl",
                            "completions/train/mean_length"]
    assert {ax.get_xlabel() for ax in panels.values()} == {"step"}
    legends = {tag: [text.get_text() for text in ax.get_legend().get_texts()] for tag, ax in panels.items()}
    both = ["rl", "low-lr (learning_rate=1e-6)"]
    assert legends == {"accuracy (%)": both, "rewards/train/mean": both, "actor/train/loss": both,
                       "actor/train/kl": ["rl"], "completions/train/mean_length": both}
    lines = {tag: [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()]
             for tag, ax in panels.items()}
    # 26/64, 33/64 and 38/64 (30/64 for low-lr); the Post at the run's last step.
    assert lines["accuracy (%)"] == [([0, 20, 50], [40.625, 51.5625, 59.375]), ([0, 50], [40.625, 46.875])]
    # rewards logged at 0, 1, 2 are the batches steps 1, 2, 3 trained on (tags.paired_step)
    assert lines["rewards/train/mean"] == [([1, 2, 3], [0.1, 0.4, 1.1]), ([1, 2], [0.2, 0.3])]
    assert lines["actor/train/kl"] == [([1, 2, 3], [0.0, 0.01, 0.02])]


def test_several_runs_are_one_side_by_side_summary_in_80_columns(settings_env, gcs, tmp_path):
    two_runs_with_records(gcs, tmp_path)
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "low-lr"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = {line[:18].strip(): line[18:].split() for line in lines[1:] if line[:18].strip()}
    assert lines[0].split() == ["run", "1", "run", "2"]
    assert rows["accuracy before %"] == ["40.6", "40.6"]
    assert rows["accuracy after %"] == ["59.4", "46.9"]  # 30/64 = 46.875
    assert rows["accuracy change"] == ["+18.8", "+6.2"]  # 6.25 rounds to even
    assert rows["reward first"] == ["0.1", "0.2"] and rows["reward last"] == ["1.1", "0.3"]
    assert rows["reward max"] == ["1.1", "0.3"] and rows["loss min"] == ["0.2", "0.4"]
    assert rows["KL last"] == ["0.02", "-"] and rows["last step"] == ["3", "2"]
    data = json.loads(runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "low-lr", "--json"]).output)
    low = data["runs"][1]
    assert low["differs"] == ["learning_rate=1e-6"]
    assert [(e["phase"], e["step"], e["accuracy"]) for e in low["evaluations"]] == [("pre", 0, 40.625),
                                                                                  ("post", 50, 46.875)]
    assert lines[-2:] == ["run 2: low-lr (learning_rate=1e-6)",
                          f"  gs://{SETTINGS['GCS_BUCKET']}/qwen3-30b-a3b/trained/low-lr/tensorboard/"]


def test_mid_training_metrics_names_the_step_of_its_last_evaluation_not_after_training(settings_env, gcs, tmp_path):
    """issue 37: `runs` names an evaluation during training by its step (none after training yet); metrics'
    `accuracy after %` row showed it bare, and its one-run line as the second figure of before → after."""
    from cli_helpers import MIDDLE, PRE

    two_runs_with_records(gcs, tmp_path)
    put_record(gcs, "rl", [PRE, MIDDLE], [])  # still training: evaluated at step 20 only
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "low-lr"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = {line[:18].strip(): line[18:].split() for line in lines[1:] if line[:18].strip()}
    assert rows["accuracy after %"] == ["51.6@20", "46.9"]
    assert "@N: the evaluation at train step N, none after training yet" in lines
    alone = runner.invoke(app, ["metrics", RECIPE, "--run", "rl"]).output.splitlines()
    at = next(index for index, line in enumerate(alone) if line.startswith("held-out accuracy "))
    assert alone[at:at + 2] == ["held-out accuracy 40.6% → 51.6% (+10.9), 2 evaluations",
                                "  (the second at train step 20; none after training yet)"], alone


def test_a_resumed_run_keeps_the_latest_attempts_value_per_step(tmp_path):
    from tpu_rl.scripts.rundata.events import local_event_files, read_scalars

    # The first attempt wrote steps 21-25, the resumed one (from checkpoint 20) writes 21-26 again.
    first = write_events(tmp_path / "one", {"actor/train/loss": [(step, 1.0) for step in range(19, 26)]})[0]
    second = write_events(tmp_path / "two", {"actor/train/loss": [(step, 2.0) for step in range(21, 27)]})[0]
    run = tmp_path / "tensorboard"
    run.mkdir()
    first.rename(run / "events.out.tfevents.1790000000.head-0")
    second.rename(run / "events.out.tfevents.1790000600.head-0")
    series = read_scalars(local_event_files(run))["actor/train/loss"]
    assert series.steps == (19, 20, 21, 22, 23, 24, 25, 26)
    assert series.values == (1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0)


def test_an_unknown_run_names_the_run_the_prefix_and_the_runs_there(settings_env, gcs, tmp_path):
    upload_run(gcs, tmp_path, "rl", RUN_RL)
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "rl", "--run", "nope"])
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    trained = f"gs://{SETTINGS['GCS_BUCKET']}/qwen3-30b-a3b/trained/"
    assert line == (f"error: run 'nope' of {RECIPE}: no events.out.tfevents.* files under {trained}nope/tensorboard/ "
                    f"(runs under {trained}: rl): pass one of those with --run, or --from a directory with the "
                    "event files")


def test_a_run_name_with_a_slash_is_refused(settings_env, gcs):
    result = runner.invoke(app, ["metrics", RECIPE, "--run", "../rl"])
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    assert line.startswith("error: --run '../rl' is not a run name")


def test_from_a_local_directory_needs_no_settings_and_names_the_run_after_it(tmp_path, monkeypatch):
    for key in SETTINGS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # nothing to reach
    write_events(tmp_path / "copied" / "exp-1" / "tensorboard", RUN_LOW_LR)
    result = runner.invoke(app, ["metrics", RECIPE, "--from", str(tmp_path / "copied" / "exp-1" / "tensorboard")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("exp-1: 1 event file in\n")
    assert table_rows(result.output)["rewards/train/mean"] == ["2", "0.2", "0.3", "max", "0.3", "▁█"]


def test_from_a_directory_without_event_files_is_one_line(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "notes.txt").write_text("not an event file")
    result = runner.invoke(app, ["metrics", RECIPE, "--from", str(tmp_path / "logs")])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: --from {tmp_path / 'logs'}: no events.out.tfevents.* files directly in it: pass the run's "
        "tensorboard/ directory"]


def test_from_a_gs_url_reads_logs_copied_elsewhere(settings_env, gcs, tmp_path):
    bucket = gcs.bucket(SETTINGS["GCS_BUCKET"])
    for path in write_events(tmp_path / "copy", RUN_LOW_LR):
        bucket.blob(f"archive/sweep-3/tensorboard/{path.name}").upload_from_filename(str(path))
    bucket.blob("archive/sweep-3/tensorboard/plugins/profile/x.xplane.pb").upload_from_string(b"not scalars")
    url = f"gs://{SETTINGS['GCS_BUCKET']}/archive/sweep-3/tensorboard"
    result = runner.invoke(app, ["metrics", RECIPE, "--from", url])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == ["sweep-3: 1 event file in", f"  {url}/"]
    assert table_rows(result.output)["actor/train/loss"] == ["2", "0.4", "0.45", "min", "0.4", "▁█"]


def test_latest_scalar_reads_the_newest_file_of_a_restarted_run(tmp_path):
    from tpu_rl.scripts.metrics import latest_scalar

    # A run resumed from its last checkpoint starts a second file, its rewards steps again from 0
    # (tunix saves the last checkpoint without global_step). The file names carry the start time.
    first = write_events(tmp_path / "one", {"rewards/train/mean": [(0, 0.1), (1, 0.2)]})[0]
    second = write_events(tmp_path / "two", {"rewards/train/mean": [(0, 0.5)], "actor/train/loss": [(1, 0.3)]})[0]
    run = tmp_path / "tensorboard"
    run.mkdir()
    first.rename(run / "events.out.tfevents.1790000000.head-0")
    second.rename(run / "events.out.tfevents.1790000600.head-0")
    assert latest_scalar(run, "rewards/train/mean") == (0, 0.5)
    assert latest_scalar([run / "events.out.tfevents.1790000000.head-0"], "rewards/train/mean") == (1, 0.2)
    assert latest_scalar(run, "actor/train/kl") is None


def test_sparkline_resamples_to_its_width_and_marks_gaps():
    from tpu_rl.scripts.metrics.table import sparkline

    # Eight rising points into four bars: means 0.5, 2.5, 4.5, 6.5, i.e. 0, 7/3, 14/3 and 7 of 7 steps.
    assert sparkline((0, 1, 2, 3, 4, 5, 6, 7), 4) == "▁▃▆█"
    assert sparkline((2.0, 2.0, 2.0), 20) == "▄▄▄"
    assert sparkline((1.0, math.nan, 3.0), 20) == "▁ █"


# -- the picture in docs/experiments.md -------------------------------------------------------------
def synthetic_runs(root: Path) -> list[Path]:
    """Two made-up runs of 120 steps, shaped like GRPO on GSM8K (reward rising towards MaxText's 1.1 / 3
    per function, KL growing, completions shortening); random, seeded. Nothing here was trained."""
    rng = random.Random(9)
    directories = []
    for name, pace in (("synthetic-lr-3e-6", 1.0), ("synthetic-lr-1e-6", 0.55)):
        scalars: dict[str, list[tuple[int, float]]] = {tag: [] for tag in (
            "rewards/train/mean", "actor/train/loss", "actor/train/kl", "completions/train/mean_length")}
        for step in range(120):
            rise = 1 - math.exp(-pace * step / 35)
            scalars["rewards/train/mean"].append((step, 0.02 + 0.3 * rise + rng.gauss(0, 0.015)))
            scalars["actor/train/loss"].append((step + 1, rng.gauss(0, 0.004 + 0.004 * rise)))
            scalars["actor/train/kl"].append((step + 1, 0.0025 * pace * step / 120 + abs(rng.gauss(0, 1e-4))))
            scalars["completions/train/mean_length"].append((step, 420 - 160 * rise + rng.gauss(0, 8)))
        directories.append(root / name / "tensorboard")
        write_events(directories[-1], scalars)
    return directories


def synthetic_evaluations(pace: float) -> tuple[dict, ...]:
    """Made-up held-out evaluations of 64 questions at steps 0, 20, ..., 120, in MaxText's line format."""
    from contracts.tunix_log import evaluation_line, train_step_line
    from tpu_rl.scripts.rundata.evaluation import parse_evaluations

    lines = [evaluation_line("pre", 24, 64, 28, 40, 0.3)]
    for step in range(20, 121, 20):
        correct = round(24 + 16 * (1 - math.exp(-pace * step / 40)))
        lines += [train_step_line(step, 0.01), evaluation_line("intermediate", correct, 64, correct + 3, 60, 1.0, step)]
    lines.append(evaluation_line("post", correct, 64, correct + 3, 62, 1.0))
    return tuple(e.as_record() for e in parse_evaluations("\n".join(lines)))


def draw_readme_picture(out: Path) -> None:
    import dataclasses
    import tempfile

    from PIL import Image

    from tpu_rl.scripts.metrics import collect, plot

    with tempfile.TemporaryDirectory() as tmp:
        sources = [str(path) for path in synthetic_runs(Path(tmp))]
        runs = collect(get_recipe(RECIPE), [], sources, lambda: None)
    runs = [dataclasses.replace(run, evaluations=synthetic_evaluations(pace), differs=(change,))
            for run, pace, change in zip(runs, (1.0, 0.55), ("learning_rate=3e-6", "learning_rate=1e-6"))]
    fig = plot.figure(runs, "SYNTHETIC data from tests/test_cli_metrics.py, not a training run")
    plot.write_picture(fig, out)
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)  # small enough for the docs


if __name__ == "__main__":
    draw_readme_picture(Path(sys.argv[1]))


def test_the_side_by_side_rows_each_have_a_label_of_their_own():
    """issue 37: `metrics --sweep` drew two rows labelled `completion length` ("completion length first" and
    "... last" cut to the label column). Every row of every compared tag keeps a label of its own."""
    from tpu_rl.scripts.metrics.compare import COMPARED_TAGS, LABEL_WIDTH

    labels = [f"{tag.row_label} {kind}" for tag in COMPARED_TAGS for kind in ("first", "last", tag.best) if kind]
    shown = [label[:LABEL_WIDTH - 1] for label in labels]
    assert shown == labels and len(set(shown)) == len(shown), shown
