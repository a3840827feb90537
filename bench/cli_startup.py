"""CLI start-up benchmark: wall time of the offline `tpu-rl` commands, each in a fresh process.

Runs the installed console script (.venv/bin/tpu-rl, the way a user does) N times per command,
interleaved so that drifting machine load hits every command alike, and prints the median and the
minimum. The commands talk to no cloud, so what they cost is start-up: the interpreter, imports, and
their own small work. Target (issue 11): median `tpu-rl --help` <= 0.3 s on the project's 2-core
machine. The load average is printed with the figures because the machine is shared.

Each run gets an empty working directory and no settings in its environment (render then uses the
embedded example), so the figures do not depend on the caller's settings or config file.

Usage: python bench/cli_startup.py [--repeat N] [--tpu-rl PATH]   (or `make bench-cli`)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpu_rl.recipes.settings.specs import CONFIG_ENV, SPECS

REPO = Path(__file__).resolve().parents[1]
TARGET_HELP_SECONDS = 0.3
# Settings the CLI reads, removed so each run starts from nothing.
SETTINGS_ENV = (*(spec.env for spec in SPECS), CONFIG_ENV)
COMMANDS = {
    "--help": ["--help"],
    "recipes": ["recipes"],
    "render": ["render", "qwen3-v6e32", "--out", "{tmp}/rendered"],
}


def run_once(tpu_rl: Path, argv: list[str], env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="tpu-rl-bench-") as tmp:
        args = [str(tpu_rl), *(arg.replace("{tmp}", tmp) for arg in argv)]
        started = time.perf_counter()
        done = subprocess.run(args, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"`tpu-rl {' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="fresh processes per command (default 15)")
    parser.add_argument("--tpu-rl", type=Path, default=REPO / ".venv" / "bin" / "tpu-rl",
                        help="the console script to time (default .venv/bin/tpu-rl)")
    args = parser.parse_args()
    if not args.tpu_rl.is_file():
        sys.exit(f"{args.tpu_rl} does not exist: run `make install` first")
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_ENV}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for name, argv in COMMANDS.items():  # one warm-up each: the first run may compile .pyc files
        run_once(args.tpu_rl, argv, env)
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name, argv in COMMANDS.items():
            times[name].append(run_once(args.tpu_rl, argv, env))
    load_after = os.getloadavg()[0]
    print(f"{args.repeat} fresh processes per command, interleaved; {os.cpu_count()} CPUs, "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'command':<42}{'median':>9}{'min':>9}{'max':>9}")
    for name, argv in COMMANDS.items():
        shown = "tpu-rl " + " ".join(argv).replace("{tmp}/", "")
        print(f"{shown:<42}{statistics.median(times[name]):>8.3f}s{min(times[name]):>8.3f}s"
              f"{max(times[name]):>8.3f}s")
    help_median = statistics.median(times["--help"])
    verdict = "meets" if help_median <= TARGET_HELP_SECONDS else "misses"
    print(f"`tpu-rl --help` median {help_median:.3f} s {verdict} the target of {TARGET_HELP_SECONDS} s")


if __name__ == "__main__":
    main()
