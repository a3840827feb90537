"""Commands that need no cloud (recipes, render), and true end-to-end runs of the installed `tpu-rl`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from peers.fixtures import jobset_of, put_step_output
from tpu_rl.recipes import all_recipes, get_recipe
from tpu_rl.scripts.cli import app

runner = CliRunner()
TPU_RL = Path(sys.executable).parent / "tpu-rl"


def test_recipes_json_lists_derived_facts_for_every_recipe():
    result = runner.invoke(app, ["recipes", "--json"])
    assert result.exit_code == 0, result.output
    facts = {item["name"]: item for item in json.loads(result.output)}
    assert set(facts) == set(all_recipes())
    qwen = facts["qwen3-v6e32"]
    assert (qwen["chips"], qwen["hosts"], qwen["machine_type"]) == (32, 8, "ct6e-standard-4t")
    assert qwen["image"].endswith("tpu_post_training:0.2.4") and qwen["maxtext_version"] == "0.2.4"
    assert (facts["gemma4-v6e64"]["chips"], facts["gemma4-v6e64"]["hosts"]) == (64, 16)
    llama = facts["llama31-v6e8"]
    assert (llama["hosts"], llama["image"], llama["pip"]) == (1, None, "maxtext[tpu-post-train]==0.2.3")
    for item in facts.values():
        assert item["hourly_usd_estimate"] > 0


def test_recipes_json_shows_no_chip_figure_for_a_plan_with_no_known_peak(monkeypatch):
    # The shipped plan of every recipe with its train step refused without a need: `recipes` says "-"
    # rather than failing on the missing peak.
    from tpu_rl.scripts.fit import check
    from tpu_rl.scripts.fit.account import Fit

    unnamed = json.loads((Path(__file__).parent / "fit_results" / "qwen3-v6e32-micro-256.json").read_text())
    del unnamed["programs"]["train_step"]["need_bytes"]
    monkeypatch.setattr(check, "shipped_fit", lambda spec, settings: Fit(unnamed))
    result = runner.invoke(app, ["recipes", "--json"])
    assert result.exit_code == 0, result.output
    facts = {item["name"]: item for item in json.loads(result.output)}
    assert {item["hbm_per_chip"] for item in facts.values()} == {"-"}
    assert {item["fits"] for item in facts.values()} == {False}


def test_recipes_under_a_capacity_the_vm_cannot_use_lists_every_recipe_and_says_why_the_vm_cannot(monkeypatch):
    # One rule for every command: CAPACITY=flex-start refuses only the VM recipe's own commands (render,
    # run, ...), as its stack's plan does; the listing and the GKE recipes go on.
    monkeypatch.setenv("CAPACITY", "flex-start")
    result = runner.invoke(app, ["recipes", "--json"])
    assert result.exit_code == 0, result.output
    facts = {item["name"]: item for item in json.loads(result.output)}
    assert facts["qwen3-v6e32"]["capacity"] == ["flex-start"] and facts["qwen3-v6e32"]["unavailable"] is None
    assert facts["llama31-v6e8"]["hourly_usd_estimate"] is None
    assert facts["llama31-v6e8"]["unavailable"].startswith("CAPACITY 'flex-start' has no mode the TPU VM of recipe "
                                                           "'llama31-v6e8' can use")
    table = runner.invoke(app, ["recipes"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "llama31-v6e8: CAPACITY 'flex-start' has no mode" in table.output


def test_render_writes_the_three_jobsets_of_a_gke_recipe(settings_env, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["render", "qwen3-v6e32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["convert.yaml", "export.yaml", "train.yaml"]
    for step in ("convert", "train", "export"):
        text = (out / f"{step}.yaml").read_text()
        manifest = yaml.safe_load(text)
        assert manifest["kind"] == "JobSet" and manifest["metadata"]["name"] == jobset_of("qwen3-v6e32", step)
        assert "rl-test-artifacts" in text


def test_render_writes_the_startup_script_of_the_vm_recipe(settings_env, tmp_path):
    result = runner.invoke(app, ["render", "llama31-v6e8", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".sh"] == ["startup.sh"]
    assert (tmp_path / "startup.sh").read_text().startswith("#!")


def test_render_works_with_the_example_settings_and_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("PROJECT", "REGION", "ZONE", "CLUSTER_NAME", "GCS_BUCKET", "RESERVATION", "AUTHORIZED_CIDR",
                "TPU_RL_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    result = runner.invoke(app, ["render", "gemma4-v6e64", "--out", "rendered"])
    assert result.exit_code == 0, result.output
    assert "example settings" in result.output and (tmp_path / "rendered" / "train.yaml").is_file()


def test_render_refuses_an_out_path_that_is_a_file(settings_env, tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    result = runner.invoke(app, ["render", "qwen3-v6e32", "--out", str(target)])
    assert result.exit_code == 2 and "is not a directory" in result.output


def test_render_to_a_path_that_cannot_be_created_is_one_line(settings_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["render", "qwen3-v6e32", "--out", str(blocker / "out")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert result.output.startswith(f"error: --out: cannot write {blocker / 'out'}")


def _installed(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(TPU_RL), *args], capture_output=True, text=True, input=stdin, timeout=300,
                          env={**os.environ, **(env or {})})


def test_installed_entry_point_lists_recipes_as_json():
    done = _installed("recipes", "--json")
    assert done.returncode == 0, done.stderr
    assert [item["name"] for item in json.loads(done.stdout)] == list(all_recipes())


def test_installed_entry_point_runs_the_pipeline_and_resumes(cloud):
    recipe = get_recipe("qwen3-v6e32")
    for step in ("convert", "train", "export"):
        cloud["kube"].plan(jobset_of("qwen3-v6e32", step),
                           on_success=lambda step=step: put_step_output(cloud["gcs"], recipe, step))
    first = _installed("run", "qwen3-v6e32")
    assert first.returncode == 0, first.stdout + first.stderr
    assert cloud["kube"].created == [jobset_of("qwen3-v6e32", step) for step in ("convert", "train", "export")]
    again = _installed("run", "qwen3-v6e32")
    assert again.returncode == 0 and again.stdout.count("skipping") == 3


def test_installed_entry_point_rejects_bad_input_in_one_line_without_traceback():
    done = _installed("run", "nope")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "unknown recipe 'nope'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
