"""`make demo`: the launcher it runs (tests/peers/demo.py) shows a whole simulated run, labelled as one, in
bounded time, and writes the curves stamped as synthetic."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from peers.demo import BANNER, COMMAND_LABEL, COMMAND_SECONDS, PNG_NOTE

REPO = Path(__file__).resolve().parents[1]
# The four commands' bound, plus the peers' start-up: the demo never waits longer than this.
DEMO_SECONDS = 4 * COMMAND_SECONDS + 60


def test_make_demo_runs_the_launcher_the_test_runs():
    dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", "demo"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "-m peers.demo --png demo-curves.png" in dry.stdout
    assert f"{REPO}/tests" in dry.stdout  # the peers are imported from the checkout, not site-packages


def test_the_demo_runs_a_whole_run_labelled_a_simulation_and_writes_stamped_curves(tmp_path):
    png = tmp_path / "curves.png"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    result = subprocess.run([sys.executable, "-m", "peers.demo", "--png", str(png)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=DEMO_SECONDS)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert result.stderr == ""  # the commands wrote no error, the peers no noise
    lines = out.splitlines()
    assert lines[0] == f"=== {BANNER} ===" and f"=== {BANNER} ===" in lines[-3:]
    # 80 columns, but for the commands shown for copying, which are never wrapped
    copied = [line for line in lines if line.startswith("$ ") or re.fullmatch(r"\s*`[^`]+`", line)]
    assert max(len(line) for line in lines if line not in copied) <= 80
    for command in ("run", "status", "runs", "metrics"):
        [at] = [i for i, line in enumerate(lines) if line.startswith(f"$ tpu-rl {command} qwen3-v6e32")]
        assert lines[at - 1] == COMMAND_LABEL, command
    # run: the plan, each step verified, the held-out accuracy of the whole run, the end
    assert re.search(r"^run qwen3-v6e32-[0-9a-f]+; plan: convert submit, train submit, export submit$", out, re.M)
    for step in ("convert", "train", "export"):
        assert f"✓ {step}: output verified" in lines
    assert re.search(r"^train: step \d+/50, loss ", out, re.M)
    assert "accuracy 40.6% → 59.4% (+18.8) on 64 gsm8k test questions" in lines
    assert any(line.startswith("done: convert, train, export verified in gs://") for line in lines)
    # status, runs, metrics
    assert re.search(r"^export +succeeded, pods done", out, re.M)
    assert re.search(r"^qwen3-v6e32-[0-9a-f]+ +succeeded, step 50/50", out, re.M)
    assert "held-out accuracy 40.6% → 59.4% (+18.8), 3 evaluations" in lines
    assert f"wrote {png.name}" in lines
    assert f"{png.name}: synthetic curves, stamped SIMULATION (not a measurement)" in lines
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    picture = Image.open(png).convert("RGB")
    assert picture.getpixel((2, 2)) == (190, 30, 30), "the SIMULATION band is missing"
    assert PNG_NOTE.startswith("SIMULATION")
