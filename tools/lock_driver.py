"""Write recipes/driver/driver_lock.toml: every package the run's driver installs, each as the one wheel of its
pinned release that installs on the driver's image (recipes/driver/runtime.py), with its URL and sha256.

It resolves pyproject.toml's dependencies, less tpu_rl.recipes.driver.runtime.LEFT_OUT, with uv for the image's
Python and platform (`uv pip compile --only-binary :all: -o pylock.toml`, which lists each release's wheels
for that platform), then keeps the wheel whose tags rank first for CPython PYTHON_VERSION on
PYTHON_PLATFORM (packaging.tags, as pip ranks them). A maintainer runs it when the dependencies change,
and commits the lock; `tpu-rl run` downloads exactly these files (scripts/pipeline/gke/driver_image.py).

    .venv/bin/python tools/lock_driver.py
    .venv/bin/python tools/lock_driver.py --verify /path/to/python3.12

--verify downloads the lock's wheels (checked against their sha256), lays them out as the driver's FUSE
volume shows the bucket, installs them with the container's own script (jobs/driver_runtime.py) into a
fresh venv of that Python, offline, runs `tpu-rl --help`, and imports every module of the package's
scripts/, jobs/ and recipes/ and every third-party module they import, even inside a function
(matplotlib's one importer, scripts/metrics/plot.py, aside). A missing dependency fails it, and so does
an install whose peak use of the site or /tmp directory exceeds its emptyDir's sizeLimit (the kubelet
evicts such a pod: kubernetes/kubernetes pkg/kubelet/eviction/eviction_manager.go
`emptyDirLimitEviction`).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tpu_rl.recipes.driver.runtime import (LEFT_OUT, LOCK_FILE, PYTHON_PLATFORM, PYTHON_VERSION,  # noqa: E402
                                    SITE_SIZE_LIMIT_MIB, TMP_SIZE_LIMIT_MIB)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def driver_requirements(pyproject: dict) -> list[str]:
    """pyproject's dependencies without the ones the driver leaves out (comments dropped)."""
    left_out = {canonicalize_name(name) for name in LEFT_OUT}
    return [spec for spec in pyproject["project"]["dependencies"]
            if canonicalize_name(_NAME.match(spec).group(0)) not in left_out]


# The legacy manylinux names of a glibc 2 minor, each ranked right after its manylinux_2_<minor> tag
# (PEP 599, 571, 513; pypa/packaging@0b3621f3 src/packaging/_manylinux.py `_LEGACY_MANYLINUX_MAP`).
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
OLDEST_GLIBC_MINOR = 5  # on x86_64, the oldest glibc 2 a manylinux tag names (same file, `platform_tags`)


def image_platforms() -> list[str]:
    """The manylinux platforms pip accepts on the image, best first: every glibc 2 minor from
    PYTHON_PLATFORM's down to the oldest, and the legacy aliases (as packaging's `platform_tags`)."""
    arch, _, manylinux = PYTHON_PLATFORM.partition("-")
    major, minor = (int(part) for part in manylinux.removeprefix("manylinux_").split("_"))
    platforms = []
    for glibc_minor in range(minor, OLDEST_GLIBC_MINOR - 1, -1):
        platforms.append(f"manylinux_{major}_{glibc_minor}_{arch}")
        if glibc_minor in LEGACY_MANYLINUX:
            platforms.append(f"{LEGACY_MANYLINUX[glibc_minor]}_{arch}")
    return platforms


def image_tags() -> list:
    """The image's wheel tags, best first: CPython PYTHON_VERSION on image_platforms()."""
    platforms = image_platforms()
    python = tuple(int(part) for part in PYTHON_VERSION.split("."))
    return [*cpython_tags(python, platforms=platforms), *compatible_tags(python, platforms=platforms)]


