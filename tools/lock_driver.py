"""Write recipes/driver_lock.toml: every package the run's driver installs, each as the one wheel of its
pinned release that installs on the driver's image (recipes/driver_runtime.py), with its URL and sha256.

It resolves pyproject.toml's dependencies, less recipes.driver_runtime.LEFT_OUT, with uv for the image's
Python and platform (`uv pip compile --only-binary :all: -o pylock.toml`, which lists each release's wheels
for that platform), then keeps the wheel whose tags rank first for CPython PYTHON_VERSION on
PYTHON_PLATFORM (packaging.tags, as pip ranks them). A maintainer runs it when the dependencies change,
and commits the lock; `tpu-rl run` downloads exactly these files (scripts/pipeline/gke/driver_image.py).

    .venv/bin/python tools/lock_driver.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipes.driver_runtime import LEFT_OUT, LOCK_FILE, PYTHON_PLATFORM, PYTHON_VERSION  # noqa: E402

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def driver_requirements(pyproject: dict) -> list[str]:
    """pyproject's dependencies without the ones the driver leaves out (comments dropped)."""
    left_out = {canonicalize_name(name) for name in LEFT_OUT}
    return [spec for spec in pyproject["project"]["dependencies"]
            if canonicalize_name(_NAME.match(spec).group(0)) not in left_out]


def image_tags() -> list:
    """The image's wheel tags, best first: CPython PYTHON_VERSION on manylinux up to PYTHON_PLATFORM's glibc."""
    arch, _, manylinux = PYTHON_PLATFORM.partition("-")
    major, minor = (int(part) for part in manylinux.removeprefix("manylinux_").split("_"))
    platforms = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)] + [f"manylinux2014_{arch}"]
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
    (REPO / "recipes" / LOCK_FILE).write_text("\n".join(lines))
    print(f"recipes/{LOCK_FILE}: {len(packages)} wheels")


if __name__ == "__main__":
    main()
