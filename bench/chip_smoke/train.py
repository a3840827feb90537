"""train_rl's own main, as `python3 -m maxtext.trainers.post_train.rl.train_rl ARG...` runs it, with the
rollout substituted (actor_sampler.py) and what the smoke measures recorded.

    python bench/chip_smoke/train.py MODEL_DIR MAXTEXT_NAME MODULE ARG...   (result JSON: $SMOKE_RESULT)

Changed before main runs, and nothing else:
- maxtext.integration.vllm.maxtext_vllm_rollout, which train_rl imports at its top and which imports
  vLLM, is an empty module (vLLM is not installed), and RLCluster is given ActorSampler as its rollout
  engine in place of the one train_rl names;
- orbax writes commit_success.txt markers as it does on gs:// (tests/maxtext_cpu/run.py);
- the recipe's patches of MaxText's own files ($PROBE_PATCHES, plan.py patches) are applied to a copy of
  the installed file, which is imported in its place, as the CPU train probe does (run.py patched_utils_rl).
Recorded: each executable's compiled memory (argument, output, alias, temporary and code bytes, as XLA
reports them for the program: jax's compiler.compile_or_get_cached wrapped), or the compiler's refusal;
the seconds from the process's start to the lines the report quotes; the allocator's peak at the end.
"""

from __future__ import annotations

import time

STARTED = time.time()

import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "maxtext_cpu"))
sys.path.insert(0, str(HERE))

import run as maxtext_step  # noqa: E402  tests/maxtext_cpu/run.py

# The lines the report times, by what tunix and train_rl log (tunix/sft/peft_trainer.py _log_metrics,
# train_rl.py _rl_train_impl).
TIMED = ("Train step ", "Pre RL Training", "Post RL Training", "Starting RL training",
         "RL Training Completed")
SAVING = "Saving checkpoint at step"  # orbax's CheckpointManager.save, after a "[process=N] " prefix
RESULT: dict = {"executables": [], "lines": [], "replaced_rollout": None}


def seconds() -> float:
    return round(time.time() - STARTED, 2)


class LineClock(logging.Handler):
    """The time since the process started at each line the report quotes."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001  a record whose arguments do not format is not one of ours
            return
        if message.startswith(TIMED) or SAVING in message:
            RESULT["lines"].append({"seconds": seconds(), "line": message[:300]})


def record_compiles() -> None:
    """Each executable XLA compiles (or loads from JAX's cache) with its compiled memory statistics."""
    from jax._src import compiler

    original = compiler.compile_or_get_cached

    def compile_or_get_cached(backend, computation, *args, **kwargs):
        from jax._src.interpreters import mlir

        name = mlir.ir.StringAttr(computation.operation.attributes["sym_name"]).value
        start = time.monotonic()
        entry = {"name": name, "at": seconds()}
        try:
            executable = original(backend, computation, *args, **kwargs)
        except Exception as error:  # noqa: BLE001  recorded, then raised as it was
            entry["refused"] = " ".join(str(error).split())[:600]
            RESULT["executables"].append(entry)
            raise
        entry["seconds"] = round(time.monotonic() - start, 2)
        try:
            stats = executable.get_compiled_memory_stats()
            for field in ("argument", "output", "alias", "temp", "generated_code"):
                entry[f"{field}_bytes"] = int(getattr(stats, f"{field}_size_in_bytes"))
            entry["host_temp_bytes"] = int(getattr(stats, "host_temp_size_in_bytes", 0))
        except Exception as error:  # noqa: BLE001  a backend without the statistics
            entry["no_stats"] = str(error)[:200]
        RESULT["executables"].append(entry)
        return executable

    compiler.compile_or_get_cached = compile_or_get_cached


def substitute_rollout() -> None:
    """vLLM's module an empty one, and RLCluster's rollout engine the actor sampler."""
    import importlib

    from actor_sampler import ActorSampler
    from tunix.rl import rl_cluster

    name = "maxtext.integration.vllm.maxtext_vllm_rollout"
    stub = types.ModuleType(name)
    stub.MaxTextVllmRollout = ActorSampler  # train_rl names it; RLCluster gets ActorSampler either way
    sys.modules[name] = stub
    setattr(importlib.import_module("maxtext.integration.vllm"), "maxtext_vllm_rollout", stub)
    original = rl_cluster.RLCluster.__init__

    def init(self, *args, cluster_config, **kwargs):
        engine = cluster_config.rollout_engine
        RESULT["replaced_rollout"] = getattr(getattr(engine, "func", engine), "__name__", str(engine))
        original(self, *args, cluster_config=dataclasses.replace(cluster_config, rollout_engine=ActorSampler),
                 **kwargs)

    rl_cluster.RLCluster.__init__ = init


def allocator() -> dict:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return {key: stats.get(key) for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")}


def stopped(signum, frame) -> None:
    """smoke.py's SIGTERM at a step's timeout: end through main's finally, which writes the result."""
    raise SystemExit(f"stopped by signal {signum} at the step's timeout")


def main(model_dir: str, maxtext_name: str, module: str, args: list[str]) -> None:
    signal.signal(signal.SIGTERM, stopped)
    logging.getLogger().addHandler(LineClock())
    maxtext_step.use_commit_file_atomicity()
    maxtext_step.use_tiny_config(model_dir, maxtext_name)
    record_compiles()
    substitute_rollout()
    import jax

    RESULT["devices"] = [f"{device.platform}:{device.device_kind}" for device in jax.devices()]
    RESULT["imported_at"] = seconds()
    if json.loads(os.environ.get("PROBE_PATCHES", "[]")):
        import maxtext

        _, RESULT["patches"] = maxtext_step.patched_utils_rl(str(Path(maxtext.__file__).parents[1]))
    maxtext_step.import_its_imports(module)
    maxtext_step.settle_heap()
    sys.argv = [module, *args]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if isinstance(done.code, str):
            RESULT["error"] = done.code
    except BaseException as error:  # noqa: BLE001  the report keeps the error; the exit code says it failed
        RESULT["error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:1500]}"
        code = 1
    finally:
        from actor_sampler import ActorSampler

        RESULT.update(exit=code, seconds=seconds(), allocator=allocator(), rollouts=ActorSampler.calls)
        Path(os.environ["SMOKE_RESULT"]).write_text(json.dumps(RESULT, indent=1))
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
