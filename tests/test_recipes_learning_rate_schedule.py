"""Every recipe trains with a learning-rate schedule that fits its run, under each pinned release's rule.

The schedule is evaluated with the releases' own formulas, written out here by hand from their sources
(not imported from tpu-rl, and not from a MaxText install):

- The length (MaxText trainers/post_train/rl/utils_rl.py `get_optimizer`, with configs/types.py, which
  first rewrites learning_rate_schedule_steps=-1 to `steps`, 150_001 by default: 0.2.3 types.py L2514-2516
  and L1388, 0.2.4 L3267-3269 and L1719):
  - 0.2.3 (L545-547): the value when it is > 0, else max_train_steps;
  - 0.2.4 (L603-609): the value when it is > 0 and differs from `steps`, else train_steps.
- The shape (both releases, L548-559 / L610-621): optax.schedules.warmup_cosine_decay_schedule(
  init_value=0, peak_value=learning_rate, warmup_steps=int(warmup_steps_fraction x length),
  decay_steps=length, end_value=0), warmup_steps_fraction 0.1 (base.yml L805 / L875). optax 0.2.6 (the
  lowest both wheels allow, tpu-post-train-requirements.txt) optax/schedules/_schedule.py: a linear ramp
  0 -> peak over the warmup, then cosine_decay_schedule(peak, length - warmup, alpha 0):
  peak x 0.5 x (1 + cos(pi x min(t, D) / D)) with t = count - warmup, D = length - warmup (join_schedules).
- The count: `optax.inject_hyperparams` evaluates the schedule at the optimizer state's count, which starts
  at 0, so training step k (1-based) updates at count k - 1, the run's last step at train_steps - 1.

"Fits the run" means: the warmup ends inside the run (the rate reaches its peak), no step trains at a rate
of 0, and the mean rate is a sensible fraction of the peak. The rate at the last step alone cannot be the
test: a cosine that ends with the run is nearly 0 there by design (hand-worked below: 0.12% of the peak at
step 49 of 50), lower than seed 002's never-warmed-up 0.33%.
"""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from tpu_rl.jobs.maxtext import train_command
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import all_recipes, example_settings
from tpu_rl.recipes.runs.schedule import schedule_warning, steps_at_zero_rate
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cli import app

CONFIG_STEPS = 150_001  # base.yml `steps`, 0.2.3 L772 and 0.2.4 L836
WARMUP_FRACTION = 0.1  # base.yml warmup_steps_fraction
RELEASES = ("0.2.3", "0.2.4")


def schedule_length(release: str, value: int, train_steps: int) -> int:
    """utils_rl.get_optimizer's schedule length, `value` being learning_rate_schedule_steps after
    types.py's rewrite of -1."""
    if release == "0.2.3":
        return value if value > 0 else train_steps
    return value if value > 0 and value != CONFIG_STEPS else train_steps


def rate_fraction(count: int, length: int) -> float:
    """warmup_cosine_decay_schedule(0, 1, int(0.1 x length), length, 0) at `count` (optax 0.2.6)."""
    warmup = int(WARMUP_FRACTION * length)
    if count < warmup:
        return count / warmup
    decay = length - warmup
    return 0.5 * (1 + math.cos(math.pi * min(count - warmup, decay) / decay))


def rendered_schedule(spec: RunSpec) -> int:
    """learning_rate_schedule_steps as the train command passes it; -1 (MaxText's default) when absent,
    which types.py turns into `steps`."""
    command = train_command(spec.recipe, ArtifactPaths(spec, example_settings()))
    values = [int(item.partition("=")[2]) for item in command.overrides
              if item.startswith("learning_rate_schedule_steps=")]
    value = values[0] if values else -1
    return CONFIG_STEPS if value == -1 else value


# 900 batches of 8 rows fit gsm8k's 7,473 (a run past them: PAST_THE_DATA below)
RUNS = [(name, sets) for name in all_recipes() for sets in ((), ("num_batches=900",))]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("name", "sets"), RUNS, ids=[f"{n}{'-' + s[0] if s else ''}" for n, s in RUNS])
def test_the_schedule_reaches_its_peak_inside_the_run_and_no_step_trains_at_zero(name, sets, release):
    spec = RunSpec.requested(all_recipes()[name], sets)
    steps = spec.recipe.train_steps
    length = schedule_length(release, rendered_schedule(spec), steps)
    rates = [rate_fraction(count, length) for count in range(steps)]
    assert rates[-1] > 0, f"{name} {sets}: the last step trains at a learning rate of 0 (schedule of {length})"
    assert max(rates) == pytest.approx(1.0), f"{name} {sets}: the warmup of {length} never ends inside {steps} steps"
    assert sum(rates) / steps >= 0.25, f"{name} {sets}: mean rate {sum(rates) / steps:.4f} of the peak"


