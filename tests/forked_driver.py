"""The fake kubelet's driver containers (peers/kubelet.py ProcessKubelet) forked from a warm interpreter
that has imported the CLI (tests/forked_cli.py's imports), not started as fresh interpreters: each start paid
~1.9 s of CPU, mostly imports, and a test run starts a dozen and more.

A child gets what the container gave a fresh `python -m tpu_rl.scripts.cli drive ...`: its own session and
process group, SIGTERM ignored until its handler is set (PID 1 of its container), stdin /dev/null, stdout and
stderr one pipe the kubelet reads line by line as they are written, its environment and working directory,
stdio buffered as that environment's PYTHONUNBUFFERED makes a fresh interpreter's, and its exit status. The
warm interpreter stays single-threaded (each fork checks) and only forks and reaps: the children run side by
side, each start and each exit a message on one socket, the output pipe's write end passed with the start.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

from forked_cli import _PRELUDE, warm_argv
from peers.fixtures import REPO, clean_environment

START_SECONDS = 120  # the warm interpreter's imports (~2 s of CPU) on two busy cores, then a fork

_DRIVERS = _PRELUDE + r'''
import io, select, signal, socket

channel = socket.socket(fileno=int(sys.argv[4]))
wake_read, wake_write = os.pipe()
os.set_blocking(wake_write, False)
signal.set_wakeup_fd(wake_write)
signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select: a child ended
children = {}  # pid: the request's id


def fresh_stdio(env):
    """sys.std* over fds 0-2 as a fresh interpreter makes them for `env` (PYTHONUNBUFFERED: unbuffered)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), write_through=unbuffered,
                                  line_buffering=fd == 2 and not unbuffered,
                                  errors="backslashreplace" if fd == 2 else None)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def start(request, output):
    assert len(os.listdir("/proc/self/task")) == 1, "the warm interpreter has a thread: a fork would not be safe"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (channel.detach(), wake_read, wake_write):
                os.close(fd)
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # PID 1 of a container without a handler
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(output, 1)
            os.dup2(output, 2)
            for fd in (null, output):
                os.close(fd)
            fresh_stdio(request["env"])
            forked.run_forked(request, before=lambda: before(request))
        finally:
            os._exit(70)
    os.close(output)
    children[pid] = request["id"]
    channel.send(json.dumps({"id": request["id"], "pid": pid}).encode())


def reap():
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        channel.send(json.dumps({"id": children.pop(pid), "code": os.waitstatus_to_exitcode(status)}).encode())


while True:
    ready, _, _ = select.select([channel, wake_read], [], [])
    if wake_read in ready:
        os.read(wake_read, 4096)
    reap()
    if channel in ready:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 1)
        if not message:  # the kubelet's process has ended: its containers go with it
            break
        start(json.loads(message), fds[0])
for pid in children:
    os.kill(pid, signal.SIGKILL)
'''


class ForkedDriver:
    """One driver container's process, as much of subprocess.Popen as the kubelet uses."""

    def __init__(self, argv: list[str], output: int) -> None:
        self.args = argv
        self.stdout = os.fdopen(output, "rb")
        self.pid: int | None = None
        self.returncode: int | None = None
        self.started, self.ended = threading.Event(), threading.Event()
        self.lost = ""  # why its exit status will never come: the warm interpreter died

    def poll(self) -> int | None:
        if self.lost:
            raise AssertionError(self.lost)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # as Popen: never a signal to a pid that may be another process's by now
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmDrivers:
    """The warm interpreter, and the drivers it has forked."""

    def __init__(self) -> None:
        home = Path(tempfile.mkdtemp(prefix="warm-drivers-"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.errors = tempfile.TemporaryFile(mode="w+")  # its own output: why it died, if it does
        self.process = subprocess.Popen(
            warm_argv(_DRIVERS, str(theirs.fileno())), cwd=home, pass_fds=[theirs.fileno()],
            env={**clean_environment(home), "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL, stdout=self.errors,
            stderr=self.errors)
        theirs.close()
        self.channel = ours
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.drivers: dict[int, ForkedDriver] = {}
        threading.Thread(target=self._replies, name="warm-drivers", daemon=True).start()

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> ForkedDriver:
        """`python -m MODULE ARGS...` (argv after `python`) as the container runs it; returns once it runs."""
        read, write = os.pipe()
        driver = ForkedDriver(argv, read)
        with self.lock:
            number = next(self.ids)
            self.drivers[number] = driver
            request = {"id": number, "argv": argv, "cwd": str(cwd), "env": env}
            socket.send_fds(self.channel, [json.dumps(request).encode()], [write])
        os.close(write)  # the child's copy is the only writer: the pipe ends when the driver does
        if not driver.started.wait(START_SECONDS) or driver.lost:
            raise AssertionError(driver.lost or f"the warm interpreter forked no driver within {START_SECONDS} s")
        return driver

    def _replies(self) -> None:
        while message := self.channel.recv(1 << 16):
            reply = json.loads(message)
            with self.lock:
                driver = self.drivers[reply["id"]] if "pid" in reply else self.drivers.pop(reply["id"])
            if "pid" in reply:
                driver.pid = reply["pid"]
                driver.started.set()
            else:
                driver.returncode = reply["code"]
                driver.ended.set()
        self.errors.seek(0)
        why = f"the warm interpreter of the drivers died:\n{self.errors.read()[-3000:]}"
        with self.lock:
            for driver in self.drivers.values():
                driver.lost = why
                driver.started.set()
                driver.ended.set()

    def close(self) -> None:
        self.channel.shutdown(socket.SHUT_RDWR)  # its children are killed as it ends
        self.process.wait(timeout=30)
        self.channel.close()
        self.errors.close()


_warm: list[WarmDrivers] = []
_warm_lock = threading.Lock()


def warm_drivers() -> WarmDrivers:
    """This process's warm interpreter for drivers, started at its first driver (most tests start none)."""
    with _warm_lock:
        if not _warm:
            _warm.append(WarmDrivers())
            atexit.register(_warm[0].close)
        return _warm[0]
