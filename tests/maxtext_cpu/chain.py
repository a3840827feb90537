"""A recipe's own convert, train and export commands, run in MaxText's real code on a CPU.

The commands are the ones `tpu-rl render` writes (tpu_rl.jobs.maxtext.maxtext_commands, which the manifests and
the VM script are rendered from; tests/test_maxtext_real.py checks that the rendered files contain them).
Only what a CPU test must change is changed (cpu_argv): gs://BUCKET/ becomes a local directory with the
same object layout, a Hugging Face hub id becomes the tiny local model, the tiny sizes are appended (with
override_model_config=True), and a step that would join a TPU slice's hosts (train; the VM recipe's
export) skips jax.distributed, as one CPU process has none to join, and JAX's compilation cache is
kept beside the venvs (xla_cache_dir). The environment adds HF_HUB_OFFLINE=1, a dummy HF_TOKEN, and for train the recipe's
device count of fake CPU devices.

Each step runs in a process of its own of the release's venv (.venv-maxtext-<version>, `make install`),
forked from a warm interpreter of that venv that has imported what the steps import (warm.py: the
imports cost ~6 s of CPU a step), and is measured with os.wait4: wall and CPU time and the process's
peak resident memory. The steps of a release share one HF_HOME (hf_home), as the warm interpreter's
imports read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import atexit
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe
from tpu_rl.scripts.fit.environment import cache_root, constraints

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DUMMY_TOKEN = "hf_dummy_token_for_offline_tests"
STEP_TIMEOUT = 600  # seconds; a step of a tiny model that takes longer is hung
# Outside the clone, as the venvs are (scripts/fit/environment.py), so that a clean clone reuses them.
CACHE = cache_root()
TINY_CACHE = CACHE / "tiny-models"


def xla_cache_dir(version: str) -> Path:
    """JAX's own persistent compilation cache, kept beside the venvs: its key is the program, the compile
    options, jaxlib and the devices, so a hit is the same executable (docs/development.md). MaxText's
    config points JAX at its jax_cache_dir (base.yml: ~/jax_cache), which wins over JAX's environment
    variable, so every step passes it as an argument (cpu_argv)."""
    return CACHE / "xla" / version


def hf_home(version: str) -> Path:
    """The HF_HOME of a release's steps in this test process: one, as the warm interpreter's imports
    (huggingface_hub.constants) read it; the export's offline hub cache lies under it (run.py seed_hub_cache)."""
    return _scratch() / f"hf-{version}"


# What a step keeps of the test process's environment: where things are and the locale, not the
# pytest, cloud or library settings the test process holds (which change from test to test).
KEPT_ENV = ("PATH", "HOME", "USER", "TMPDIR", "TZ", "LANG", "LC_")


def step_env(version: str) -> dict[str, str]:
    """The environment of a release's steps: the test process's paths and locale, offline, with a dummy
    token and the CPU backend."""
    env = {k: v for k, v in os.environ.items() if k.startswith(KEPT_ENV)}
    env.update(HF_HUB_OFFLINE="1", HF_TOKEN=DUMMY_TOKEN, HF_HOME=str(hf_home(version)), JAX_PLATFORMS="cpu",
               TOKENIZERS_PARALLELISM="false", TF_CPP_MIN_LOG_LEVEL="2")
    # Every program is kept: most of a tiny model's compile in well under JAX's 1 s default.
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return env


_SCRATCH: list[Path] = []
_SCRATCH_LOCK = threading.Lock()
_WARM: dict[str, "WarmVenv | AssertionError"] = {}
_WARM_LOCKS: dict[str, threading.Lock] = {}  # one per release, so two releases start side by side


def _scratch() -> Path:
    with _SCRATCH_LOCK:
        if not _SCRATCH:
            _SCRATCH.append(Path(tempfile.mkdtemp(prefix="maxtext-cpu-")))
            atexit.register(shutil.rmtree, _SCRATCH[0], True)
        return _SCRATCH[0]


