"""Synth speed benchmark: the cdktf.json app command against a bare provider import, same run.

Measures, each in a fresh process, N times and interleaved (so drifting machine load hits all alike):

  (a) ``python -c "import cdktf_cdktf_provider_google"`` (the normal, eager import; jsii node starts too)
  (b) the cdktf.json app command (all stacks), TPU_RL_PROVIDER_IMPORT=lazy
  (c) the same with TPU_RL_PROVIDER_IMPORT=full

Wall time is from spawn to exit. Memory is the peak of the summed RSS of the whole process tree
(shell, python, the jsii node kernel), sampled every 10 ms from /proc (Linux only), plus the
largest single process's ru_maxrss from wait4. Target (issue 2): median (b) <= 0.4 x median (a),
with byte-identical output between (b) and (c).

``--no-pyc`` adds one run of (a) and (b) with bytecode caching disabled (an empty PYTHONPYCACHEPREFIX and
PYTHONDONTWRITEBYTECODE=1: every module compiled from source, nothing written), to show what
`make install` byte-compiling the packages is worth. ``--profile`` splits one lazy synth into
Python imports, jsii assembly loads in node, and the rest (constructing and synthesizing stacks).

Usage: python bench/bench_synth.py [--repeat N] [--no-pyc] [--profile]   (or `make bench`)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROVIDER = "cdktf_cdktf_provider_google"
TARGET_RATIO = 0.4
MODE_ENV = "TPU_RL_PROVIDER_IMPORT"  # see infra/google.py (kept literal: this process imports no cdktf code)
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Run:
    seconds: float
    tree_peak_mb: float
    largest_process_mb: float
    output: str  # stdout and stderr, merged


def _tree_rss_bytes(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    stack.extend(int(child) for child in children.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # exited between reads
    return total


def measure(command: list[str] | str, env: dict[str, str]) -> Run:
    peak = 0
    start = time.perf_counter()
    process = subprocess.Popen(command, shell=isinstance(command, str), cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output_chunks: list[bytes] = []  # jsii forwards node's console to either stream: keep both, in order
    reader = threading.Thread(target=lambda: output_chunks.append(process.stdout.read()), daemon=True)
    reader.start()
    while True:
        peak = max(peak, _tree_rss_bytes(process.pid))
        finished_pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if finished_pid:
            break
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    output = b"".join(output_chunks).decode(errors="replace")
    if process.returncode != 0:
        raise SystemExit(f"{command!r} exited with {process.returncode}:\n{output[-3000:]}")
    return Run(seconds, peak / 2**20, usage.ru_maxrss / 1024, output)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (MODE_ENV, "CDKTF_OUTDIR")}
    env.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    return {**env, **extra}


def synth_env(outdir: Path, mode: str, **extra: str) -> dict[str, str]:
    # What `cdktf synth` sets for the app command (cdktf-cli 0.21.0), plus the import mode.
    return base_env(CDKTF_OUTDIR=str(outdir), CDKTF_CONTINUE_SYNTH_ON_ERROR_ANNOTATIONS="true",
                    SYNTH_HCL_OUTPUT="false", **{MODE_ENV: mode}, **extra)


def no_pyc_env(env: dict[str, str], empty_cache: Path) -> dict[str, str]:
    return {**env, "PYTHONPYCACHEPREFIX": str(empty_cache), "PYTHONDONTWRITEBYTECODE": "1"}


def tree_bytes(outdir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(outdir)): p.read_bytes() for p in sorted(outdir.rglob("*")) if p.is_file()}


def provider_pyc_present() -> bool:
    root = Path(importlib.util.find_spec(PROVIDER).submodule_search_locations[0])
    return Path(importlib.util.cache_from_source(str(root / "compute_instance" / "__init__.py"))).is_file()


def summary(label: str, runs: list[Run]) -> str:
    times = [r.seconds for r in runs]
    trees = [r.tree_peak_mb for r in runs]
    largest = [r.largest_process_mb for r in runs]
    return (f"{label:<44} {statistics.median(times):8.2f} {min(times):8.2f} "
            f"{statistics.median(trees):10.0f} {max(trees):9.0f} {statistics.median(largest):12.0f}")


def profile_lazy(app: str, scratch: Path) -> None:
    """One lazy synth with Python's import timer and jsii's kernel timer on; split its wall time."""
    run = measure(app, synth_env(scratch / "profile", "lazy", PYTHONPROFILEIMPORTTIME="1", JSII_DEBUG_TIMING="1"))
    seconds = lambda value, unit: float(value) / (1000 if unit == "ms" else 1)  # noqa: E731
    imports = sum(int(us) / 1e6 for us in re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| \S", run.output, re.M))
    loads = {name: seconds(value, unit) for name, value, unit in re.findall(
        r'\[@jsii/kernel:timing\] load\(\{\s*"name": "([^"]+)".*?\}\): ([\d.]+)(ms|s)', run.output, re.S)}
    requires = {name: seconds(value, unit) for name, value, unit in re.findall(
        r"\[@jsii/kernel:timing\] require\(.*?node_modules/(.+?)/lib/index\.js\): ([\d.]+)(ms|s)", run.output)}
    floor = measure([sys.executable, "-c", "import cdktf"], base_env())
    print(f"\nProfile of one lazy synth: {run.seconds:.2f} s wall (timers on, so a little slower)")
    print(f"  module imports (top-level cumulative, -X importtime):  {imports:6.2f} s")
    for name, load in loads.items():
        print(f"    of which jsii assembly load {name:<30} {load:6.2f} s"
              f" (node require of its index.js {requires.get(name, 0.0):.2f} s)")
    print(f"    of which other Python imports (recipes, pydantic, infra, provider submodules, ...): "
          f"{imports - sum(loads.values()):6.2f} s")
    print(f"  the rest: interpreter + node start, building the constructs, synthesizing, writing JSON: "
          f"{run.seconds - imports:6.2f} s")
    print(f"  floor for any cdktf app: `python -c 'import cdktf'` (python, node kernel, cdktf assembly): "
          f"{floor.seconds:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    parser.add_argument("--no-pyc", action="store_true", help="add one run of (a) and (b) without bytecode caches")
    parser.add_argument("--profile", action="store_true", help="split one lazy synth into its phases")
    args = parser.parse_args(argv)

    app = json.loads((REPO / "cdktf.json").read_text())["app"]
    bare = [sys.executable, "-c", f"import {PROVIDER}"]
    results: dict[str, list[Run]] = {"bare": [], "lazy": [], "full": [], "bare-nopyc": [], "lazy-nopyc": []}
    outputs: dict[str, list[dict[str, bytes]]] = {"lazy": [], "full": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-synth-") as tmp:
        scratch = Path(tmp)
        for round_ in range(args.repeat):
            results["bare"].append(measure(bare, base_env()))
            for mode in ("lazy", "full"):
                outdir = scratch / f"{mode}-{round_}"
                results[mode].append(measure(app, synth_env(outdir, mode)))
                outputs[mode].append(tree_bytes(outdir))
                shutil.rmtree(outdir)
            if args.no_pyc and round_ == 0:  # once: a bare import compiles ~180 MB of source
                empty = scratch / f"empty-pycache-{round_}"
                results["bare-nopyc"].append(measure(bare, no_pyc_env(base_env(), empty)))
                outdir = scratch / f"lazy-nopyc-{round_}"
                results["lazy-nopyc"].append(measure(app, no_pyc_env(synth_env(outdir, "lazy"), empty)))
                outputs["lazy"].append(tree_bytes(outdir))
                shutil.rmtree(outdir)
    load_after = os.getloadavg()

    print(f"\nSynth benchmark: {os.cpu_count()} CPUs, load average {load_before[0]:.2f} before / "
          f"{load_after[0]:.2f} after, {args.repeat} run(s) each, interleaved; provider .pyc present: "
          f"{provider_pyc_present()}; app command: {app}")
    print(f"{'':<44} {'median s':>8} {'min s':>8} {'tree MB med':>10} {'tree max':>9} {'largest proc':>12}")
    print(summary("(a) bare import cdktf_cdktf_provider_google", results["bare"]))
    print(summary("(b) synth all stacks, lazy import", results["lazy"]))
    print(summary("(c) synth all stacks, full import", results["full"]))
    if args.no_pyc:
        print(summary("(a') bare import, no .pyc", results["bare-nopyc"]))
        print(summary("(b') synth all stacks, lazy, no .pyc", results["lazy-nopyc"]))
    median = lambda key: statistics.median(r.seconds for r in results[key])  # noqa: E731
    fastest = lambda key: min(r.seconds for r in results[key])  # noqa: E731
    ratio = median("lazy") / median("bare")
    print(f"\nratio (b)/(a): {ratio:.2f} on medians, {fastest('lazy') / fastest('bare'):.2f} on minimums; "
          f"target <= {TARGET_RATIO} -> {'MET' if ratio <= TARGET_RATIO else 'NOT MET'}")
    print(f"ratio (c)/(b): {median('full') / median('lazy'):.1f}x faster with the lazy import")
    reference = outputs["full"][0]
    identical = all(tree == reference for trees in outputs.values() for tree in trees)
    stacks = sorted({name.split("/")[1] for name in reference if name.endswith("cdk.tf.json")})
    print(f"outputs byte-identical across all lazy and full runs ({len(reference)} files, stacks: "
          f"{', '.join(stacks)}): {'yes' if identical else 'NO'}")
    self_usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(tree MB: peak of summed RSS of shell + python + jsii node, sampled every 10 ms; largest proc: "
          f"wait4 ru_maxrss, the biggest single process; this script itself peaked at {self_usage:.0f} MB)")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="bench-synth-profile-") as tmp:
            profile_lazy(app, Path(tmp))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
