"""The platforms a recipe runs on, as facts: what each one is, for every layer above to decide by.

- facts.py: PlatformFacts, the facts one platform states (each varies on its own), and `registered`, the
  one lookup every layer's registry answers through, refusing an unregistered platform by name;
- gke.py, vm.py: each platform's facts, one module each.

PLATFORMS below is this layer's registry: recipes.toml's `platform` -> its facts. The behaviour that
differs lives in the layer that owns it, one registry each: the stack (stacks/compositions.py), what runs
the steps (jobs/ RENDERERS, keyed by the fact `steps_run_as`), what the stack bills (recipes/costs
HOURLY_LINES and IDLE_BILLS, keyed by the fact `stack`) and the commands
(scripts/pipeline/platforms.py). docs/development.md lists every line a new platform adds.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tpu_rl.recipes.platforms.facts import PlatformFacts, Stack, StepRunner, TrainMode, registered
from tpu_rl.recipes.platforms.gke import GKE
from tpu_rl.recipes.platforms.vm import VM

PLATFORMS: dict[str, PlatformFacts] = {"gke": GKE, "vm": VM}


def facts_of(platform: str) -> PlatformFacts:
    """The facts of a registered platform (KeyError naming PLATFORMS otherwise)."""
    return registered(PLATFORMS, platform, "PLATFORMS of recipes/platforms/__init__.py")


def platforms_where(holds: Callable[[PlatformFacts], bool]) -> Mapping[str, PlatformFacts]:
    """The platforms whose facts `holds`, for a message that names them ('gke')."""
    return {name: facts for name, facts in PLATFORMS.items() if holds(facts)}


__all__ = ["PLATFORMS", "PlatformFacts", "Stack", "StepRunner", "TrainMode", "facts_of", "platforms_where",
           "registered"]