class WarmVenv:
    """A release's warm interpreter (warm.py), started with its steps' environment."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.socket = _scratch() / f"warm-{version}.sock"
        self.errors = (_scratch() / f"warm-{version}.log").open("w")
        self.process = subprocess.Popen([str(venv_python(version)), str(HERE / "warm.py"), str(self.socket)],
                                        env=step_env(version), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.errors, cwd=_scratch(), bufsize=0)  # select sees every line
        deadline = time.monotonic() + STEP_TIMEOUT
        line = b""
        while line != b"ready\n":  # the imports print lines of their own first
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = self.process.stdout.readline() if ready else b""
            if not line:
                self.process.kill()
                raise AssertionError(f"the warm MaxText {version} interpreter did not start:\n{self._log()}")

    def _log(self) -> str:
        return Path(self.errors.name).read_text(errors="replace")[-3000:]

    def run(self, script: Path, argv: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path,
            input: str = "", timeout: float = STEP_TIMEOUT) -> dict | None:
        """Run `script` in a process forked from the warm interpreter: {"code", "cpu_seconds", "maxrss_kb"},
        or None when `env` differs from the steps' beyond the names read at run time (warm.py RUN_TIME)."""
        request = {"script": str(script), "argv": argv, "env": env, "cwd": str(cwd), "stdout": str(stdout),
                   "stderr": str(stderr), "input": input, "timeout": timeout}
        reply, why = "", "no reply"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            try:
                connection.connect(str(self.socket))
                connection.sendall((json.dumps(request) + "\n").encode())
                connection.settimeout(timeout + 60)
                reply = connection.makefile("r").readline()
            except OSError as error:
                why = str(error)
        if not reply:
            raise AssertionError(f"the warm MaxText {self.version} interpreter did not answer ({why}):\n{self._log()}")
        answer = json.loads(reply)
        return None if "refused" in answer else answer

    def close(self) -> None:
        self.process.stdin.close()  # warm.py ends when its stdin does
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.errors.close()


def close_warm_venvs() -> None:
    """End this process's warm interpreters (~0.9 GB each): a module that used them is done."""
    with _SCRATCH_LOCK:
        locks = dict(_WARM_LOCKS)
    for version, lock in locks.items():
        with lock:
            interpreter = _WARM.pop(version, None)
        if isinstance(interpreter, WarmVenv):
            interpreter.close()


def warm_venv(version: str) -> WarmVenv:
    """The release's warm interpreter of this test process, started on first use."""
    with _SCRATCH_LOCK:
        lock = _WARM_LOCKS.setdefault(version, threading.Lock())
    with lock:
        if version not in _WARM:
            try:
                _WARM[version] = WarmVenv(version)
            except AssertionError as error:
                _WARM[version] = error  # said once; the other steps of the release fail with it at once
                raise
            atexit.register(_WARM[version].close)
        if isinstance(_WARM[version], AssertionError):
            raise _WARM[version]
        return _WARM[version]


def venv_python(version: str) -> Path:
    return REPO / f".venv-maxtext-{version}" / "bin" / "python"


def need_venv(version: str) -> Path:
    """The python of the release's venv. Without it the test cannot run, so it fails naming the venv and
    how to build it, in CI and locally alike: a contract test never passes by skipping."""
    import pytest

    python = venv_python(version)
    if not python.exists():
        pytest.fail(f"{python.parent.parent.name} is missing: `make install` builds it (MaxText {version} for CPU)",
                    pytrace=False)
    return python


def tiny_model(recipe: Recipe) -> Path:
    """The tiny checkpoint of a recipe's model, built by its release's venv once per version of tiny.py and
    of the release's constraints (transformers writes the files). Two test processes may build it at once:
    each in its own scratch directory, and the first rename wins."""
    inputs = (HERE / "tiny.py").read_bytes() + constraints(recipe.maxtext_version).encode()
    digest = hashlib.sha256(inputs).hexdigest()[:12]
    target = TINY_CACHE / recipe.maxtext_version / f"{recipe.model.maxtext_name}-{digest}"
    if (target / "model.safetensors.index.json").exists():
        return target
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    result = in_venv(recipe.maxtext_version, "tiny.py", str(scratch), recipe.model.maxtext_name)
    assert result.returncode == 0, f"building the tiny {recipe.model.maxtext_name} failed:\n{result.stderr[-3000:]}"
    if not (target / "model.safetensors.index.json").exists():
        shutil.rmtree(target, ignore_errors=True)  # a build cut off before its index
        try:
            scratch.rename(target)
        except OSError:  # another process renamed its build first
            pass
    shutil.rmtree(scratch, ignore_errors=True)
    return target


