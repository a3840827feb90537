"""The one door to the prebuilt google provider bindings.

Constructs import provider classes only through this module, e.g.
``from tpu_rl.infra.google import container_node_pool`` then ``container_node_pool.ContainerNodePool``.

Why the door is not a plain import: ``import cdktf_cdktf_provider_google`` runs a package
``__init__`` that imports all 1,469 resource submodules (seconds of Python), and loading the jsii
assembly makes node evaluate the JavaScript of all of them too (about 2 s). A synth uses 16 of them.

*Lazy* mode (the default when it is safe) avoids both, and the synthesized JSON is byte-identical
(``tests/test_provider_import.py`` proves it for every stack; ``bench/bench_synth.py`` measures it):

- Python: a package module object with the real ``__path__`` is registered without running the
  ``__init__``. In 16.12.1 nothing a submodule uses comes from that ``__init__``: it loads the
  assembly (every submodule does too, with ``from .._jsii import *``, its only relative import),
  defines a private ``check_type`` (every submodule defines its own) and imports every submodule.
  Types from submodules nobody imported are still found: jsii's runtime imports the module named
  in its FQN map, which we fill.
- Node: before the provider assembly loads, ``google_lazy_require.js`` is loaded into the jsii
  kernel as a tiny helper assembly. It turns the provider's ``lib/index.js`` (1,470 lines of
  ``exports.x = require("./x")``) into getters that require a namespace on first lookup.

Lazy mode is used only when the installed distribution is exactly 16.12.1, the files it relies on are
the ones shipped in that wheel (checked by SHA-256, here and in the JS hook), and jsii is the pinned
version whose private parts it uses. Otherwise the
normal import runs and the reason is logged at debug level. ``TPU_RL_PROVIDER_IMPORT=full`` forces
the normal import; ``=lazy`` forces lazy mode and stops with a clear error when the guard fails;
``=auto`` (default) decides as above.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import pkgutil
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Iterable

from tpu_rl.recipes.errors import UserError

# The submodules the constructs use, typed (`x as x` re-exports them); at run time __getattr__ below hands them out.
if TYPE_CHECKING:
    from cdktf_cdktf_provider_google import (
        compute_firewall as compute_firewall,
        compute_instance as compute_instance,
        compute_network as compute_network,
        compute_router as compute_router,
        compute_router_nat as compute_router_nat,
        compute_subnetwork as compute_subnetwork,
        container_cluster as container_cluster,
        container_node_pool as container_node_pool,
        data_google_container_engine_versions as data_google_container_engine_versions,
        project_iam_member as project_iam_member,
        provider as provider,
        secret_manager_secret as secret_manager_secret,
        secret_manager_secret_iam_member as secret_manager_secret_iam_member,
        service_account as service_account,
        service_account_iam_member as service_account_iam_member,
        storage_bucket as storage_bucket,
        storage_bucket_iam_member as storage_bucket_iam_member,
    )

PROVIDER_PACKAGE = "cdktf_cdktf_provider_google"
PROVIDER_DISTRIBUTION = "cdktf-cdktf-provider-google"
PINNED_VERSION = "16.12.1"
# The lazy import reaches into two private parts of the jsii runtime (the type reference map's
# `_submodule_fqn_map`, and the kernel's `load` for the helper assembly), verified with this jsii
# (pinned in pyproject.toml): another version blocks lazy mode, like another provider version does.
JSII_DISTRIBUTION = "jsii"
PINNED_JSII_VERSION = "1.142.0"
ASSEMBLY_NAME = "@cdktf/provider-google"
ASSEMBLY_FILE = f"provider-google@{PINNED_VERSION}.jsii.tgz"
IMPORT_MODE_ENV = "TPU_RL_PROVIDER_IMPORT"
IMPORT_MODES = ("auto", "full", "lazy")
IMPORT_DEBUG_ENV = "TPU_RL_PROVIDER_IMPORT_DEBUG"  # set: say on stderr how the provider was imported
LAZY_REQUIRE_HOOK = Path(__file__).with_name("google_lazy_require.js")

# SHA-256 of the files the lazy package stands in for or relies on, as shipped in the 16.12.1
# wheel. If either differs, the reasoning above no longer holds and the normal import runs.
_EXPECTED_SHA256 = {
    "__init__.py": "dd337cd141657511083ddeaaf7807a6127fbc51f3952da372871d924e38d0d4f",
    "_jsii/__init__.py": "af1869360a762a0cc6c596fc23acb0b3aa707e7440649f9cdfcf953558464b42",
}

_log = logging.getLogger(__name__)
_status: dict[str, object] = {}  # how this process imported the provider; decided once, on first use


def lazy_import_blocker() -> str | None:
    """Why lazy mode is unsafe in this process, or None when it is safe."""
    loaded = sys.modules.get(PROVIDER_PACKAGE)
    if loaded is not None and not getattr(loaded, "__tpu_rl_lazy__", False):
        return f"{PROVIDER_PACKAGE} was already imported normally in this process"
    try:
        installed = importlib.metadata.version(PROVIDER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return f"distribution {PROVIDER_DISTRIBUTION} is not installed"
    if installed != PINNED_VERSION:
        return f"{PROVIDER_DISTRIBUTION} is {installed}; the lazy import is verified only for {PINNED_VERSION}"
    jsii_version = importlib.metadata.version(JSII_DISTRIBUTION)
    if jsii_version != PINNED_JSII_VERSION:
        return f"jsii is {jsii_version}; the lazy import relies on private jsii parts verified only in {PINNED_JSII_VERSION}"
    from jsii import _reference_map
    from jsii._runtime import kernel

    if not isinstance(getattr(_reference_map, "_submodule_fqn_map", None), dict):
        return "this jsii has no _submodule_fqn_map, so types of submodules nobody imported could not be found"
    if not callable(getattr(kernel, "load", None)):
        return "this jsii's kernel has no load(), which the lazy require hook needs"
    spec = importlib.util.find_spec(PROVIDER_PACKAGE)  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return f"{PROVIDER_PACKAGE} is not a regular package on sys.path"
    root = Path(list(spec.submodule_search_locations)[0])
    if not (root / "_jsii" / ASSEMBLY_FILE).is_file():
        return f"jsii assembly {ASSEMBLY_FILE} is missing under {root / '_jsii'}"
    for relative, expected in _EXPECTED_SHA256.items():
        path = root / relative
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != expected:
            return f"{path} differs from the file shipped in {PROVIDER_DISTRIBUTION} {PINNED_VERSION}"
    return None


def submodule_fqn_map(package_path: Iterable[str]) -> dict[str, str]:
    """jsii submodule FQN -> Python module, e.g. '@cdktf/provider-google.computeInstance' ->
    'cdktf_cdktf_provider_google.compute_instance' (jsii-pacmak snake-cases submodule names; the
    test checks every entry against the assembly's own metadata)."""
    mapping = {}
    for info in pkgutil.iter_modules(package_path):
        if info.ispkg and not info.name.startswith("_"):
            head, *rest = info.name.split("_")
            jsii_name = head + "".join(part[:1].upper() + part[1:] for part in rest)
            mapping[f"{ASSEMBLY_NAME}.{jsii_name}"] = f"{PROVIDER_PACKAGE}.{info.name}"
    return mapping


def _helper_assembly(path: Path) -> tuple[str, str]:
    """Write google_lazy_require.js as a minimal jsii assembly tarball; return (name, version)."""
    hook = LAZY_REQUIRE_HOOK.read_bytes()
    name, version = "tpu-rl-lazy-provider-require", "1.0.0"
    manifest = {
        "schema": "jsii/0.10.0", "name": name, "version": version, "types": {}, "targets": {},
        "fingerprint": hashlib.sha256(hook).hexdigest(), "jsiiVersion": "1.0.0", "license": "Apache-2.0",
        "homepage": "https://github.com/", "repository": {"type": "git", "url": "https://github.com/"},
        "author": {"name": "tpu-rl", "roles": ["author"]}, "description": "lazy require of provider namespaces",
    }
    files = {
        "package/package.json": json.dumps({"name": name, "version": version, "main": "lib/index.js"}).encode(),
        "package/.jsii": json.dumps(manifest).encode(),
        "package/lib/index.js": hook,
    }
    # Byte-stable tarball (no timestamps): the kernel caches extracted packages by content hash.
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w") as archive:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            archive.addfile(info, io.BytesIO(data))
    return name, version


def _load_lazy_require_hook() -> bool:
    """Run google_lazy_require.js in the jsii node kernel; True when it is in place.

    Loading an assembly makes the kernel evaluate its main module, the one supported way to run
    code there. If anything fails, node loads the provider eagerly: slower, same output.
    """
    try:
        from jsii._runtime import kernel

        with tempfile.TemporaryDirectory(prefix="tpu-rl-jsii-") as scratch:
            tarball = Path(scratch) / "lazy-require.jsii.tgz"
            name, version = _helper_assembly(tarball)
            kernel.load(name, version, str(tarball))  # the kernel copies it into its package cache
        return True
    except Exception as error:  # noqa: BLE001 - a failure here costs only speed
        _log.debug("node loads the provider eagerly: the lazy require hook did not load: %s", error)
        return False


def _install_lazy_package() -> bool:
    """Register the provider package without running its __init__; return whether node is lazy too."""
    spec = importlib.util.find_spec(PROVIDER_PACKAGE)
    # lazy_import_blocker found the pinned distribution installed, and it is a package.
    assert spec is not None and spec.submodule_search_locations is not None
    package = importlib.util.module_from_spec(spec)  # sets __path__, __file__, __spec__; runs nothing
    # What the real __init__ does that submodules rely on: the same (extended) search path.
    package.__path__ = pkgutil.extend_path(list(spec.submodule_search_locations), PROVIDER_PACKAGE)

    def submodule_on_access(name: str) -> ModuleType:
        # `cdktf_cdktf_provider_google.<name>` still works, importing the submodule on first use (PEP 562).
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return importlib.import_module(f"{PROVIDER_PACKAGE}.{name}")
        except ModuleNotFoundError as missing:
            raise AttributeError(f"module {PROVIDER_PACKAGE!r} has no attribute {name!r}") from missing

    # The package's globals as a source file would define them: our marker, and PEP 562's module __getattr__.
    vars(package).update(__tpu_rl_lazy__=True, __getattr__=submodule_on_access)
    node_lazy = _load_lazy_require_hook()  # must precede the provider assembly's load
    sys.modules[PROVIDER_PACKAGE] = package

    # The real __init__ imports every submodule so that each type is registered before jsii may
    # need to turn a reference from node into a Python object. jsii imports the module named in
    # this map for a type it does not know yet, which covers submodules nobody imported.
    from jsii import _reference_map

    _reference_map._submodule_fqn_map.update(submodule_fqn_map(package.__path__))  # checked by the blocker
    return node_lazy


def import_status() -> dict[str, object]:
    """How this process imports the provider, decided on first call: {'mode': 'lazy'|'full',
    'node_lazy_require': bool, 'reason': str}."""
    if _status:
        return dict(_status)
    requested = os.environ.get(IMPORT_MODE_ENV, "").strip().lower() or "auto"
    if requested not in IMPORT_MODES:
        raise UserError(f"{IMPORT_MODE_ENV}={requested!r} is not a mode: use one of {', '.join(IMPORT_MODES)}")
    blocker = None if requested == "full" else lazy_import_blocker()
    if requested == "full":
        status = {"mode": "full", "node_lazy_require": False, "reason": f"forced by {IMPORT_MODE_ENV}=full"}
    elif blocker is None:
        node_lazy = _install_lazy_package()
        status = {"mode": "lazy", "node_lazy_require": node_lazy, "reason": f"{PROVIDER_DISTRIBUTION} {PINNED_VERSION} verified"}
    elif requested == "lazy":
        raise UserError(f"{IMPORT_MODE_ENV}=lazy cannot be honoured: {blocker}; unset it to use the normal import")
    else:
        status = {"mode": "full", "node_lazy_require": False, "reason": blocker}
    _log.debug("provider import: %s (%s)", status["mode"], status["reason"])
    if os.environ.get(IMPORT_DEBUG_ENV):
        print(f"tpu-rl provider import: {json.dumps(status)}", file=sys.stderr)
    if status["mode"] == "full":
        importlib.import_module(PROVIDER_PACKAGE)
    _status.update(status)
    return dict(_status)


def __getattr__(name: str) -> ModuleType:
    if name.startswith("__"):
        raise AttributeError(name)
    import_status()
    return importlib.import_module(f"{PROVIDER_PACKAGE}.{name}")