def best_wheel(wheels: list[dict], ranks: dict) -> dict:
    def rank(wheel: dict) -> int:
        tags = parse_wheel_filename(wheel["url"].rsplit("/", 1)[1])[3]
        return min(ranks.get(tag, len(ranks)) for tag in tags)

    best = min(wheels, key=rank)
    if rank(best) == len(ranks):
        raise SystemExit(f"no wheel of {best['url']}'s release installs on {PYTHON_PLATFORM}")
    return best


def main() -> None:
    requirements = driver_requirements(tomllib.loads((REPO / "pyproject.toml").read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "requirements.in").write_text("\n".join(requirements) + "\n")
        subprocess.run([str(REPO / ".venv/bin/uv"), "pip", "compile", "requirements.in", "--quiet",
                        "--python-version", PYTHON_VERSION, "--python-platform", PYTHON_PLATFORM,
                        "--only-binary", ":all:", "-o", "pylock.toml"], cwd=tmp, check=True)
        packages = tomllib.loads((Path(tmp) / "pylock.toml").read_text())["packages"]
    ranks = {tag: index for index, tag in enumerate(image_tags())}
    lines = [f"# Written by tools/lock_driver.py for Python {PYTHON_VERSION} on {PYTHON_PLATFORM}: the wheels",
             "# the run's driver installs (docs/pipeline.md, \"The driver's image\"). Do not edit by hand.", ""]
    for package in packages:
        wheel = best_wheel(package["wheels"], ranks)
        lines += ["[[wheels]]", f'name = "{package["name"]}"', f'version = "{package["version"]}"',
                  f'file = "{wheel["url"].rsplit("/", 1)[1]}"', f'url = "{wheel["url"]}"',
                  f'sha256 = "{wheel["hashes"]["sha256"]}"', f"size = {wheel['size']}", ""]
    (REPO / "recipes" / "driver" / LOCK_FILE).write_text("\n".join(lines))
    print(f"recipes/driver/{LOCK_FILE}: {len(packages)} wheels")


NOT_FOR_THE_DRIVER = "scripts/metrics/plot.py"  # matplotlib's one importer (tpu_rl.recipes.driver.runtime.LEFT_OUT)


def third_party_imports() -> list[str]:
    """Every module outside the package that scripts/, jobs/ and recipes/ import, at any depth."""
    found = set()
    for package in ("scripts", "jobs", "recipes"):
        for path in (REPO / package).rglob("*.py"):
            if path.relative_to(REPO).as_posix() == NOT_FOR_THE_DRIVER:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    found.update(f"{node.module}.{alias.name}" for alias in node.names)
    ours = {"tpu_rl"}
    return sorted(name for name in found if name.split(".")[0] not in (*sys.stdlib_module_names, *ours))


IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
from tpu_rl import scripts, jobs, recipes
failed = []
for package in (scripts, jobs, recipes):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name != "tpu_rl.scripts.metrics.plot":
            try:
                importlib.import_module(info.name)
            except Exception as error:
                failed.append(f"{info.name}: {error!r}")
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:  # `from module import name` may name a name, not a module
        module, _, attribute = name.rpartition(".")
        try:
            found = bool(module) and hasattr(importlib.import_module(module), attribute)
        except Exception:
            found = False
        if not found:
            failed.append(f"{name}: {error}")
    except Exception as error:
        failed.append(f"{name}: {error!r}")
print("\\n".join(failed) or "every import resolves")
sys.exit(1 if failed else 0)
"""


def disk_usage(directory: Path) -> int:
    """Bytes of disk the files under `directory` take, as du counts them (allocated blocks)."""
    total = 0
    for parent, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:  # removed while counted
                pass
    return total


def peak_usage(argv: list[str], env: dict[str, str], directories: dict[str, Path],
               timeout: float, every: float = 0.05) -> tuple[int, dict[str, int]]:
    """Run `argv` and sample each directory's disk usage until it exits (at most `timeout` s): its exit
    code and each directory's peak, by name."""
    peaks = dict.fromkeys(directories, 0)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while True:
        for name, directory in directories.items():
            peaks[name] = max(peaks[name], disk_usage(directory))
        if process.poll() is not None:
            return process.returncode, peaks
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"{' '.join(argv[:2])} ran past {timeout:.0f} s")
        time.sleep(every)


