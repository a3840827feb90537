"""`tpu-rl run --dry-run` prices the run the user's --set items make, and does so with no credentials, no
cluster and no VM (recipes/costs/train_time.py, scripts/pipeline/dry_run.py).

Worked by hand for qwen3-v6e32 from recipes.toml and the README's run table (its train step: 90 min,
$95.64, so $63.76 an hour on its reservation): 50 steps of batch_size 8 x rl.num_generations 4 = 1,600
training completions; the held-out evaluation: num_test_batches 2 x eval_batch_size 32 = 64 questions,
2 + 50 // eval_interval 20 = 4 times, 256 completions. Training is 90 x 1600 / 1856 = 77.59 min, 1.5517 min
a step and 0.048491 min a completion.
- num_batches=100: 155.17 min of training + (2 + 100 // 20) x 64 x 0.048491 = 21.72 min: 176.9 min, $187.98;
- num_batches=1: 1.55 + 2 x 64 x 0.048491 = 6.21: 7.76 min, $8.24;
- num_test_batches=0: 77.59 min, $82.45;
- num_batches=100000000: the data allows 7473 // 8 = 934 steps (recipes/runs/datasets.py): 934 x 1.5517 =
  1449.31 min of training + (2 + 934 // 20) x 64 x 0.048491 = 148.97 min: 1598.28 min, $1,698.51; with the
  README's convert and export ($180.66 - $95.64 = $85.02), $1,783.53 the whole run, not $181 M.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from peers.fixtures import SETTINGS, put_step_output
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app

RECIPE, VM_RECIPE = "qwen3-v6e32", "llama31-v6e8"
runner = CliRunner()


def line_of(output: str, start: str) -> str:
    [line] = [line for line in output.splitlines() if line.startswith(start)]
    return line


def priced(line: str, minutes: int, dollars: float) -> bool:
    """`...; about N min, $D`, D within a cent of the figure worked out from the README's rounded ones."""
    head, _, price = line.rpartition(", $")
    return head.endswith(f"about {minutes} min") and abs(float(price.replace(",", "")) - dollars) <= 0.011


@pytest.mark.parametrize(("item", "minutes", "dollars"), [("num_batches=100", 177, 187.98),
                                                         ("num_batches=1", 8, 8.24),
                                                         ("num_test_batches=0", 78, 82.45)])
def test_the_train_step_is_priced_for_the_steps_and_evaluation_the_run_takes(cloud, item, minutes, dollars):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--set", item])
    assert result.exit_code == 0, result.output
    train = line_of(result.output, "  train:")
    assert train.startswith("  train: submit: no output yet; ") and priced(train, minutes, dollars), train
    # up to: train_rl drops long prompts, and a small dataset ends training before num_batches
    assert line_of(result.output, "assumed: ").startswith("assumed: train up to ")
    assert "the recipe's 90 min for its 50 steps" in result.output


