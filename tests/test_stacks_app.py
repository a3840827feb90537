"""The app command (`python -m tpu_rl.stacks.app`, what cdktf.json runs): bad input is one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import USER_ENV

REPO = Path(__file__).resolve().parents[1]
GOOD = USER_ENV
SETTING_ENVS = [*GOOD, "HF_TOKEN_SECRET", "TPU_NAME", "TF_STATE_BUCKET", "TPU_RL_CONFIG"]


def run_app(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTING_ENVS}
    return subprocess.run(
        [sys.executable, "-m", "tpu_rl.stacks.app"],
        cwd=REPO,
        env={**clean, "CDKTF_OUTDIR": str(tmp_path / "out"), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
             **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cdktf_json_runs_the_app_module_with_the_project_venv():
    config = json.loads((REPO / "cdktf.json").read_text())
    assert config["language"] == "python"
    assert config["app"] == ".venv/bin/python -m tpu_rl.stacks.app"
    assert config["output"] == "cdktf.out"
    assert config["terraformProviders"] == []  # prebuilt bindings only, nothing to generate


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"CLUSTER_NAME": "a-cluster-name-over-twenty"}, "CLUSTER_NAME"),
        ({"AUTHORIZED_CIDR": "my-laptop"}, "AUTHORIZED_CIDR"),
        ({"RESERVATION": ""}, "RESERVATION"),
    ],
)
def test_bad_setting_stops_synth_with_one_line_naming_it(tmp_path, override, named):
    result = run_app(tmp_path, **{**GOOD, **override})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out" / "stacks").exists()  # nothing written halfway


def test_bad_provider_import_mode_stops_synth_with_one_line_naming_it(tmp_path):
    result = run_app(tmp_path, **GOOD, TPU_RL_PROVIDER_IMPORT="bogus")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "TPU_RL_PROVIDER_IMPORT" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out" / "stacks").exists()


def test_bad_setting_fails_before_cdktf_or_the_provider_bindings_load(tmp_path):
    probe = (
        "import sys\n"
        "from tpu_rl.stacks.app import main\n"
        "code = main()\n"
        "print(code, [m for m in ('jsii', 'cdktf', 'cdktf_cdktf_provider_google') if m in sys.modules])\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in SETTING_ENVS}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env={**clean, **GOOD, "CLUSTER_NAME": "a-cluster-name-over-twenty",
                                                      "CDKTF_OUTDIR": str(tmp_path / "out")},
        capture_output=True, text=True, timeout=120,
    )
    assert result.stdout.strip() == "2 []", result.stdout + result.stderr
    assert "CLUSTER_NAME" in result.stderr


# -- one round: every missing setting at once, the example said once (issue 28) ----------------------
def run_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTING_ENVS and k != "CAPACITY"}
    return subprocess.run([sys.executable, "-m", "tpu_rl.stacks.app", "--check"], cwd=tmp_path,
                          env={**clean, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [["--check"], []], ids=["check", "synth"])
def test_every_missing_setting_is_named_in_one_line_the_rules_included(tmp_path, args):
    clean = {k: v for k, v in os.environ.items() if k not in SETTING_ENVS and k != "CAPACITY"}
    result = subprocess.run([sys.executable, "-m", "tpu_rl.stacks.app", *args], cwd=tmp_path,
                            env={**clean, "PYTHONPATH": str(REPO), "PROJECT": GOOD["PROJECT"],
                                 "CDKTF_OUTDIR": str(tmp_path / "out")},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: REGION, ZONE, CLUSTER_NAME, GCS_BUCKET, RESERVATION and AUTHORIZED_CIDR are "
                           "not set: export REGION=<")
    assert not (tmp_path / "out").exists()


def test_a_gke_only_capacity_needs_no_reservation_but_still_the_allowlist(tmp_path):
    settings = {key: value for key, value in GOOD.items() if key not in ("RESERVATION", "AUTHORIZED_CIDR")}
    result = run_check(tmp_path, **settings, CAPACITY="spot")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: AUTHORIZED_CIDR is not set, but recipe 'qwen3-v6e32' creates a GKE control "
                           "plane: export AUTHORIZED_CIDR=<your address>/32")  # security/bad_input.yaml's line


def test_the_check_with_no_settings_says_once_that_the_example_only_synthesizes(tmp_path):
    result = run_check(tmp_path)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("no settings are set, so synth uses the embedded example (PROJECT=")
    assert "only synthesizes" in line and result.stdout == ""


def test_the_check_with_every_setting_says_nothing(tmp_path):
    result = run_check(tmp_path, **GOOD)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_make_synth_checks_the_settings_before_cdktf_runs():
    commands = subprocess.run(["make", "-n", "synth"], cwd=REPO, capture_output=True, text=True,
                              timeout=60).stdout.splitlines()
    check = commands.index(".venv/bin/python -m tpu_rl.stacks.app --check")
    assert any("npx cdktf synth" in command for command in commands[check + 1:]), commands
