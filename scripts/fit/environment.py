"""MaxText's own environment for one release: where the fit's compile runs, and the tests' MaxText steps.

One venv per release under ~/.cache/tpu-rl (TPU_RL_CACHE), named after a hash of what decides its
contents: the release's constraints and the package list (recipes/environments/), the install steps
below, the Python version and whether torch is in. A machine that built it once reuses it; any change
builds a new one, and uv's cache keeps the downloads. The stamp .installed is written last, so a venv
cut off while building is built again.

- maxtext itself without its extra: the extra brings vLLM and tpu-inference, which a CPU cannot run;
- the packages MaxText's conversion, config, models and tunix import, at the lowest versions the
  release's tpu-post-train extra allows (what the image's `uv pip install --resolution=lowest` gets);
- google-tunix without its dependencies, as the image installs it from GitHub (at the PyPI release
  nearest to the image's commit, docs/fit.md);
- libtpu at the release's pin, in a folder of its own that only the compile puts on its path, so that
  JAX on a CPU never starts looking for a TPU;
- torch only for the tests (conversion and transformers' reload): 3.4 GB a compile does not need.

    python -m tpu_rl.scripts.fit.environment VERSION --python PYTHON --uv UV [--torch] [--link DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tpu_rl.recipes import UserError

STAMP = ".installed"
LIBTPU_DIR = "libtpu"
# The install steps, as arguments of `uv pip install` after --python; part of the key.
STEPS = (
    ("--no-deps", "maxtext=={version}"),
    ("-c", "{constraints}", "-r", "{packages}"),
    ("--no-deps", "-c", "{constraints}", "google-tunix"),
)
TORCH = "torch"


def cache_root() -> Path:
    return Path(os.environ.get("TPU_RL_CACHE") or Path.home() / ".cache" / "tpu-rl")


def _data(name: str) -> str:
    return resources.files("tpu_rl.recipes").joinpath("environments", name).read_text()


def constraints(version: str) -> str:
    try:
        return _data(f"constraints-{version}.txt")
    except FileNotFoundError:
        raise UserError(f"MaxText {version} has no constraints in recipes/environments: run "
                        f"tools/generate_maxtext_constraints.py {version}") from None


def pinned(version: str, package: str) -> str:
    """The version the release's constraints pin `package` to."""
    for line in constraints(version).splitlines():
        name, equals, pin = line.partition("==")
        if equals and name.strip().lower() == package:
            return pin.strip()
    raise UserError(f"MaxText {version}'s constraints pin no {package}")


# What decides a compile's result in an environment: the compiler, the trainer and the model code.
COMPILER_PACKAGES = ("maxtext", "jax", "jaxlib", "libtpu", "google-tunix", "flax", "optax")


def pinned_versions(version: str) -> dict[str, str]:
    """The versions the release's environment is built with (its constraints; maxtext itself)."""
    return {name: version if name == "maxtext" else pinned(version, name) for name in COMPILER_PACKAGES}


@dataclass(frozen=True)
class Environment:
    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def libtpu(self) -> Path:
        return self.path / LIBTPU_DIR

    @property
    def ready(self) -> bool:
        return (self.path / STAMP).is_file()

    def versions(self) -> dict[str, str]:
        """The versions installed in it, from their dist-info folders (libtpu's in its own folder)."""
        found = {}
        for folder in [*self.path.glob("lib/python*/site-packages"), self.libtpu]:
            for info in folder.glob("*.dist-info"):
                name, _, rest = info.name.removesuffix(".dist-info").partition("-")
                found[name.replace("_", "-").lower()] = rest
        return {name: found.get(name, "missing") for name in COMPILER_PACKAGES}


def key(version: str, python_version: str, torch: bool) -> str:
    text = "\n".join([constraints(version), _data("packages.txt"), repr(STEPS), python_version, f"torch={torch}"])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def environment(version: str, python_version: str, torch: bool) -> Environment:
    flavour = "" if torch else "fit-"
    return Environment(version, cache_root() / f"maxtext-venv-{flavour}{version}-{key(version, python_version, torch)}")


