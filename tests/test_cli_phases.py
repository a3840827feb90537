"""`run` shows a step's phases with their times and keeps them in run.json, with the TPU time billed while
nothing trained (issue 16, part 4). Driven through the fake Kubernetes API: a Workload without quota
(queued), pods whose containers wait with the kubelet's ContainerCreating (pulling images), a trainer
that has logged no train step yet (loading), then tunix's train-step line (training)."""

from __future__ import annotations

import pytest
from cli_helpers import RECIPE, TRAIN, run_record, run_train, succeeds
from contracts.tunix_log import train_step_line

from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.standing import TPU_IDLE_PHASES, idle_tpu

def test_run_prints_each_phase_of_train_and_run_json_keeps_them_with_the_idle_tpu_time(cloud, monkeypatch):
    step = f"{train_step_line(1, 0.5)}\n"
    cloud["kube"].plan(TRAIN, capacity="spot", admitted_after=2, pulling_ticks=2, ticks=8,
                       log_reads=["", "", "loading\n", "loading\n", step], **succeeds(cloud))
    result = run_train(cloud, monkeypatch, "spot", "4h")
    assert result.exit_code == 0, result.output
    changes = [line for line in result.output.splitlines()
               if line.startswith("train: ") and " (after " in line and " for 0:" in line]
    assert [line.split(" (after ")[0] for line in changes] == [
        "train: pulling images", "train: loading", "train: training"], result.output
    assert changes[0].startswith("train: pulling images (after queued for 0:00:0")
    train = run_record(cloud)["steps"]["train"]
    assert [p["phase"] for p in train["phases"]] == ["queued", "pulling images", "loading", "training"]
    assert all(p["seconds"] >= 0 and p["started"].endswith("Z") for p in train["phases"])
    assert train["tpu_idle"]["capacity"] == "spot" and train["tpu_idle"]["chip_hours"] >= 0
    [idle] = [line for line in result.output.splitlines() if line.startswith("train: the TPU slice ")]
    assert " at spot prices while it was not training (" in idle and " chip-hours): pulling images " in idle, idle


def test_idle_tpu_time_is_the_slice_chips_over_the_phases_where_hosts_exist_but_nothing_trains():
    """qwen3-v6e32 on spot: 32 chips; 7 min pulling images and 3 min loading = 10 min, so 32 x 10/60 =
    5.33 chip-hours at spot's $1.35 (recipes/costs/prices.toml) = $7.20. Queued and provisioning bill no TPU on
    a pool that scales from zero, and training is not idle."""
    assert TPU_IDLE_PHASES == ("waiting for head", "pulling images", "loading", "saving")
    idle = idle_tpu(get_recipe(RECIPE), {"queued": 3600, "provisioning": 600, "pulling images": 420,
                                         "loading": 180, "training": 5400}, "spot")
    assert idle.seconds == 600
    assert idle.chip_hours == pytest.approx(32 * 10 / 60)
    assert idle.usd == pytest.approx(7.20)
    # in plain words (issue 37: `billed 0.0 chip-hours ($0.00, spot) while nothing trained: none`)
    assert idle.line("train", {"pulling images": 420, "loading": 180}) == (
        "train: the TPU slice billed about $7.20 at spot prices while it was not training (5.3 chip-hours): pulling "
        "images 7m00s, loading 3m00s")
    assert idle_tpu(get_recipe(RECIPE), {"training": 60}, "spot").line("train", {"training": 60}) == (
        "train: the TPU slice trained all the time it billed, with no wait on the head, images or saving")
