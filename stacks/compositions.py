"""The stacks layer's registry: a recipe's platform -> the stack that composes its infrastructure. Imported
only when the app builds (stacks/app.py): cdktf and the provider bindings take seconds to load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpu_rl.recipes.platforms import registered
from tpu_rl.stacks.gke import GkeRecipeStack
from tpu_rl.stacks.vm import VmRecipeStack

if TYPE_CHECKING:
    from tpu_rl.stacks.base import TpuRlStack

COMPOSITIONS: dict[str, type[TpuRlStack]] = {"gke": GkeRecipeStack, "vm": VmRecipeStack}


def composition_for(platform: str) -> type[TpuRlStack]:
    """The stack class of a registered platform (KeyError naming COMPOSITIONS otherwise)."""
    return registered(COMPOSITIONS, platform, "COMPOSITIONS of stacks/compositions.py")