def existing(version: str) -> Environment | None:
    """A built environment of the release, with or without torch: both hold what the compile imports."""
    for path in sorted(cache_root().glob(f"maxtext-venv-*{version}-*")):
        found = Environment(version, path)
        if found.ready and path.name.removeprefix("maxtext-venv-").removeprefix("fit-").startswith(f"{version}-"):
            return found
    return None


def build(version: str, python: str, uv: str, torch: bool, say=print) -> Environment:
    """The release's environment, built once (minutes and a few GB: `say` tells what it does)."""
    python_version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True,
                                    text=True, check=True).stdout.strip()
    env = environment(version, python_version, torch)
    if env.ready:
        return env
    say(f"building MaxText {version}'s environment in {env.path} (once; a few minutes)")
    shutil.rmtree(env.path, ignore_errors=True)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    scratch = env.path / "requirements"
    _uv(uv, "venv", "--quiet", "--python", python, str(env.path))
    scratch.mkdir()
    (scratch / "constraints.txt").write_text(constraints(version))
    packages = _data("packages.txt") + (f"{TORCH}\n" if torch else "")
    (scratch / "packages.txt").write_text(packages)
    fill = {"version": version, "constraints": str(scratch / "constraints.txt"), "packages": str(scratch / "packages.txt")}
    for step in STEPS:
        _uv(uv, "pip", "install", "--quiet", "--python", str(env.python), *(arg.format(**fill) for arg in step))
    _uv(uv, "pip", "install", "--quiet", "--python", str(env.python), "--target", str(env.libtpu),
        f"libtpu=={pinned(version, 'libtpu')}")
    (env.path / STAMP).touch()
    return env


def _uv(uv: str, *args: str) -> None:
    done = subprocess.run([uv, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"uv {args[0]} failed building MaxText's environment: "
                        f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def find_python(uv: str, version: str, say=print) -> str:
    """An interpreter of `version` (the release's images' Python) that runs: on PATH (a pyenv shim of a
    version not selected is on PATH and fails), else uv's, installed by uv if it has none (once)."""
    found = _runs_as(shutil.which(f"python{version}"), version) or _uv_python(uv, version)
    if found:
        return found
    say(f"installing Python {version} with uv (once; MaxText's environment needs it)")
    subprocess.run([uv, "python", "install", "--quiet", version], capture_output=True, text=True)
    found = _uv_python(uv, version)
    if found:
        return found
    raise UserError(f"MaxText's environment needs Python {version}, which is not on PATH and uv could not "
                    f"install: install python{version}, or set TPU_RL_MAXTEXT_ENV to an environment of your own")


def _uv_python(uv: str, version: str) -> str | None:
    done = subprocess.run([uv, "python", "find", version], capture_output=True, text=True)
    return _runs_as(done.stdout.strip(), version) if done.returncode == 0 else None


def _runs_as(python: str | None, version: str) -> str | None:
    """`python` if it runs and is `version`, else None."""
    if not python:
        return None
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return python if done.returncode == 0 and done.stdout.strip() == version else None


def find_uv() -> str:
    found = shutil.which("uv") or (str(Path(sys.executable).with_name("uv")) if Path(sys.executable).with_name("uv").exists() else None)
    if not found:
        raise UserError("building MaxText's environment for the fit check needs uv: pip install uv")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--python", required=True)
    parser.add_argument("--uv", required=True)
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--link", help="a symlink to make to the environment")
    args = parser.parse_args(argv)
    env = build(args.version, args.python, args.uv, args.torch)
    if args.link:
        link = Path(args.link)
        if link.is_symlink() or link.exists():
            link.unlink() if link.is_symlink() else shutil.rmtree(link)
        link.symlink_to(env.path)
    print(f"MaxText {args.version}'s environment: {args.link or env.path} -> {env.path}")


if __name__ == "__main__":
    try:
        main()
    except UserError as error:
        raise SystemExit(f"error: {error}") from None
