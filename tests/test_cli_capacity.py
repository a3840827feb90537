"""The CAPACITY setting reaches every command through one door (Settings.recipe): what `recipes` prices,
what `render` and `run` use, and what `preflight` checks."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tpu_rl.scripts.cli import app

runner = CliRunner()


def test_recipes_prices_follow_capacity(monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    result = runner.invoke(app, ["recipes", "--json"])
    assert result.exit_code == 0, result.output
    facts = {item["name"]: item for item in json.loads(result.output)}
    assert facts["qwen3-v6e32"]["capacity"] == ["spot"]
    assert facts["llama31-v6e8"]["capacity"] == ["spot"]
    # In train: 32 chips x $1.35 (spot, prices.toml) = $43.20, + CPU pool n4-standard-64 $3.03 + system pool
    # $0.134 + cluster fee $0.10 + NAT $0.019 = $46.483/h. Without a reservation the TPU bills only in train.
    assert facts["qwen3-v6e32"]["hourly_estimate"].startswith("$46.48/h in train, ")
    # The VM is billed in every step: 8 chips x $1.35 = $10.80, + NAT: one VM $0.0014 + one IP $0.005.
    assert facts["llama31-v6e8"]["hourly_estimate"] == "$10.81/h"


def test_a_capacity_list_that_the_vm_cannot_use_is_refused_by_the_vm_recipes_render(monkeypatch, tmp_path):
    # `recipes` lists it with the same line instead (test_cli_offline), and synth writes a stack whose plan
    # fails with it (test_stacks_artifacts): one rule, refused only where the VM recipe is asked for.
    monkeypatch.setenv("CAPACITY", "flex-start")
    result = runner.invoke(app, ["render", "llama31-v6e8", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "CAPACITY 'flex-start' has no mode the TPU VM of recipe 'llama31-v6e8' can use" in result.output
    assert not (tmp_path / "out").exists()


def test_preflight_with_spot_needs_no_reservation(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    monkeypatch.delenv("RESERVATION")
    result = runner.invoke(app, ["preflight", "qwen3-v6e32"])
    assert "pass  reservation: not needed (capacity 'spot')" in result.output, result.output


def test_capacity_alone_lays_over_the_example_so_synth_shows_it_without_a_project():
    from tpu_rl.recipes import load_settings

    settings = load_settings({"CAPACITY": "flex-start,spot"}, allow_example=True)
    assert settings.is_example and settings.capacity == ("flex-start", "spot")
    missing = runner.invoke(app, ["status", "qwen3-v6e32"], env={"CAPACITY": "spot"})
    assert missing.exit_code == 2 and "not set" in missing.output  # a cloud command never takes the example