def tiny_overrides(tiny: Path, sizes: dict[str, int] | None = None) -> list[str]:
    """MaxText's overrides for the sizes of the model in `tiny`: `sizes`, or those it was built with."""
    sys.path.insert(0, str(HERE))
    from tiny import maxtext_overrides, recorded_sizes  # noqa: PLC0415  (also runs in the MaxText venv)

    return maxtext_overrides(sizes or recorded_sizes(tiny))


@dataclass
class StepRun:
    step: str
    argv: list[str]
    returncode: int
    seconds: float
    peak_mb: float
    cpu_seconds: float  # user + system time of the step's process (what an idle 2-core CI machine pays)
    log: str
    report: dict = field(default_factory=dict)  # the JSON lines the runner printed, merged

    def line(self) -> str:
        return (f"{self.step:<8} {self.seconds:6.1f} s  cpu {self.cpu_seconds:6.1f} s  peak {self.peak_mb:6.0f} MB  "
                f"exit {self.returncode}")


@dataclass
class Chain:
    recipe: Recipe
    paths: ArtifactPaths
    root: Path  # per recipe: gcs/ (the bucket), logs/, patched-src/
    tiny: Path
    sizes: dict[str, int] | None = None  # the model's sizes when not tiny.py's (bench/chip_smoke)

    @property
    def bucket_dir(self) -> Path:
        return self.root / "gcs" / self.paths.bucket

    def local(self, url: str) -> Path:
        """Where a gs:// URL of this run lives on disk."""
        return self.bucket_dir / url.removeprefix(f"gs://{self.paths.bucket}/")

    def commands(self) -> dict[str, MaxTextCommand]:
        return maxtext_commands(self.recipe, self.paths)

    def cpu_argv(self, step: str, command: MaxTextCommand) -> list[str]:
        hub_ids = {self.recipe.model.hf_repo, self.recipe.model.tokenizer}
        prefix = f"gs://{self.paths.bucket}/"
        out = []
        for arg in command.argv[3:]:
            arg = arg.replace(prefix, f"{self.bucket_dir}/")
            name, eq, value = arg.partition("=")
            if eq and value in hub_ids:
                arg = f"{name}={self.tiny}"
            out.append(arg)
        out += tiny_overrides(self.tiny, self.sizes)
        if not any(arg.startswith("skip_jax_distributed_system=") for arg in out):
            out.append("skip_jax_distributed_system=True")  # one CPU process: no TPU hosts to join
        if not any(arg.startswith("jax_cache_dir=") for arg in out):
            out.append(f"jax_cache_dir={xla_cache_dir(self.recipe.maxtext_version)}")
        return out

    def env(self, step: str) -> dict[str, str]:
        env = step_env(self.recipe.maxtext_version)
        if step == "train":
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={self.recipe.shape.total_chips}"
            env["PROBE_LAST_STEP"] = str(self.recipe.last_step)
            from maxtext_cpu.workload import probe_env  # noqa: PLC0415  the workload's tunix, env, patches

            env.update(probe_env(self.recipe, self.tiny, self.root / "patched-src"))
        return env

    def after_export(self) -> str | None:
        """The export script's step after to_huggingface (jobs/export.py), with the CPU changes."""
        from tpu_rl.jobs.export import carry_vision_script

        vision = self.recipe.model.vision_parts
        if self.recipe.platform != "gke" or not vision or self.recipe.model.use_multimodal:
            return None
        return carry_vision_script(str(self.tiny), f"{self.local(self.paths.hf_export)}/", vision)

    def run(self, step: str, refused_argv: list[str] | None = None) -> StepRun:
        """The step's rendered command with the CPU changes. With `refused_argv` (convert only), the same
        process first runs the module with those arguments (run.py refused_attempt: its report's
        "refused"), then the real command."""
        command = self.commands()[step]
        mode = {"convert": "convert", "train": "probe", "export": "export"}[step]
        full = [str(venv_python(self.recipe.maxtext_version)), str(HERE / "run.py"), mode, str(self.tiny),
                self.recipe.model.maxtext_name, command.module, *self.cpu_argv(step, command)]
        env = self.env(step)
        if refused_argv is not None:
            assert step == "convert", step
            from maxtext_cpu.run import REFUSED_ARGV_ENV  # noqa: PLC0415  (run.py imports nothing at its top)

            env[REFUSED_ARGV_ENV] = json.dumps(refused_argv)
        return self._run(step, full, env)

    def run_script(self, name: str, script: str) -> StepRun:
        """A shell step of a rendered script, with the venv's python3 first on PATH (as in the image)."""
        env = self.env(name)
        env["PATH"] = f"{venv_python(self.recipe.maxtext_version).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        return self._run(name, ["bash", "-euo", "pipefail", "-c", script], env)

    def _run(self, step: str, full: list[str], env: dict[str, str]) -> StepRun:
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{step}-{int(time.time() * 1000)}.log"
        start = time.monotonic()
        returncode, cpu_seconds, maxrss_kb = _in_process(self.recipe.maxtext_version, full, env, self.root, log_path,
                                                         log_path)
        seconds = time.monotonic() - start
        text = log_path.read_text(errors="replace")
        report: dict = {}
        for line in text.splitlines():
            if line.startswith("{") and line.endswith("}"):
                try:
                    report.update(json.loads(line))
                except ValueError:
                    pass
        result = StepRun(step, full, returncode, seconds, maxrss_kb / 1024, cpu_seconds, text, report)
        print(f"[maxtext {self.recipe.maxtext_version} {self.recipe.name}] {result.line()}", file=sys.stderr)
        return result


