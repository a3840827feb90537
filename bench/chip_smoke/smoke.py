"""The real-chip smoke: a recipe's own convert, train and export on one TPU chip, then its report.

    python bench/chip_smoke/smoke.py --out DIR [--recipe NAME] [--model chip|cpu] [--work DIR]
        [--boundary-only] [--boundary BATCH ...]

Run with MaxText's environment's python (docs/development.md, "The real-chip smoke"). In order, each a
process of its own, timed, its exit kept: the model generated on the machine (tests/maxtext_cpu/tiny.py,
the recipe's architecture at plan.py's sizes; llama31-v6e8's unless --recipe), a gsm8k-shaped data file, to_maxtext (tests/maxtext_cpu/
run.py), train_rl's own main with the actor sampler (train.py), to_huggingface, and transformers'
reload of the export (tests/maxtext_cpu/reload.py). Then, for each --boundary, a short train run with
that batch size (plan.py boundary_sets: the fit account's sizes, bench/chip_smoke/fit.py). --model cpu runs the same on a
CPU with tiny.py's tiny model (JAX_PLATFORMS=cpu), which is how it is checked without a chip. A recipe of
a slice runs on one chip (plan.py one_chip), with its patches of MaxText's files applied as the CPU
train probe applies them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import report as reporting  # noqa: E402
from plan import RECIPE, RECIPES, REPO, SETS, SHARD, STD, Plan, boundary_sets, release_keys  # noqa: E402

CPU_STEPS = REPO / "tests" / "maxtext_cpu"
DUMMY_TOKEN = "hf_dummy_token_for_offline_tests"
# gsm8k's two columns, as MaxText's process_data reads them (utils_rl.py: question, answer "... #### N").
TRAIN_ROWS, TEST_ROWS = 64, 16


def environment(work: Path, cpu: bool) -> dict[str, str]:
    """The steps' environment: this one (PYTHONPATH and the TPU_ variables stay) offline, with a dummy
    token. --model cpu pins JAX to the CPU, as the CPU tests do."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_TOKEN=DUMMY_TOKEN,
               HF_HOME=str(work / "hf"), TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    return env


TERM_GRACE = 20  # seconds a step cut at its timeout has to write its result before it is killed
DEADLINE = [float("inf")]  # time.monotonic() by which every step must have ended (--deadline)


