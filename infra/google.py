"""The one door to the prebuilt google provider bindings.

Constructs import provider classes only through this module, e.g.
``from infra.google import container_node_pool`` then ``container_node_pool.ContainerNodePool``.
Keeping a single door lets the import strategy change (see the synth benchmark) without touching
constructs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PROVIDER_PACKAGE = "cdktf_cdktf_provider_google"


def __getattr__(name: str) -> ModuleType:
    if name.startswith("__"):
        raise AttributeError(name)
    return importlib.import_module(f"{PROVIDER_PACKAGE}.{name}")
