"""The stacks layer's registry: a recipe's platform -> the stack that composes its infrastructure. Imported
only when the app builds (stacks/app.py): cdktf and the provider bindings take seconds to load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tpu_rl.recipes.platforms import registered
from tpu_rl.stacks.gke import GkeRecipeStack
from tpu_rl.stacks.vm import VmRecipeStack

if TYPE_CHECKING:
    from constructs import Construct

    from tpu_rl.recipes.catalog.recipe import Recipe
    from tpu_rl.recipes.settings.load import Settings
    from tpu_rl.stacks.base import TpuRlStack


class Composition(Protocol):
    """A recipe's stack, built as stacks/app.py builds each: what every platform's stack class accepts."""

    def __call__(self, scope: Construct, recipe: Recipe, settings: Settings,
                 blocked: str | None = None) -> TpuRlStack: ...


COMPOSITIONS: dict[str, Composition] = {"gke": GkeRecipeStack, "vm": VmRecipeStack}


def composition_for(platform: str) -> Composition:
    """The stack class of a registered platform (KeyError naming COMPOSITIONS otherwise)."""
    return registered(COMPOSITIONS, platform, "COMPOSITIONS of stacks/compositions.py")