def run_step(name: str, argv: list[str], env: dict, logs: Path, steps: dict, timeout: float) -> bool:
    """One step as a process of its own: its exit, its seconds and its log file; killed at the deadline."""
    timeout = min(timeout, DEADLINE[0] - time.monotonic())
    if timeout <= 0:
        steps[name] = {"exit": "not run: past --deadline", "seconds": 0.0, "log": str(logs / f"{name}.log")}
        print(f"{name}: not run, past the deadline", flush=True)
        return False
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: train.py then writes what it measured so far (TERM_GRACE seconds at most)
            process.terminate()
            try:
                process.wait(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            code = "timeout"
    steps[name] = {"exit": code, "seconds": round(time.monotonic() - started, 1), "log": str(log)}
    print(f"{name}: exit {code}, {steps[name]['seconds']} s", flush=True)
    return code == 0


def write_data(directory: Path, train_rows: int = TRAIN_ROWS) -> None:
    """A gsm8k-shaped train and test file: a question and an answer ending in `#### N`. A boundary run's
    batch needs as many train rows: train_rl keeps at most what the file has, and tunix then refuses a
    batch larger than its data (`full_batch_size=64 must be a multiple of ..._micro_batch_size=66`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    for name, rows, offset in (("train", train_rows, 0), ("test", TEST_ROWS, 1000)):
        pairs = [(3 + i + offset, 7 + 2 * i) for i in range(rows)]
        table = pa.table({"question": [f"Tom has {a} apples and buys {b} more. How many apples does he have?"
                                       for a, b in pairs],
                          "answer": [f"He has {a} + {b} = {a + b} apples.\n#### {a + b}" for a, b in pairs]})
        pq.write_table(table, directory / f"{name}.parquet")


def train_run(plan: Plan, name: str, env: dict, logs: Path, steps: dict, timeout: float) -> dict:
    """train_rl's main on the plan's arguments, and what it left: its result, lines, tags, checkpoints."""
    command = plan.commands()["train"]
    result_path = logs / f"{name}.json"
    # A fresh run each time: train_rl resumes from a checkpoint of the same run and, at its last step already,
    # trains nothing (a second smoke in the same --work did, and exported the first one's steps).
    trained = plan.local(plan.chain().paths.trained) / plan.run
    shutil.rmtree(trained, ignore_errors=True)
    result_path.unlink(missing_ok=True)
    run_env = dict(env, SMOKE_RESULT=str(result_path),
                   PROBE_PATCHES=json.dumps(plan.patches(plan.root / "patched-src")))
    run_step(name, [sys.executable, str(HERE / "train.py"), str(plan.model), plan.chain().recipe.model.maxtext_name,
                    command.module, *plan.argv("train")], run_env, logs, steps, timeout)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {"error": "no result written"}
    # the chip's own limit (bytes_limit) beside its peak, in the output too: the fit account's limit is the compiler's
    print(f"{name}: allocator {json.dumps(result.get('allocator'))}", flush=True)
    log_path = Path(steps[name]["log"])
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    return {**result, "sets": list(plan.extra), "argv": plan.argv("train"),
            "programs": reporting.program_memory(result.get("executables", [])),
            "largest": reporting.largest(result.get("executables", [])),
            "timing": reporting.timing(result.get("lines", [])), "quoted": reporting.quoted_lines(log),
            "tags": {tag: [step for step, _ in points] for tag, points in
                     reporting.event_scalars(trained / "tensorboard").items()} if (trained / "tensorboard").is_dir() else {},
            "checkpoints": reporting.checkpoint_layout(trained / "checkpoints" / "actor")}


def changed_items(plan: Plan, versions: dict) -> list[str]:
    """What the smoke changed: its --set items, then each argument the chip's changes added or replaced."""
    rendered = plan.commands()
    given = plan.given
    items = [f"--set {key}={given[key]}: smoke.py --set, in place of plan.py's {value} ({why})" if key in given
             else f"--set {key}={value}: {why}" for key, (value, why) in SETS.items()]
    items += [f"--set {key}={value}: smoke.py --set" for key, value in given.items() if key not in SETS]
    if plan.without_patches:
        items.append("the recipe's patches of MaxText's files left out (smoke.py --without-patches): "
                     + ", ".join(patch.name for patch in plan.chain().recipe.patches))
    items.append("--set hf_train_files=…, hf_eval_files=…: a local gsm8k-shaped file (no network)")
    for step in ("convert", "train", "export"):
        before = set(rendered[step].argv[3:])
        items += [f"{step}: {arg}" for arg in plan.argv(step) if arg not in before]
        items += [f"{step}: {arg} dropped: MaxText {versions.get('maxtext')} has no such key or takes a mapping" for arg in plan.unknown(step)]
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="where report.md and report.json go")
    parser.add_argument("--work", type=Path, default=Path("/tmp/chip-smoke"), help="the bucket's stand-in")
    parser.add_argument("--recipe", choices=RECIPES, default=RECIPE, help="whose commands and model family")
    parser.add_argument("--model", choices=("chip", "cpu"), default="chip")
    parser.add_argument("--boundary", nargs="*", type=int, default=[], help="batch sizes of boundary runs (fit.py)")
    parser.add_argument("--step-timeout", type=float, default=900)
    parser.add_argument("--boundary-only", action="store_true", help="the model and conversion, then the boundary runs")
    parser.add_argument("--reuse", action="store_true", help="keep a conversion already in --work")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="replace a value of plan.py SETS (e.g. num_batches=2); listed in the report")
    parser.add_argument("--without-patches", action="store_true",
                        help="leave out the recipe's patches of MaxText's files; listed in the report")
    parser.add_argument("--deadline", type=float, help="seconds from now by which every step must have ended")
    args = parser.parse_args()
    cpu = args.model == "cpu"
    if args.deadline:
        DEADLINE[0] = time.monotonic() + args.deadline
    work, logs = args.work, args.work / "logs"
    known = release_keys()
    bad = [item for item in args.sets if "=" not in item]
    if bad:
        parser.error(f"--set {bad[0]}: expected KEY=VALUE, e.g. --set num_batches=2")
    mode = {"sets": tuple(args.sets), "without_patches": args.without_patches}
    plan = Plan(args.model, work, work / "model", recipe=args.recipe, known=known, **mode)
    env = environment(work, cpu)
    steps: dict = {}
    trains: dict = {}
    name = plan.chain().recipe.model.maxtext_name
    versions = reporting.installed_versions()
    started = time.monotonic()
    ok = True
    if not (plan.model / "model.safetensors.index.json").is_file():
        ok = run_step("model", [sys.executable, str(CPU_STEPS / "tiny.py"), str(plan.model), name,
                                json.dumps(plan.sizes) if plan.sizes else "null", SHARD[args.model],
                                str(STD[args.model])], env, logs, steps, args.step_timeout)
    write_data(work / "data", max([TRAIN_ROWS, *args.boundary]))
    commands = plan.commands()
    converted = plan.local(plan.chain().paths.converted_items)
    if args.reuse and converted.is_dir():
        steps["convert"] = {"exit": 0, "seconds": 0.0, "reused": str(converted)}
    elif ok:
        ok = run_step("convert", [sys.executable, str(CPU_STEPS / "run.py"), "convert", str(plan.model), name,
                                  commands["convert"].module, *plan.argv("convert")], env, logs, steps,
                      args.step_timeout)
    if ok and not args.boundary_only:
        trains["train"] = train_run(plan, "train", env, logs, steps, args.step_timeout)
        ok = steps["train"]["exit"] == 0
        if ok:
            ok = run_step("export", [sys.executable, str(CPU_STEPS / "run.py"), "export", str(plan.model), name,
                                     commands["export"].module, *plan.argv("export")], env, logs, steps,
                          args.step_timeout)
        if ok:
            export = plan.local(plan.chain().paths.hf_export)
            run_step("reload", [sys.executable, str(CPU_STEPS / "reload.py"), str(plan.model), str(export)], env,
                     logs, steps, args.step_timeout)
    for index, batch in enumerate(args.boundary if "convert" in steps and steps["convert"]["exit"] == 0 else []):
        boundary = Plan(args.model, work, work / "model", boundary_sets(batch), run=f"boundary-{index}",
                        recipe=args.recipe, known=known, **mode)
        trains[f"boundary batch_size={batch}"] = train_run(boundary, f"boundary-{index}", env, logs, steps, args.step_timeout)
    reloaded = _last_json(Path(steps["reload"]["log"])) if "reload" in steps else None
    model = json.loads((plan.model / "config.json").read_text()) if (plan.model / "config.json").is_file() else {}
    model = model.get("text_config", model)  # Gemma 4's sizes are its text model's
    report = {
        "recipe": plan.chain().recipe.name, "recipe_maxtext": plan.chain().recipe.maxtext_version,
        "date": datetime.date.today().isoformat(),
        "chip": next((t["devices"][0] for t in trains.values() if t.get("devices")), "none"),
        "python": platform.python_version(), "machine": platform.machine(),
        "versions": {key: versions.get(key) for key in ("jax", "jaxlib", "libtpu", "maxtext", "google-tunix", "flax",
                                                        "optax", "orbax-checkpoint", "transformers", "torch")},
        "model": (f"{name} architecture, hidden {model.get('hidden_size')}, {model.get('num_hidden_layers')} layers, "
                  f"vocabulary {model.get('vocab_size')}, {_parameters(steps)} parameters"),
        "steps": {key: {k: v for k, v in step.items() if k != "log"} for key, step in steps.items()},
        "trains": trains, "reload": reloaded, "changed": changed_items(plan, versions),
        "deviations": reporting.deviations((REPO / "recipes" / "environments" / "constraints-0.2.3.txt").read_text(),
                                           versions),
        "seconds": round(time.monotonic() - started, 1)}
    reporting.write(report, args.out)
    print(f"report: {args.out / 'report.md'}", flush=True)


def _last_json(log: Path) -> dict | None:
    if not log.is_file():
        return None
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _parameters(steps: dict) -> str:
    found = _last_json(Path(steps["model"]["log"])) if "model" in steps else None
    return f"{found['parameters']:,}" if found and "parameters" in found else "?"


if __name__ == "__main__":
    main()
