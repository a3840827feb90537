"""TPU time a train step bills while nothing trains: the phases in which that happens, and their
chip-hours and list price (what `run` records as run.json `tpu_idle`)."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes.model import Recipe
from tpu_rl.recipes.prices import PriceTable, load_prices, usd


# The phases of a train step (scripts/pipeline/phases.py) in which its TPU hosts exist, and so bill, while
# nothing trains: the workers have their nodes while the Pathways head waits for one, while the images
# are pulled and the model loads, and the trainer waits for a checkpoint save. Queued and provisioning
# (the workers without nodes) bill no TPU on a pool that scales from zero; a reservation bills anyway.
TPU_IDLE_PHASES = ("waiting for head", "pulling images", "loading", "saving")


@dataclass(frozen=True)
class IdleTpu:
    """TPU time a train step billed while nothing trained, measured by `run` (run.json `tpu_idle`)."""

    seconds: float
    chip_hours: float
    usd: float
    mode: str

    def as_record(self) -> dict:
        return {"seconds": round(self.seconds), "chip_hours": round(self.chip_hours, 2),
                "usd_estimate": round(self.usd, 2), "capacity": self.mode}

    def line(self, step: str, by_phase: dict[str, float]) -> str:
        parts = ", ".join(f"{phase} {int(by_phase[phase]) // 60}m{int(by_phase[phase]) % 60:02d}s"
                          for phase in TPU_IDLE_PHASES if by_phase.get(phase))
        return (f"{step}: the TPU slice billed {self.chip_hours:.1f} chip-hours ({usd(self.usd)}, {self.mode}) while "
                f"nothing trained: {parts or 'none'}")


def idle_tpu(recipe: Recipe, by_phase: dict[str, float], mode: str | None = None,
             prices: PriceTable | None = None) -> IdleTpu:
    """The chip-hours, and their list price, of the TPU_IDLE_PHASES of a step on `mode` (the mode it ran
    on; by default the recipe's first)."""
    prices = prices or load_prices()
    mode = mode or recipe.capacity[0]
    seconds = sum(by_phase.get(phase, 0.0) for phase in TPU_IDLE_PHASES)
    chip_hours = recipe.shape.total_chips * seconds / 3600
    return IdleTpu(seconds, chip_hours, chip_hours * prices.tpu_chip_hour(recipe.shape.generation, mode).usd_per_hour,
                   mode)
