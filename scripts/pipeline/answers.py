"""The types every platform answers the protocol (platforms.py) in, neutral so that the protocol names no
platform's module and an implementation imports these, never the module that routes to it: what `render`
writes (Rendered), and what a recipe's stack still bills when no run of it is active or queued (`tpu-rl
runs`, `Platform.idle`; GKE fills it from its cluster, gke/billing.py, a TPU VM from its instance,
vm/views.py vm_idle)."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.costs.standing import StandingCost, account, stop_command


@dataclass(frozen=True)
class Rendered:
    """What `tpu-rl render` writes: the files by name in the order `run` submits them, everything as one
    text for `--out -`, and what the files are, for the line that says what was rendered."""
    files: dict[str, str]
    stream: str
    what: str


@dataclass(frozen=True)
class ActiveRun:
    run: str | None  # None: a conversion, which runs of the same conversion share (no run label)
    what: str  # e.g. "JobSet qwen3-v6e32-abc-train running", "driver Job tpu-rl-driver-abc"


@dataclass(frozen=True)
class Idle:
    """`tpu-rl runs` on a recipe whose stack has no run: what it still bills (None while a run is there)."""

    active: tuple[ActiveRun, ...]
    bill: StandingCost | None
    where: str = ""  # e.g. "on cluster rl-qwen", "on TPU VM rl-llama"

    def lines(self, recipe: Recipe, bucket: str) -> list[str]:
        if self.bill is None:
            return []
        return [f"no run of {recipe.name} is active or queued {self.where}; {stop_command(recipe)} "
                f"destroys its stack, keeping gs://{bucket}", *account(self.bill, recipe)]

    def as_record(self) -> dict:
        return {"active": [{"run": run.run, "what": run.what} for run in self.active],
                "idle_bill": self.bill.as_record() if self.bill else None}
