"""The real entry points (`tpu-rl`, `python -m tpu_rl.stacks.app`) run for many command lines without paying
Python's start-up and imports for each one.

A warm interpreter imports the CLI and the cloud libraries once, then forks one child per command line.
The child takes that command line's environment, working directory and stdin, runs the entry point the
way the process would (the console script file itself, or the module as `__main__`), and exits with its
exit code. Each command line still has a process of its own (fresh module state, its own exit code and
output), and the fork costs milliseconds where a start-up costs seconds. `run` has the signature of
`subprocess.run` for these calls, so a test can switch between the two; tests that are about the process
itself (start-up time, a terminal) keep `subprocess`.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from peers.fixtures import REPO, VENV_BIN, clean_environment

# The project's packages whose modules the commands load after their checks (pipeline steps, cloud
# clients, run data, costs): ~80 modules, ~0.06 s of CPU a command when each child imported them.
WARM_PACKAGES = ("scripts/pipeline", "scripts/cloud", "scripts/rundata", "recipes/costs")


def _modules_of(package: str) -> list[str]:
    """The module names of every file of one of the project's packages (its tpu_rl.<package> names)."""
    names = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(("tpu_rl", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return names


# What the children would otherwise import each time: the CLI and the cloud clients its commands load
# after their checks. Not stacks/cdktf: jsii starts a node process, which must not be shared by a fork.
# kubernetes.client loads an API class (and with it its ~270 models, ~0.6 s of CPU) on first use, and
# rundata loads tensorboard's event reader when a command reads the curves: named here, so no child pays them.
WARM_MODULES = ("tpu_rl.scripts.cli", "tpu_rl.scripts.cli.cloud", "tpu_rl.scripts.cli.core", "tpu_rl.scripts.cli.offline", "tpu_rl.scripts.cli.reports",
                "tpu_rl.scripts.cli.views", "kubernetes", "google.cloud.storage", "google.cloud.compute_v1",
                "google.cloud.tpu_v2", "google.cloud.secretmanager", "gcp_storage_emulator", "yaml",
                *(f"kubernetes.client.api.{api}_api" for api in ("core_v1", "batch_v1", "custom_objects", "version")),
                *(f"tensorboard.backend.event_processing.{name}" for name in ("event_accumulator", "io_wrapper")),
                "rich.console", "rich.table", *(name for package in WARM_PACKAGES for name in _modules_of(package)))
# The project's namespace (all its packages), imported afresh in a child whose PYTHONPATH puts a patched copy ahead of them.
OWN_PACKAGES = ("tpu_rl",)

# What every warm interpreter runs first: the imports, and `before`, which a child runs before its entry point.
_PRELUDE = r'''
import importlib, importlib.util, json, os, sys

spec = importlib.util.spec_from_file_location("forked_step", sys.argv[3])
forked = importlib.util.module_from_spec(spec)
spec.loader.exec_module(forked)
# numpy (tensorboard's reader loads it) starts OpenBLAS's thread pool at import unless told one thread, and a
# fork of a process with a thread is unsafe; the children get their own environment back (forked_step).
blas = os.environ.get("OPENBLAS_NUM_THREADS")
os.environ["OPENBLAS_NUM_THREADS"] = "1"
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
if blas is None:
    del os.environ["OPENBLAS_NUM_THREADS"]
else:
    os.environ["OPENBLAS_NUM_THREADS"] = blas
OWN = tuple(json.loads(sys.argv[2]))
assert "jsii" not in sys.modules, "a warm module imported jsii, whose node process a fork would share"
assert len(os.listdir("/proc/self/task")) == 1, "a warm module started a thread: a fork would not be safe"


def paths(env):
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


# What the project's modules read while they are imported: the proxy variables (urllib's getproxies, when
# scripts/cloud/hf_hub.py builds its opener).
def read_at_import(env):
    return {name: value for name, value in env.items() if name.lower().endswith("_proxy")}


WARM_PATHS, WARM_READ = paths(os.environ), read_at_import(os.environ)


def before(request):
    extra = paths(request["env"])
    if extra:
        sys.path[:0] = extra
    # A patched copy of a package ahead of the warm one, or another value of what an import reads: the
    # project's modules are imported afresh, as a fresh interpreter would see them. The warm interpreter's
    # own PYTHONPATH (this checkout, as every clean environment has it) needs no second import.
    if (extra and extra != WARM_PATHS) or read_at_import(request["env"]) != WARM_READ:
        for name in [n for n in sys.modules if n.split(".")[0] in OWN]:
            del sys.modules[name]
'''
# One command line at a time, from stdin; each reply, its exit code and output, a line on stdout.
_SERVER = _PRELUDE + r'''
import tempfile

scratch = tempfile.mkdtemp(prefix="forked-cli-")
requests = sys.stdin.buffer
replies = sys.stdout
for line in requests:
    request = json.loads(line)
    out = os.path.join(scratch, "out")
    err = os.path.join(scratch, "err")
    for path in (out, err):
        open(path, "w").close()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            forked.run_forked({**request, "stdout": out, "stderr": err}, before=lambda: before(request))
        finally:
            os._exit(70)
    code, _ = forked.wait_child(pid, request["timeout"])
    with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
        replies.write(json.dumps({"code": code, "stdout": o.read(), "stderr": e.read()}) + "\n")
    replies.flush()
'''


def warm_argv(server: str, *args: str, modules: tuple[str, ...] = WARM_MODULES) -> list[str]:
    """The command line of a warm interpreter that imports `modules` and runs `server` (_PRELUDE and its loop),
    `args` after the prelude's."""
    return [sys.executable, "-P", "-c", server, json.dumps(modules), json.dumps(OWN_PACKAGES),
            str(Path(__file__).with_name("forked_step.py")), *args]


class WarmInterpreter:
    """One warm interpreter: runs one command line at a time."""

    def __init__(self, home: Path):
        env = {**clean_environment(home), "PYTHONPATH": str(REPO)}
        self.errors = tempfile.TemporaryFile(mode="w+")  # its own stderr: why it died, if it does
        self.process = subprocess.Popen(warm_argv(_SERVER), cwd=home, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.errors, text=True)

    def run(self, argv: list[str], *, cwd: Path, env: dict[str, str], input: str | None,
            timeout: float) -> subprocess.CompletedProcess:
        request = {"argv": _entry(argv), "cwd": str(cwd), "env": env, "input": input or "", "timeout": timeout}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:
            self.errors.seek(0)
            raise AssertionError(f"the warm interpreter died running {argv}:\n{self.errors.read()[-3000:]}")
        reply = json.loads(reply)
        if reply["code"] is None:
            raise subprocess.TimeoutExpired(argv, timeout, reply["stdout"], reply["stderr"])
        return subprocess.CompletedProcess(argv, reply["code"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.errors.close()


def _entry(argv: list[str]) -> list[str]:
    """[script, args...] for the console script, ["-m", module, args...] for `python -m module`."""
    if Path(argv[0]).name.startswith("python") and argv[1] == "-m":
        return argv[1:]
    assert Path(argv[0]).parent == VENV_BIN, f"not an entry point of the venv: {argv[0]}"
    return [str(VENV_BIN / Path(argv[0]).name), *argv[1:]]


class WarmPool:
    """A few warm interpreters, for command lines run side by side from threads; `run` as subprocess.run."""

    def __init__(self, size: int):
        self._home = Path(tempfile.mkdtemp(prefix="warm-home-"))
        self._all = [WarmInterpreter(self._home) for _ in range(size)]
        self._free: queue.Queue[WarmInterpreter] = queue.Queue()
        for interpreter in self._all:
            self._free.put(interpreter)

    def run(self, argv: list[str], *, cwd: Path, env: dict[str, str], input: str | None = None,
            timeout: float = 300, **_ignored) -> subprocess.CompletedProcess:
        interpreter = self._free.get()
        try:
            return interpreter.run(argv, cwd=cwd, env=env, input=input, timeout=timeout)
        finally:
            self._free.put(interpreter)

    def close(self) -> None:
        for interpreter in self._all:
            interpreter.close()


@pytest.fixture(scope="session")
def warm_cli():
    """One warm interpreter for every module of a worker that forks command lines (bad input, settings
    needs, secret hygiene): its start-up, ~2 s of CPU, is paid once, and the forks need no second one to
    keep two cores busy under `make test`'s three workers."""
    pool = WarmPool(1)
    yield pool
    pool.close()