def test_a_run_several_times_the_recipes_own_cost_says_so_in_its_own_line(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--set", "num_batches=100000"])
    assert result.exit_code == 0, result.output
    warning = line_of(result.output, "warning: this run is estimated at $")
    assert "times the recipe's own run ($180.66)" in warning  # README: the whole run, 170 min


def test_the_recipes_own_run_has_no_such_line(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output and "about 90 min, $95.64" in result.output


def test_a_dry_run_without_google_credentials_prices_every_step(settings_env, monkeypatch, tmp_path):
    for name in ("STORAGE_EMULATOR_HOST", "TPU_RL_COMPUTE_ENDPOINT", "TPU_RL_SECRETMANAGER_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)  # the real endpoints, never reached: no credentials first
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--set", "num_batches=100"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("dry run of run qwen3-v6e32-") and lines[0].endswith("nothing is submitted or written")
    assert lines[1].startswith("not compared with what is deployed (no Google credentials")
    assert lines[2] == lines[4].replace("export", "convert") == "  convert: JobSet; about 40 min, $42.51"
    assert lines[3].startswith("  train: JobSet; ") and priced(lines[3], 177, 187.98), lines[3]
    assert line_of(result.output, "expected: about 257 min, $")
    assert "the JobSets it would submit (--show-manifests prints them):" in lines


def test_a_dry_run_before_the_cluster_exists_names_how_to_reach_it(settings_env, gcs, google, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    reason = line_of(result.output, "not compared with what is deployed")
    assert "no kubeconfig at" in reason and "gcloud container clusters get-credentials" in reason
    assert line_of(result.output, "  train:") == "  train: JobSet; about 90 min, $95.64"


def test_a_dry_run_before_the_vm_exists_prices_its_startup_script(settings_env, gcs, google):
    google.reservations[(SETTINGS["ZONE"], SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    result = runner.invoke(app, ["run", VM_RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "TPU VM 'rl-test-vm' not found" in line_of(result.output, "not compared with what is deployed")
    # The README's table for the VM (reservation): convert 5 min $1.26, train 10 min $2.52.
    assert line_of(result.output, "  train:") == "  train: startup script of TPU VM rl-test-vm; about 10 min, $2.52"
    assert "JobSet" not in result.output


def test_an_offline_dry_run_shows_the_jobsets_it_would_submit(settings_env, monkeypatch, tmp_path):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--steps", "train", "--show-manifests"])
    assert result.exit_code == 0, result.output
    assert "the JobSets it would submit:" in result.output and result.output.count("kind: JobSet") == 1
    assert "  convert:" not in result.output and "  export:" not in result.output


def test_a_step_with_more_completions_is_priced_longer_and_says_so(cloud):
    """rl.num_generations=8 doubles a step's completions (8 x 8 = 64 against 8 x 4 = 32): training 2 x
    77.59 = 155.17 min, evaluation unchanged at 256 x 0.048491 = 12.41 min: 167.59 min, $178.09."""
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--skip-fit-check", "--set", "rl.num_generations=8"])
    assert result.exit_code == 0, result.output
    train = line_of(result.output, "  train:")
    assert priced(train, 168, 178.09), train
    text = " ".join(result.output.split())
    assert "train up to 50 steps at 3.10 min each" in text
    assert "less its evaluation, times 2 for 64 completions a step against its 32)" in text


def test_a_num_batches_past_the_data_is_priced_at_the_steps_the_data_makes_and_warned(cloud):
    result = runner.invoke(app, ["run", RECIPE, "--dry-run", "--set", "num_batches=100000000"])
    assert result.exit_code == 0, result.output
    train = line_of(result.output, "  train:")
    assert priced(train, 1598, 1698.51), train
    text = " ".join(result.output.split())
    assert ("train up to 934 steps (of the 100,000,000 asked for: openai/gsm8k's train split has 7,473 rows, and "
            "train_rl stops when they run out)") in text
    assert ("warning: this run asks for 100,000,000 training steps, but train_rl keeps at most num_batches x "
            "batch_size x train_fraction rows and openai/gsm8k's train split has 7,473: it trains at most 934 "
            "steps") in text
    warning = line_of(result.output, "warning: this run is estimated at $")
    assert warning.startswith("warning: this run is estimated at $1,783.53,"), warning


def test_a_real_run_several_times_the_recipes_cost_says_so_before_it_submits(cloud, monkeypatch):
    from cli_helpers import interrupt, session_hook

    from peers.fixtures import jobset_of

    cloud["kube"].plan(jobset_of(RECIPE, "convert"), outcome="hang")
    session_hook(monkeypatch, sleep=interrupt)
    result = runner.invoke(app, ["run", RECIPE, "--set", "num_batches=100000", "--yes"])
    assert result.exit_code == 130, result.output
    lines = result.output.splitlines()
    warning = line_of(result.output, "warning: this run is estimated at $")
    assert "times the recipe's own run ($180.66)" in warning  # README: the whole run, 170 min
    assert lines.index(warning) < next(i for i, line in enumerate(lines) if line.startswith("run "))


def test_a_dry_run_with_no_settings_at_all_prices_with_the_example_settings_and_says_so(settings_env, monkeypatch):
    """README, step 6: a dry run needs no cluster or credentials, so not the settings either; as `make synth`,
    it takes the embedded example then, says so, and never asks a cloud."""
    from tpu_rl.recipes.settings.specs import SPECS

    for spec in SPECS:
        monkeypatch.delenv(spec.env, raising=False)
    result = runner.invoke(app, ["run", RECIPE, "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == ("no settings are set, so the dry run prices with the embedded example "
                        "(PROJECT=tpu-rl-example): export your own (README, step 1) to run")
    assert lines[2] == "not compared with what is deployed (the example settings reach no cloud): each step is " \
                       "priced as if it runs"
    assert "  train: JobSet; about 90 min, $95.64" in lines  # the README's run table
    assert line_of(result.output, "expected: about 170 min, $180.66")


def test_without_dry_run_no_settings_is_still_refused_naming_them(settings_env, monkeypatch):
    from tpu_rl.recipes.settings.specs import SPECS

    for spec in SPECS:
        monkeypatch.delenv(spec.env, raising=False)
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == 2
    assert "PROJECT, REGION, ZONE, CLUSTER_NAME and GCS_BUCKET are not set" in result.output
