"""The kubelet of the fake Kubernetes API's Job pods (peers/job_life.py): it mounts the pod's ConfigMap
volumes as files and runs its container's command, `tpu-rl drive ...`, as the run's driver.

- ProcessKubelet: as a real local process, `python -m tpu_rl.scripts.cli drive ...` forked from a warm
  interpreter (tests/forked_driver.py), with the container's env on top of the test's endpoints, in a
  session of its own, no terminal (stdin /dev/null, output a pipe), its output the pod's log, its
  exit status the container's (a signal: 128 + its number, as the kubelet reports SIGKILL as 137). It
  starts with SIGTERM ignored, as PID 1 of a container without a handler: the kernel sends PID 1 of a
  PID namespace only the signals it handles (pid_namespaces(7)).
- InProcessKubelet: the same command's function (tpu_rl.scripts.cli.drive.drive_to) on a thread of the test's
  process, for the in-process CLI tests that replace the Session's clock (tests/cli_helpers.py).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import threading
import traceback
from pathlib import Path

from forked_driver import ForkedDriver, warm_drivers
from peers.fixtures import REPO


def mount(kube, pod: dict) -> dict[str, Path]:
    """The pod's ConfigMap volumes as directories of files (each key a file), by mount path."""
    root = Path(tempfile.mkdtemp(prefix="kubelet-"))
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    mounts = {}
    for mounted in pod["spec"]["containers"][0].get("volumeMounts") or []:
        source = volumes[mounted["name"]].get("configMap")
        if source is None:
            continue
        directory = root / mounted["name"]
        directory.mkdir()
        for key, value in kube.configmaps[source["name"]]["data"].items():
            (directory / key).write_text(value)
        mounts[mounted["mountPath"]] = directory
    return mounts


def local_args(pod: dict, mounts: dict[str, Path]) -> list[str]:
    """`tpu-rl`'s arguments (the container's args, after the command that installs or starts it), its
    mount paths replaced by the mounted directories."""
    args = []
    for arg in pod["spec"]["containers"][0]["args"]:
        for path, directory in mounts.items():
            arg = arg.replace(path, str(directory))
        args.append(arg)
    return args


class ProcessKubelet:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env  # the test's endpoints, KUBECONFIG, PATH...: what the cluster would provide
        self.processes: dict[str, ForkedDriver] = {}
        self.started: list[str] = []  # pod names, in order
        self.evicted: set[str] = set()
        self.closed = False

    def start(self, kube, job: dict, pod: dict) -> None:
        if self.closed:  # the test is over: a pod the Job controller makes now never starts
            return
        name = pod["metadata"]["name"]
        mounts = mount(kube, pod)
        container_env = {item["name"]: item["value"] for item in pod["spec"]["containers"][0].get("env") or []}
        process = warm_drivers().start(["-m", "tpu_rl.scripts.cli", *local_args(pod, mounts)], cwd=REPO,
                                       env={**self.env, **container_env})
        self.processes[name] = process
        self.started.append(name)
        threading.Thread(target=self._watch, args=(kube, name, process, mounts), daemon=True).start()

    def _watch(self, kube, name: str, process: ForkedDriver, mounts: dict[str, Path]) -> None:
        kube.pod_running(name)
        for line in iter(process.stdout.readline, b""):
            kube.pod_log(name, line.decode(errors="replace"))
        code = process.wait()
        for directory in mounts.values():
            shutil.rmtree(directory.parent, ignore_errors=True)
        kube.pod_ended(name, 128 - code if code < 0 else code, disrupted=name in self.evicted)

    def kill(self, pod: str, sig: int = signal.SIGKILL) -> None:
        """The container dies (a node lost, an OOM kill): the Job controller decides what follows."""
        self.processes[pod].send_signal(sig)

    def evict(self, pod: str) -> None:
        """An eviction or a node upgrade: the pod gets DisruptionTarget and its container SIGTERM."""
        self.evicted.add(pod)
        self.processes[pod].send_signal(signal.SIGTERM)

    def stop(self, pod: str, grace: float) -> None:
        """The pod is deleted: SIGTERM, then SIGKILL after its grace period, as the kubelet does."""
        process = self.processes.get(pod)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def close(self) -> None:
        self.closed = True
        for process in list(self.processes.values()):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


class _PodLog:
    """A file-like sink that appends to a pod's log in the fake API."""

    def __init__(self, kube, pod: str) -> None:
        self.kube, self.pod = kube, pod

    def write(self, text: str) -> int:
        self.kube.pod_log(self.pod, text)  # dropped once the pod is deleted
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class InProcessKubelet:
    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def start(self, kube, job: dict, pod: dict) -> None:
        from tpu_rl.scripts.cli.drive import drive_to

        name = pod["metadata"]["name"]
        mounts = mount(kube, pod)
        args = local_args(pod, mounts)
        assert args[:2] == ["drive", "--request"], args

        def run() -> None:
            kube.pod_running(name)
            log = _PodLog(kube, name)
            try:
                code = drive_to(log, Path(args[2]), in_cluster=False)
            except BaseException:  # noqa: BLE001 - a bug: its traceback in the log, as a crashed container's
                kube.pod_log(name, traceback.format_exc())
                code = 1
            for directory in mounts.values():
                shutil.rmtree(directory.parent, ignore_errors=True)
            kube.pod_ended(name, code)

        thread = threading.Thread(target=run, daemon=True)
        self.threads.append(thread)
        thread.start()

    def stop(self, pod: str, grace: float) -> None:
        pass  # a thread cannot be killed: its pod and log are gone, and what it writes or ends with is dropped

    def close(self) -> None:
        for thread in list(self.threads):
            thread.join(timeout=60)

