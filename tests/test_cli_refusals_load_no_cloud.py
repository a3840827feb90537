"""A command refuses bad input before it loads a cloud library: the error is the first thing the user
waits for, and kubernetes and the Google clients take most of a second to import (google-cloud-compute
alone well over one)."""

from __future__ import annotations

import json
import subprocess
import sys

from peers.fixtures import REPO, clean_environment

CLOUD_LIBRARIES = ("kubernetes", "google.cloud.storage", "google.cloud.compute_v1", "google.cloud.tpu_v2",
                   "google.cloud.secretmanager")
SETTINGS = {"GCS_BUCKET": "acme-rl-artifacts", "REGION": "us-east5", "ZONE": "us-east5-b",
            "CLUSTER_NAME": "acme-rl", "RESERVATION": "acme-v6e-reservation", "AUTHORIZED_CIDR": "203.0.113.7/32"}
# Each refused before any cloud call: PROJECT unset, or an argument that names no step.
REFUSED = [["preflight", "qwen3-v6e32"], ["run", "qwen3-v6e32", "--dry-run"], ["run", "qwen3-v6e32", "--steps", "tran"],
           ["cancel", "qwen3-v6e32", "tran"], ["logs", "qwen3-v6e32", "tran"], ["status", "llama31-v6e8"],
           ["eval", "qwen3-v6e32", "--run", "rl"], ["runs", "qwen3-v6e32"], ["metrics", "qwen3-v6e32"]]
PROBE = """
import json, sys
from typer.testing import CliRunner
from tpu_rl.scripts.cli import app
out = []
for argv in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, argv)
    out.append({"argv": argv, "code": result.exit_code, "output": result.output,
                "loaded": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)})
print(json.dumps(out))
"""


def test_a_refused_command_loads_no_cloud_library(tmp_path):
    env = {**clean_environment(tmp_path), **SETTINGS, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(REFUSED), json.dumps(CLOUD_LIBRARIES)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    for run in json.loads(result.stdout):
        assert run["code"] == 2 and run["output"].startswith("error: "), run
        assert run["loaded"] == [], f"{' '.join(run['argv'])} loaded {run['loaded']} before refusing"
