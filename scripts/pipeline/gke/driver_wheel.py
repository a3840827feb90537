"""This package's own wheel for the run's driver, built from the files this `tpu-rl` runs: the same bytes
whether it runs from a checkout or from an installed wheel, so one package gives one driver runtime.

The files are what pyproject.toml ships (its packages and package data; tests/test_driver_image.py holds
the two lists equal and the file set equal to `pip wheel`'s). The wheel's version is the package's with a
local label, the first 12 hex of a digest of those files ("0.1.0+3f2a1b9c0d4e"): a checkout changed since
its release gets another runtime, and the driver reports exactly what it runs. The zip is written with
fixed times and order, and stored uncompressed (deflate's bytes depend on the machine's zlib; stored,
the wheel is about a megabyte), so the same files give the same bytes everywhere.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import zipfile
from pathlib import Path

DISTRIBUTION = "tpu-rl"
NAMESPACE = "tpu_rl"  # every package installs as tpu_rl.<folder> (pyproject [tool.setuptools] package-dir)
PACKAGES = ("recipes", "infra", "stacks", "jobs", "scripts")  # the folders pyproject maps under NAMESPACE
PACKAGE_DATA = {  # pyproject [tool.setuptools.package-data]
    "tpu_rl.recipes": ["*.toml", "costs/*.toml", "driver/*.toml", "environments/*.txt", "fit/*.json",
                       "runs/*.toml", "runs/maxtext_keys/*.toml", "runs/maxtext_keys/*.json"],
    "tpu_rl.infra": ["charts/manifests/*.yaml", "charts/manifests/templates/*.yaml", "google_lazy_require.js"],
    "tpu_rl.jobs": ["vm_script/*.sh"],
}
CONSOLE_SCRIPTS = {"tpu-rl": "tpu_rl.scripts.cli:main"}  # pyproject [project.scripts]
REQUIRES_PYTHON = ">=3.11"  # pyproject [project] requires-python
DIGEST_HEX = 12
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time in the bytes


def package_root() -> Path:
    """The directory that holds the package folders: a checkout's root, or an installed tpu_rl/."""
    return Path(__file__).resolve().parents[3]


def _namespace_init(root: Path) -> Path:
    """tpu_rl/__init__.py: beside the folders in a checkout, the root itself when installed."""
    inside = root / NAMESPACE / "__init__.py"
    return inside if inside.is_file() else root / "__init__.py"


def _source(root: Path, name: str) -> Path:
    """The file behind a wheel path (tpu_rl/scripts/cli/cloud.py -> <root>/scripts/cli/cloud.py)."""
    inner = name.removeprefix(f"{NAMESPACE}/")
    return _namespace_init(root) if inner == "__init__.py" else root / inner


def _package_dirs(directory: Path):
    """`directory` and the packages below it, as setuptools finds them: a directory with an __init__.py
    whose parents are packages too."""
    if "." not in directory.name and (directory / "__init__.py").is_file():
        yield directory
        for child in sorted(directory.iterdir()):
            if child.is_dir():
                yield from _package_dirs(child)


def package_files(root: Path) -> list[str]:
    """The files the wheel ships, as paths in the wheel (under tpu_rl/), sorted: the namespace's
    __init__.py, every module of every package and the package data."""
    found: set[str] = {f"{NAMESPACE}/__init__.py"}
    for package in PACKAGES:
        for directory in _package_dirs(root / package):
            found.update(f"{NAMESPACE}/{path.relative_to(root)}" for path in directory.glob("*.py") if path.is_file())
        for pattern in PACKAGE_DATA.get(f"{NAMESPACE}.{package}", ()):
            found.update(f"{NAMESPACE}/{path.relative_to(root)}" for path in (root / package).glob(pattern)
                         if path.is_file())
    return sorted(found)


def files_digest(root: Path, files: list[str]) -> str:
    """sha256 over each file's path and content digest, in order."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(f"{name}\0{hashlib.sha256(_source(root, name).read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def package_version() -> str:
    """The installed package's version without a local label."""
    return importlib.metadata.version(DISTRIBUTION).split("+", 1)[0]


def runtime_version(root: Path | None = None, release: str | None = None) -> str:
    """What this package's driver runs and reports: its release and the digest of its files."""
    root = root or package_root()
    return f"{release or package_version()}+{files_digest(root, package_files(root))[:DIGEST_HEX]}"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_file_name(version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def build_wheel(root: Path, version: str) -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel of the package files under `root` at `version`. It
    declares no dependencies: the driver installs the lock's wheels beside it (recipes/driver/driver_lock.toml)."""
    dist_info = f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"
    entries = [(name, _source(root, name).read_bytes()) for name in package_files(root)]
    entries += [
        (f"{dist_info}/METADATA", (f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
                                   f"Requires-Python: {REQUIRES_PYTHON}\n").encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tpu-rl\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/entry_points.txt",
         ("[console_scripts]\n" + "".join(f"{n} = {t}\n" for n, t in CONSOLE_SCRIPTS.items())).encode()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries) + f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as wheel:
        for name, data in entries:
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_STORED
            wheel.writestr(info, data)
    return wheel_file_name(version), buffer.getvalue()
