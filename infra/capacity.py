"""How TPU capacity is obtained (recipe field `capacity`, setting CAPACITY): a specific reservation, flex-start,
spot or on demand. What each mode means for a GKE pool is in infra.tpu_pool, for the VM in infra.tpu_vm."""

from __future__ import annotations

from recipes.capacity_modes import CapacityMode

# The label key Compute Engine and GKE match a SPECIFIC_RESERVATION affinity on.
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def check_reservation(owner: str, capacity: CapacityMode, reservation: str | None) -> None:
    if capacity == "reservation" and not reservation:
        raise ValueError(f"{owner}.reservation is required for capacity 'reservation'")
