"""The app command (`python -m stacks.app`, what cdktf.json runs): bad input is one line, no traceback."""

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
        [sys.executable, "-m", "stacks.app"],
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
    assert config["app"] == ".venv/bin/python -m stacks.app"
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
        "from stacks.app import main\n"
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
