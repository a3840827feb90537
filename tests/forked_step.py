"""One command line run in a process forked from a warm interpreter, as a fresh interpreter would run it:
the child's side and the waiting for it, shared by tests/forked_cli.py (the CLI, in the project's venv) and
tests/maxtext_cpu/warm.py (MaxText's steps, in its venvs). The standard library only, loaded from its file
(importlib's spec_from_file_location), so that it adds nothing to the children's sys.path.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import time
import traceback


def run_forked(request: dict, env_extra: dict[str, str] | None = None, before=None) -> None:
    """In the forked child: the request's {"argv", "cwd", "env", "input", "stdout", "stderr"} (no "input": the
    caller has set the child's stdio itself), then its entry point (argv ["-m", module, ...] or [script, ...]) as
    `python` runs it, and the end a fresh interpreter has (threads joined, atexit handlers run, streams
    flushed); exits with its code, never returns. `env_extra` is added to the environment, `before()` runs just
    before the entry point."""
    code = 70
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(env_extra or {})
        if "input" in request:  # absent: the caller has set the child's stdio itself
            stdin = tempfile.TemporaryFile()
            stdin.write((request["input"] or "").encode())
            stdin.seek(0)
            os.dup2(stdin.fileno(), 0)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            os.dup2(os.open(request["stdout"], flags), 1)
            os.dup2(os.open(request["stderr"], flags), 2)
            sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        if before is not None:
            before()
        code = _run_entry(list(request["argv"]))
    except BaseException:  # noqa: BLE001  reported as the process's exit, as an interpreter would
        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            import threading

            threading._shutdown()
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                stream.flush()
        finally:
            os._exit(code & 0xFF)


def _run_entry(argv: list[str]) -> int:
    import runpy

    try:
        if argv[0] == "-m":
            sys.path.insert(0, os.getcwd())
            sys.argv = ["-m", *argv[2:]]  # as `python -m`: its first item becomes the module's path
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(argv[0]))
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    return 0


def wait_child(pid: int, timeout: float):
    """(exit code, or None when killed at `timeout` seconds; its resource usage) of a forked child."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            return None, usage
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