# The last step's rate for the default runs (50 steps each), worked by hand:
# - qwen3-v6e32, seed 000's shape (100 for 50 steps): warmup int(0.1 x 100) = 10, D = 90, count 49:
#   0.5 x (1 + cos(pi x 39/90)) = 0.5 x (1 + 0.20791) = 0.60396 of 2e-5.
# - gemma4-v6e64 and llama31-v6e8 (the run's 50 steps): warmup 5, D = 45, count 49:
#   0.5 x (1 + cos(pi x 44/45)) = 0.5 x (1 - 0.99756) = 0.00122 of the peak (step 48: 0.00487).
LAST_STEP_FRACTION = {"qwen3-v6e32": 0.60396, "gemma4-v6e64": 0.00122, "llama31-v6e8": 0.00122}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", list(all_recipes()))
def test_the_default_runs_last_step_rate_is_the_hand_worked_one(name, release):
    recipe = all_recipes()[name]
    length = schedule_length(release, rendered_schedule(RunSpec.of_catalog(recipe)), recipe.train_steps)
    assert rate_fraction(recipe.train_steps - 1, length) == pytest.approx(LAST_STEP_FRACTION[name], abs=5e-5)


def test_the_formula_gives_seed_002s_rate_of_about_1e_8():
    # Seed 002 on 0.2.3 left the schedule at -1: a length of 150_001, a warmup of 15,000 steps, and
    # rl.yml's learning_rate 3e-6 (0.2.3 L139): at count 49 the rate is 3e-6 x 49 / 15,000 = 9.8e-9.
    length = schedule_length("0.2.3", CONFIG_STEPS, 50)
    assert 3e-6 * rate_fraction(49, length) == pytest.approx(9.8e-9)


def test_an_explicit_schedule_shorter_than_the_run_gets_one_warning_line():
    qwen3 = all_recipes()["qwen3-v6e32"]
    short = RunSpec.requested(qwen3, ["num_batches=900", "learning_rate_schedule_steps=100"]).recipe
    # optax's cosine is 0 from count 100 on (min(t, D) = D): counts 100 .. 899 train at 0.
    assert steps_at_zero_rate(short) == 800
    assert rate_fraction(99, 100) > 0 and rate_fraction(100, 100) == 0.0 == rate_fraction(899, 100)
    warning = schedule_warning(short)
    assert warning and "\n" not in warning and "800 steps would train at a learning rate of 0" in warning
    assert schedule_warning(RunSpec.requested(qwen3, ["num_batches=900"]).recipe) is None  # derived: follows the run
    assert schedule_warning(RunSpec.requested(qwen3, ["learning_rate_schedule_steps=300"]).recipe) is None  # longer: fine
    # -1 is MaxText's default: 0.2.3 makes it `steps`, 150_001 (the 1e-8 above); 0.2.4 the run's steps.
    assert "ends inside the warmup" in schedule_warning(RunSpec.requested(qwen3, ["learning_rate_schedule_steps=-1"]).recipe)
    result = CliRunner().invoke(app, ["render", "qwen3-v6e32", "--out", "-", "--set", "num_batches=900",
                                      "--set", "learning_rate_schedule_steps=100"])
    assert result.exit_code == 0
    assert [line for line in result.output.splitlines() if "learning rate of 0" in line] == [warning]


# A num_batches past gsm8k's 7,473 train rows: train_rl cuts the split to num_batches x batch_size x
# train_fraction rows (0.2.4 train_rl.py L375-378) and tunix stops when they run out, so the run trains the
# rows' steps, worked by hand: 7473 // 8 = 934 at batch_size 8 (0.2.4 drops the last partial batch);
# llama31-v6e8 (0.2.3, batch_size 1): 7473. Its schedule must fit those steps, not the 100,000 asked for.
PAST_THE_DATA = {"qwen3-v6e32": 934, "gemma4-v6e64": 934, "llama31-v6e8": 7473}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", list(PAST_THE_DATA))
def test_a_run_past_its_data_gets_a_schedule_that_fits_the_steps_it_trains(name, release):
    spec = RunSpec.requested(all_recipes()[name], ("num_batches=100000",))
    steps = PAST_THE_DATA[name]
    length = schedule_length(release, rendered_schedule(spec), spec.recipe.train_steps)
    rates = [rate_fraction(count, length) for count in range(steps)]
    assert max(rates) == pytest.approx(1.0), f"{name}: the warmup of {length} never ends inside {steps} steps"
    assert rates[-1] > 0 and sum(rates) / steps >= 0.25, f"{name}: schedule of {length} for {steps} steps"
