"""A whole simulated run, no cloud account: `make demo` (python -m peers.demo from tests/).

Starts the local peers the tests use (the fake Kubernetes API with JobSet and Kueue, Compute, TPU and
Secret Manager, the Hugging Face Hub, the GCS emulator), scripts a run that succeeds and writes each
step's outputs (peers/simulated_run.py), then runs the real `tpu-rl run`, `status`, `runs` and
`metrics --png` against them as subprocesses: the same code and output as a real run. Nothing is
measured: every number comes from the peers, and the curves are synthetic. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = "qwen3-v6e32"
BANNER = "SIMULATION: local fake cloud, no TPU; every figure is synthetic"  # fits 80 columns with ===
COMMAND_LABEL = "# simulated, against the local peers:"
PNG_NOTE = "SIMULATION: synthetic curves from the local demo peers, not a measurement"
COMMAND_SECONDS = 120  # the longest any one command may take (run: about 30 s at one poll a second)
POLL_SECONDS = "1"  # run's poll interval: slow enough to watch, quick enough to end in about a minute


def banner(text: str) -> None:
    print(f"=== {text} ===", flush=True)


def stamp_picture(path: Path) -> None:
    """A red band above the picture saying it is a simulation (metrics draws what the bucket holds)."""
    from PIL import Image, ImageDraw

    picture = Image.open(path).convert("RGB")
    band = 40
    stamped = Image.new("RGB", (picture.width, picture.height + band), "white")
    stamped.paste(picture, (0, band))
    draw = ImageDraw.Draw(stamped)
    draw.rectangle((0, 0, picture.width, band - 1), fill=(190, 30, 30))
    draw.text((12, band // 2), PNG_NOTE, fill="white", anchor="lm", font_size=20)
    stamped.save(path)


class Simulation:
    """The peers, started once, with a successful run of `recipe_name` scripted into them; `env` points
    the real entry points at them. A context manager: the peers stop on exit."""

    def __init__(self, home: Path, recipe_name: str = RECIPE, ticks: int = 3, train_ticks: int = 12) -> None:
        from peers.fixtures import SETTINGS, TOKEN, clean_environment, start_gcs_emulator, start_peers
        from peers.simulated_run import put_idle_cluster_nodes, script_successful_run
        from tpu_rl.recipes import get_recipe

        # The emulator logs each 404 as an error; `run` reading a run.json that does not exist yet is no error.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
        self.gcs_emulator = start_gcs_emulator()
        self.env = {**clean_environment(home), **SETTINGS, "TPU_RL_POLL_SECONDS": POLL_SECONDS,
                    "COLUMNS": "80", "TERM": "dumb"}
        self.peers = start_peers({}, self.env, home, TOKEN, self.gcs_emulator)
        self.recipe = get_recipe(recipe_name)
        script_successful_run(self.peers.kube, self.peers.gcs_client, self.recipe, ticks=ticks,
                              train_ticks=train_ticks, with_train_log=True)
        put_idle_cluster_nodes(self.peers.kube, self.recipe)  # what `runs` prices once the run has ended

    @property
    def run_name(self) -> str:
        from peers.settings import spec_of
        from tpu_rl.jobs.paths import ArtifactPaths
        from tpu_rl.recipes import load_settings

        return ArtifactPaths(spec_of(self.recipe), load_settings(env=self.env)).run_name

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *exc) -> None:
        self.peers.stop()
        self.gcs_emulator[0].stop()


def tpu_rl(env: dict[str, str], cwd: Path, *args: str) -> int:
    """One real `tpu-rl` command, shown as typed (whole, for copying), its output as a user sees it; at most
    COMMAND_SECONDS."""
    print(f"\n{COMMAND_LABEL}\n$ tpu-rl {' '.join(args)}", flush=True)
    command = [str(Path(env["PATH"].split(os.pathsep)[0]) / "tpu-rl"), *args]
    try:
        return subprocess.run(command, env=env, cwd=cwd, timeout=COMMAND_SECONDS,
                              stdin=subprocess.DEVNULL).returncode
    except subprocess.TimeoutExpired:
        print(f"demo: `tpu-rl {args[0]}` took over {COMMAND_SECONDS} s and was stopped", flush=True)
        return 124


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--png", type=Path, default=Path("demo-curves.png"), help="where metrics draws the curves")
    args = parser.parse_args(argv)
    png = args.png.resolve()
    started = time.monotonic()
    banner(BANNER)
    print("Starting the local peers (tests/peers) and scripting a run that succeeds...", flush=True)
    with tempfile.TemporaryDirectory(prefix="tpu-rl-demo-") as home, Simulation(Path(home)) as sim:
        failed = None
        for command in (("run", RECIPE), ("status", RECIPE), ("runs", RECIPE),
                        ("metrics", RECIPE, "--run", sim.run_name, "--png", png.name)):
            if tpu_rl(sim.env, png.parent, *command) != 0:
                failed = command[0]
                break
    if failed is None:
        stamp_picture(png)
        print(f"\n{png.name}: synthetic curves, stamped SIMULATION (not a measurement)", flush=True)
    banner(BANNER)
    seconds = round(time.monotonic() - started)
    if failed:
        print(f"demo: `tpu-rl {failed}` failed (above); {seconds} s", flush=True)
        return 1
    print(f"demo: done in {seconds} s; a real run: README.md, 'From zero to a trained model'", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the command got the same Ctrl-C; the peers stopped on the way out
        print(f"\n=== {BANNER} ===\ndemo: stopped (Ctrl-C)", flush=True)
        sys.exit(130)
