"""A warm interpreter of a MaxText test venv: imports what the steps import once, then runs each step in a
process of its own, forked from it (inside the MaxText venv).

    python tests/maxtext_cpu/warm.py SOCKET

Each step process of the chains paid ~6 s of CPU for the same imports (torch, jax, transformers, MaxText's
conversion modules). Here they are imported once; a step is forked from this process, so it still has
its own process (its module state, exit code, resource usage), as tests/forked_cli.py does for the CLI.

What a fork shares with the imports, and why a step still runs as a fresh process would:
- the environment the imports read is the steps' own: the client starts this with a step's environment,
  a request whose environment differs in any name but those read at run time (RUN_TIME) is refused, not
  run, and what the imports set in the environment is set in each step's;
- no JAX backend exists yet (checked): XLA_FLAGS, which gives train its devices, is read when the step
  creates one;
- the step modules themselves are not imported (to_huggingface defines absl flags at import), nor
  utils_rl, which the train probe replaces with the recipe's patched copy before anything imports it.

A connection carries one request line {"script", "argv", "env", "cwd", "stdout", "stderr", "input",
"timeout"}; a supervisor forked for it forks the step, waits for it (killing it at the timeout) and
answers {"code", "cpu_seconds", "maxrss_kb"}, the step's own os.wait4 usage. A step starts and ends as a
fresh interpreter does (tests/forked_step.py run_forked: threads joined, atexit handlers run).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The forked child's side, shared with the CLI's warm interpreter (tests/forked_step.py), loaded from its
# file so that the steps' sys.path is not changed.
_spec = importlib.util.spec_from_file_location("forked_step", os.path.join(os.path.dirname(HERE), "forked_step.py"))
FORKED = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FORKED)
# Modules whose top-level imports are imported here (run.py import_its_imports), not the modules.
STEP_MODULES = ("maxtext.checkpoint_conversion.to_maxtext", "maxtext.checkpoint_conversion.to_huggingface")
LIBRARIES = ("torch", "jax", "transformers", "flax.nnx", "safetensors")
# Never imported here: the train probe swaps in a patched copy before anything imports it.
NOT_WARMED = "maxtext.trainers.post_train.rl.utils_rl"
# What a step's environment may have that this process's did not: names read once the step runs (the
# probe's inputs; XLA_FLAGS when the step starts a JAX backend). Any other difference is refused.
RUN_TIME = ("PROBE_", "XLA_FLAGS")


def compared_env(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if not name.startswith(RUN_TIME)}


def warm_up() -> None:
    import importlib

    sys.path.insert(0, HERE)
    import run  # noqa: PLC0415  tests/maxtext_cpu/run.py (imports nothing at its top)

    for module in STEP_MODULES:
        run.import_its_imports(module)
    for module in LIBRARIES:
        importlib.import_module(module)
    from jax._src import xla_bridge

    assert not xla_bridge.backends_are_initialized(), "an import started a JAX backend: XLA_FLAGS would be ignored"
    assert NOT_WARMED not in sys.modules, f"an import loaded {NOT_WARMED}, which the probe patches first"
    run.settle_heap()


def supervise(connection: socket.socket, started_env: dict[str, str], set_by_imports: dict[str, str]) -> None:
    """In the supervisor forked for one connection: run its request's step and answer how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request = json.loads(connection.makefile("r").readline())
    if compared_env(request["env"]) != compared_env(started_env):
        differ = sorted(set(compared_env(request["env"]).items()) ^ set(compared_env(started_env).items()))
        refused = {"refused": f"the environment differs beyond {RUN_TIME}: {differ}"}
        connection.sendall((json.dumps(refused) + "\n").encode())
        return
    pid = os.fork()
    if pid == 0:
        connection.close()
        request = {**request, "argv": [request["script"], *request["argv"]]}
        FORKED.run_forked(request, env_extra=set_by_imports)  # e.g. pyconfig's HF_DATASETS_DISABLE_DILL
    code, usage = FORKED.wait_child(pid, request["timeout"])
    code = -9 if code is None else code
    answer = {"code": code, "cpu_seconds": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}
    connection.sendall((json.dumps(answer) + "\n").encode())


def main(path: str) -> None:
    import select

    started_env = dict(os.environ)
    warm_up()
    set_by_imports = {name: value for name, value in os.environ.items() if started_env.get(name) != value}
    # the steps' own inputs are the request's alone
    assert not any(name.startswith(RUN_TIME) for name in set_by_imports), f"an import set {set_by_imports}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)  # a socket left by an interpreter that was killed
    listener.bind(path)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors are reaped as they end
    print("ready", flush=True)
    while True:
        # The client holds this process's stdin: its end (the test process gone) ends this one too. Read
        # on the raw descriptor, with no thread, so a fork inherits no lock another thread holds.
        ready, _, _ = select.select([listener, 0], [], [])
        if 0 in ready and not os.read(0, 1024):
            return
        if listener not in ready:
            continue
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                supervise(connection, started_env, set_by_imports)
            finally:
                os._exit(0)
        connection.close()


if __name__ == "__main__":
    main(sys.argv[1])
