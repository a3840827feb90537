"""How TPU capacity is obtained (recipe field `capacity`, setting CAPACITY): a specific reservation, flex-start,
spot or on demand. Each mode's rules are a row of recipes/capacity/modes.py; tpu_rl.infra.tpu_pool applies them to a
GKE pool, tpu_rl.infra.tpu_vm to the VM."""

from __future__ import annotations

from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode

# The label key Compute Engine and GKE match a SPECIFIC_RESERVATION affinity on.
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def check_reservation(owner: str, capacity: CapacityMode, reservation: str | None) -> str | None:
    """The reservation `capacity` binds to: `reservation` for a mode that draws on one (ValueError naming
    `owner` when it is missing), else None."""
    if not MODE_RULES[capacity].reservation:
        return None
    if not reservation:
        raise ValueError(f"{owner}.reservation is required for capacity '{capacity}'")
    return reservation
