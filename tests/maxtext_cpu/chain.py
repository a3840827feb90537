"""A recipe's own convert, train and export commands, run in MaxText's real code on a CPU.

The commands are the ones `tpu-rl render` writes (tpu_rl.jobs.maxtext.maxtext_commands, which the manifests and
the VM script are rendered from; tests/test_maxtext_real.py checks that the rendered files contain them).
Only what a CPU test must change is changed (cpu_argv): gs://BUCKET/ becomes a local directory with the
same object layout, a Hugging Face hub id becomes the tiny local model, the tiny sizes are appended (with
override_model_config=True), and a step that would join a TPU slice's hosts (train; the VM recipe's
export) skips jax.distributed, as one CPU process has none to join, and JAX's compilation cache is
kept beside the venvs (xla_cache_dir). The environment adds HF_HUB_OFFLINE=1, a dummy HF_TOKEN, and for train the recipe's
device count of fake CPU devices.

Each step runs in a fresh process of the release's venv (.venv-maxtext-<version>, `make install`) and is
measured with os.wait4: wall time and the process's peak resident memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DUMMY_TOKEN = "hf_dummy_token_for_offline_tests"
STEP_TIMEOUT = 600  # seconds; a step of a tiny model that takes longer is hung
# Outside the clone, as the venvs are (tools/maxtext_venv.sh), so that a clean clone reuses them.
CACHE = Path(os.environ.get("TPU_RL_CACHE", Path.home() / ".cache" / "tpu-rl"))
TINY_CACHE = CACHE / "tiny-models"


def xla_cache_dir(version: str) -> Path:
    """JAX's own persistent compilation cache, kept beside the venvs: its key is the program, the compile
    options, jaxlib and the devices, so a hit is the same executable (docs/development.md). MaxText's
    config points JAX at its jax_cache_dir (base.yml: ~/jax_cache), which wins over JAX's environment
    variable, so every step passes it as an argument (cpu_argv)."""
    return CACHE / "xla" / version


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
    inputs = (HERE / "tiny.py").read_bytes() + (HERE / f"constraints-{recipe.maxtext_version}.txt").read_bytes()
    digest = hashlib.sha256(inputs).hexdigest()[:12]
    target = TINY_CACHE / recipe.maxtext_version / f"{recipe.model.maxtext_name}-{digest}"
    if (target / "model.safetensors.index.json").exists():
        return target
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    result = in_venv(recipe.maxtext_version, "tiny.py", str(scratch), recipe.model.maxtext_name,
                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, f"building the tiny {recipe.model.maxtext_name} failed:\n{result.stderr[-3000:]}"
    if not (target / "model.safetensors.index.json").exists():
        shutil.rmtree(target, ignore_errors=True)  # a build cut off before its index
        try:
            scratch.rename(target)
        except OSError:  # another process renamed its build first
            pass
    shutil.rmtree(scratch, ignore_errors=True)
    return target


def tiny_overrides(maxtext_name: str) -> list[str]:
    sys.path.insert(0, str(HERE))
    from tiny import maxtext_overrides  # noqa: PLC0415  (also runs in the MaxText venv, so no package import)

    return maxtext_overrides(maxtext_name)


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
    root: Path  # per recipe: bucket/, hf/ (HF_HOME), tiny/ (the model), logs/
    tiny: Path

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
        out += tiny_overrides(self.recipe.model.maxtext_name)
        if not any(arg.startswith("skip_jax_distributed_system=") for arg in out):
            out.append("skip_jax_distributed_system=True")  # one CPU process: no TPU hosts to join
        if not any(arg.startswith("jax_cache_dir=") for arg in out):
            out.append(f"jax_cache_dir={xla_cache_dir(self.recipe.maxtext_version)}")
        return out

    def env(self, step: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XLA_", "JAX_", "PYTHON"))}
        env.update(HF_HUB_OFFLINE="1", HF_TOKEN=DUMMY_TOKEN, HF_HOME=str(self.root / "hf"), JAX_PLATFORMS="cpu",
                   TOKENIZERS_PARALLELISM="false", TF_CPP_MIN_LOG_LEVEL="2")
        # Every program is kept: most of a tiny model's compile in well under JAX's 1 s default.
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        if step == "train":
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={self.recipe.shape.total_chips}"
            env["PROBE_LAST_STEP"] = str(self.recipe.last_step)
            from maxtext_cpu.workload import probe_env  # noqa: PLC0415  the workload's tunix, env, patches

            env.update(probe_env(self.recipe, self.root / "patched-src"))
        return env

    def after_export(self) -> str | None:
        """The export script's step after to_huggingface (jobs/export.py), with the CPU changes."""
        from tpu_rl.jobs.export import VISION_PARTS, carry_vision_script

        vision = VISION_PARTS.get(self.recipe.model.maxtext_name)
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
        argv = full
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{step}-{int(time.time() * 1000)}.log"
        start = time.monotonic()
        with log_path.open("w") as log:
            process = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root)
            returncode, usage = _wait(process, STEP_TIMEOUT)
        seconds = time.monotonic() - start
        text = log_path.read_text(errors="replace")
        report: dict = {}
        for line in text.splitlines():
            if line.startswith("{") and line.endswith("}"):
                try:
                    report.update(json.loads(line))
                except ValueError:
                    pass
        result = StepRun(step, argv, returncode, seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime,
                         text, report)
        print(f"[maxtext {self.recipe.maxtext_version} {self.recipe.name}] {result.line()}", file=sys.stderr)
        return result


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


def in_venv(version: str, script: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess:
    """Run one of this directory's scripts with a MaxText venv's python."""
    return subprocess.run([str(venv_python(version)), str(HERE / script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def last_json(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("{") and line.endswith("}")]
    if not lines:
        raise AssertionError(f"no JSON result in the output:\n{output[-3000:]}")
    return json.loads(lines[-1])
