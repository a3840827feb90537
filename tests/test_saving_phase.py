"""Checkpoint saves are a phase of their own: `run` shows `saving` while orbax's log says a save holds the

trainer, run.json keeps its time, and it counts as TPU time billed while nothing trains. The fixtures
are orbax's own format strings with absl's prefix (tests/contracts/orbax_log.py), checked here against
the orbax installed with each MaxText wheel."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cli_helpers import RECIPE, TRAIN, run_record, run_train, succeeds
from contracts.orbax_log import ORBAX_VERSION, SAVE_FORMATS, SOURCE, save_line
from contracts.tunix_log import train_step_line
from maxtext_cpu.chain import need_venv

from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.standing import idle_tpu
from tpu_rl.scripts.pipeline.saving import SaveWatch, saving_in

REPO = Path(__file__).resolve().parents[1]


def site_packages(maxtext: str) -> Path:
    return REPO / f".venv-maxtext-{maxtext}" / "lib" / "python3.12" / "site-packages"


@pytest.mark.parametrize("maxtext", sorted(ORBAX_VERSION))
def test_the_save_lines_are_orbaxs_own_logging_calls_at_the_pinned_versions(maxtext):
    need_venv(maxtext)
    source = site_packages(maxtext) / SOURCE
    assert source.is_file(), f"{source} is absent: the venv lacks orbax; `make install` rebuilds it"
    assert (site_packages(maxtext) / f"orbax_checkpoint-{ORBAX_VERSION[maxtext]}.dist-info").is_dir()
    calls = {(node.lineno, node.args[0].value) for node in ast.walk(ast.parse(source.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "info"
             and getattr(node.func.value, "id", "") == "logging"
             and node.args and isinstance(node.args[0], ast.Constant)}
    for name, (fmt, lines) in SAVE_FORMATS.items():
        assert (lines[maxtext], fmt) in calls, name


STEP = 20
STARTS = ("save", "save on preemption", "waiting")
ENDS = ("handed to the background", "synchronous save done", "done waiting", "nothing to wait for")


@pytest.mark.parametrize("maxtext", sorted(ORBAX_VERSION))
def test_a_save_holds_the_trainer_from_a_start_line_until_the_next_end_line(maxtext):
    step = train_step_line(STEP, 0.4, maxtext)
    for start in STARTS:
        assert saving_in(f"{step}\n{save_line(start, STEP, maxtext)}\n") is True, start
        for end in ENDS:
            assert saving_in(f"{save_line(start, STEP, maxtext)}\n{save_line(end, STEP, maxtext)}\n") is False, end
    assert saving_in(f"{step}\n") is None


def test_a_window_without_a_save_line_keeps_what_the_last_said_and_a_new_attempt_starts_afresh():
    watch = SaveWatch()
    assert watch.update(0, save_line("save", STEP)) is True
    assert watch.update(0, "a rollout line\n") is True  # the window holds only rollout lines now
    assert watch.update(0, save_line("handed to the background", STEP)) is False
    assert watch.update(0, save_line("waiting", 30)) is True
    assert watch.update(1, "after a restart\n") is False


def test_run_shows_saving_keeps_its_time_and_counts_it_as_idle_tpu(cloud, monkeypatch):
    """The head's log: a train step, then orbax's save of step 10 (start, then the async hand-off), then
    the next step."""
    first, second = train_step_line(10, 0.5), train_step_line(11, 0.45)
    saving = f"{first}\n{save_line('save', 10)}\n"
    handed = f"{saving}{save_line('handed to the background', 10)}\n{second}\n"
    cloud["kube"].plan(TRAIN, capacity="spot", ticks=10,
                       log_reads=["", f"{first}\n", saving, saving, handed], **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == 0, result.output
    changes = [line.split(" (after ")[0] for line in result.output.splitlines()
               if line.startswith("train: ") and " (after " in line]
    assert changes[-2:] == ["train: saving", "train: training"], result.output
    phases = [p["phase"] for p in run_record(cloud)["steps"]["train"]["phases"]]
    assert phases[-3:] == ["training", "saving", "training"]
    [idle] = [line for line in result.output.splitlines() if line.startswith("train: the TPU slice billed ")]
    assert " saving 0m0" in idle


def test_idle_tpu_time_counts_checkpoint_saves():
    """qwen3-v6e32 on spot: 32 chips; 2 min saving and 4 min loading = 6 min, so 32 x 6/60 = 3.2
    chip-hours at spot's $1.35 (recipes/costs/prices.toml) = $4.32."""
    idle = idle_tpu(get_recipe(RECIPE), {"loading": 240, "training": 5400, "saving": 120}, "spot")
    assert idle.seconds == 360
    assert idle.usd == pytest.approx(4.32)
