"""How TPU capacity is obtained: a specific reservation, spot, or on demand (recipe field `capacity`)."""

from __future__ import annotations

from recipes.model import CapacityMode

# The label key Compute Engine and GKE match a SPECIFIC_RESERVATION affinity on.
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def check_reservation(owner: str, capacity: CapacityMode, reservation: str | None) -> None:
    if capacity == "reservation" and not reservation:
        raise ValueError(f"{owner}.reservation is required for capacity 'reservation'")