def _in_process(version: str, full: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path,
                input: str = "", timeout: float = STEP_TIMEOUT) -> tuple[int, float, int]:
    """Run `full` in a process of its own: (exit code, its CPU seconds, its peak RSS in KiB). A python
    script of the venv is forked from the release's warm interpreter when `env` matches the one its
    imports read; anything else is a fresh process. Killed after `timeout` seconds (exit -9)."""
    if full[0] == str(venv_python(version)):
        answer = warm_venv(version).run(Path(full[1]), full[2:], env, cwd, stdout, stderr, input, timeout)
        if answer is not None:
            return answer["code"], answer["cpu_seconds"], answer["maxrss_kb"]
    with stdout.open("a") as out, stderr.open("a") as err:
        process = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT if stderr == stdout else err,
                                   stdin=subprocess.PIPE, env=env, cwd=cwd)
        process.stdin.write(input.encode())
        process.stdin.close()
        returncode, usage = _wait(process, timeout)
    return returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def _wait(process: subprocess.Popen, timeout: float):
    """Wait for the step: (exit code, its resource usage: ru_maxrss in KiB). A step still running after
    `timeout` seconds is killed (exit -9)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage
        time.sleep(0.2)
    process.kill()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = -9
    return -9, usage


def in_venv(version: str, script: str, *args: str, env: dict[str, str] | None = None, input: str = "",
            timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess:
    """Run one of this directory's scripts with a MaxText venv's python, in the steps' environment
    (step_env) unless `env` is given: its exit code, stdout and stderr."""
    full = [str(venv_python(version)), str(HERE / script), *args]
    with tempfile.TemporaryDirectory(dir=_scratch()) as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        code, _, _ = _in_process(version, full, env or step_env(version), Path(tmp), out, err, input, timeout)
        if code == -9:
            raise subprocess.TimeoutExpired(full, timeout, out.read_text(errors="replace"),
                                            err.read_text(errors="replace"))
        return subprocess.CompletedProcess(full, code, out.read_text(errors="replace"), err.read_text(errors="replace"))


def last_json(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("{") and line.endswith("}")]
    if not lines:
        raise AssertionError(f"no JSON result in the output:\n{output[-3000:]}")
    return json.loads(lines[-1])