def over_limits(peaks: dict[str, int], limits_mib: dict[str, int]) -> list[str]:
    """One line for each directory whose peak exceeds its emptyDir's sizeLimit."""
    return [f"the driver's {name} volume peaked at {peaks[name] / 2**20:.0f} MiB, over its sizeLimit of "
            f"{limit} MiB (recipes/driver/runtime.py): the kubelet would evict the pod"
            for name, limit in limits_mib.items() if peaks[name] > limit * 2**20]


def verify(python: str) -> None:
    from tpu_rl.jobs.driver_runtime import (INSTALL_SECONDS, SITE_VOLUME, TMP_VOLUME, DriverRuntime, driver_container,
                                     driver_env, requirements_text, runtime_dir)
    from tpu_rl.recipes.driver.runtime import BASE_IMAGE, driver_lock
    from tpu_rl.scripts.pipeline.gke.driver_image import download_wheel
    from tpu_rl.scripts.pipeline.gke.driver_wheel import build_wheel, package_root, runtime_version

    with tempfile.TemporaryDirectory() as tmp:
        files, site, scratch, venv = (Path(tmp) / name for name in ("files", "site", "tmp", "venv"))
        for directory in (files / "wheels", site, scratch):
            directory.mkdir(parents=True)
        wheels = driver_lock()
        for wheel in wheels:
            (files / "wheels" / wheel.file).write_bytes(download_wheel(wheel))
        version = runtime_version()
        name, data = build_wheel(package_root(), version)
        (files / runtime_dir(version)).mkdir(parents=True)
        (files / runtime_dir(version) / name).write_bytes(data)
        requirements = f"{runtime_dir(version)}/requirements.txt"
        text = requirements_text(wheels, f"{runtime_dir(version)}/{name}", hashlib.sha256(data).hexdigest())
        (files / requirements).write_text(text)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        runtime = DriverRuntime(BASE_IMAGE, version, "verify", requirements,
                                hashlib.sha256(text.encode()).hexdigest())
        env = {item["name"]: item["value"] for item in driver_env(runtime)}
        # TMPDIR: the pod's /tmp is the tmp volume, where anything that ignores the script's TMPDIR lands
        env.update({"TPU_RL_DRIVER_FILES": str(files), "TPU_RL_DRIVER_SITE": str(site),
                    "TPU_RL_DRIVER_TMP": str(scratch), "HOME": str(scratch), "TMPDIR": str(scratch),
                    "PIP_NO_INDEX": "1", "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin"})
        container = driver_container(runtime, ["--help"])
        code, peaks = peak_usage([*container["command"], *container["args"]], env,
                                 {SITE_VOLUME: site, TMP_VOLUME: scratch}, timeout=INSTALL_SECONDS + 60)
        if code:
            raise SystemExit(f"the driver's install script exited {code}: see its lines above")
        refusals = over_limits(peaks, {SITE_VOLUME: SITE_SIZE_LIMIT_MIB, TMP_VOLUME: TMP_SIZE_LIMIT_MIB})
        if refusals:
            raise SystemExit("\n".join(refusals))
        checked = subprocess.run([str(venv / "bin" / "python3"), "-P", "-c", IMPORT_EVERYTHING, *third_party_imports()],
                                 env={**env, "PYTHONPATH": str(site / version)}, cwd=scratch)
        if checked.returncode:
            raise SystemExit("the lock misses what the driver imports: add it to pyproject.toml and run again")
        print(f"{len(wheels)} wheels and tpu-rl {version} install offline on {python}; every import resolves; "
              + ", ".join(f"{name} peaked at {peak / 2**20:.0f} MiB" for name, peak in peaks.items()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--verify"] and len(sys.argv) == 3:
        verify(sys.argv[2])
    else:
        main()
