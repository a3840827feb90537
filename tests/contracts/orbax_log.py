"""orbax's log lines around a checkpoint save, as MaxText's RL trainer writes them, for fixtures: the
format strings of orbax-checkpoint's CheckpointManager (orbax/checkpoint/checkpoint_manager.py) at the
version installed with each MaxText wheel (orbax-checkpoint 0.12.2 with 0.2.4, 0.12.0 with 0.2.3), the
line of each logging.info call (absl's prefix shows it), and absl's prefix (tests/contracts/tunix_log.py).
tests/test_saving_phase.py checks every format string and line against the installed sources."""

from __future__ import annotations

from contracts.tunix_log import ABSL_PREFIX_FORMAT

ORBAX_VERSION = {"0.2.4": "0.12.2", "0.2.3": "0.12.0"}
SOURCE = "orbax/checkpoint/checkpoint_manager.py"
# name: (format, {maxtext: line of the logging.info call})
SAVE_FORMATS = {
    "save": ("[process=%s] Saving checkpoint at step %d", {"0.2.4": 1508, "0.2.3": 1512}),
    "save on preemption": ("[process=%s] Saving checkpoint at step %d due to preemption.",
                           {"0.2.4": 1414, "0.2.3": 1421}),
    "handed to the background": ("[process=%s][thread=%s][step=%s] Starting CheckpointManager Save Finalize thread=%s",
                                 {"0.2.4": 1567, "0.2.3": 1560}),
    "synchronous save done": ("[process=%s][thread=%s][step=%s] Finished synchronous save.",
                              {"0.2.4": 1588, "0.2.3": 1581}),
    "waiting": ("[process=%s][thread=%s][step=%s][wait_until_finished] Waiting for Save Finalize thread (%s) to "
                "complete.", {"0.2.4": 2042, "0.2.3": 2026}),
    "done waiting": ("[process=%s][thread=%s][step=%s][wait_until_finished] Done waiting for Save Finalize thread "
                     "(%s) running at step=%d.", {"0.2.4": 2054, "0.2.3": 2038}),
    "nothing to wait for": ("[process=%s][thread=%s][wait_until_finished] No Save Finalize thread to wait for. "
                            "Returning.", {"0.2.4": 2031, "0.2.3": 2015}),
}
FINALIZE_THREAD = "save_finalize"  # the name save() gives its finalize thread


def save_line(name: str, step: int, maxtext: str = "0.2.4", second: int = 10) -> str:
    """One of SAVE_FORMATS as the head logs it: process 0 (a Pathways client is one process), thread
    MainThread, with absl's INFO prefix."""
    fmt, lines = SAVE_FORMATS[name]
    args = {"save": (0, step), "save on preemption": (0, step),
            "handed to the background": (0, "MainThread", step, FINALIZE_THREAD),
            "synchronous save done": (0, "MainThread", step),
            "waiting": (0, "MainThread", step, FINALIZE_THREAD),
            "done waiting": (0, "MainThread", step, FINALIZE_THREAD, step),
            "nothing to wait for": (0, "MainThread")}[name]
    prefix = ABSL_PREFIX_FORMAT % ("I", 8, 5, 12, 35, second, 345678, 140234, "checkpoint_manager.py",
                                   lines[maxtext], "")
    return prefix + fmt % args
