"""Where a GKE recipe's TPU slices may come from: each capacity mode of its list in each zone of ZONE.

The order is the fallback's: the modes in the recipe's order (a reservation first when there is one) and,
within a mode, the zones in ZONE's order. So `CAPACITY=flex-start,spot ZONE=us-east5-b,us-east5-a` tries
flex-start in us-east5-b, then in us-east5-a, then spot in each. Kueue's TPU flavors follow this order
(tpu_rl.infra.kueue_queues), and `run` moves on along it when a place has no stock (scripts/pipeline/gke/
capacity.py). A reservation lives in one zone, the first of ZONE (preflight looks it up there), so it has
a place in that zone only. Names in the first zone are those a single-zone stack always had, so adding a
zone to ZONE adds pools and flavors and changes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode, ModeRules


def zone_suffix(zone: str) -> str:
    """The letter of a zone (us-east5-b -> b); settings check that zones are named <region>-<letter>."""
    return zone.rsplit("-", 1)[1]


@dataclass(frozen=True)
class Place:
    mode: CapacityMode
    zone: str
    first_zone: bool  # the first zone of ZONE: the names a single-zone stack always had
    zoned: bool  # ZONE lists more than one zone, so messages name the zone

    @property
    def rules(self) -> ModeRules:
        return MODE_RULES[self.mode]

    @property
    def suffix(self) -> str:
        return "" if self.first_zone else zone_suffix(self.zone)

    @property
    def flavor(self) -> str:
        return conventions.tpu_flavor_name(self.mode, self.suffix)

    def pool_name(self, slice_index: int) -> str:
        return conventions.tpu_pool_name(slice_index, self.mode, self.suffix)

    def construct_id(self, slice_index: int) -> str:
        """The reservation's pools keep their construct ids, so a stack deployed before fallback lists
        existed keeps its pools; so do the first zone's."""
        if self.rules.legacy_names:
            return f"tpu-slice-{slice_index}"
        return f"tpu-slice-{self.mode}-{self.suffix}-{slice_index}" if self.suffix else \
            f"tpu-slice-{self.mode}-{slice_index}"

    @property
    def in_zone(self) -> str:
        """' in <zone>' when ZONE lists several, else nothing: "no spot capacity in us-east5-b"."""
        return f" in {self.zone}" if self.zoned else ""

    @property
    def label(self) -> str:
        """How messages name it: the mode, and the zone when ZONE lists several."""
        return f"{self.mode}{self.in_zone}"


def tpu_places(modes: Sequence[CapacityMode], zones: Sequence[str]) -> tuple[Place, ...]:
    """Every (mode, zone) with TPU pools, in fallback order (see the module)."""
    zoned = len(zones) > 1
    return tuple(Place(mode, zone, index == 0, zoned)
                 for mode in modes
                 for index, zone in enumerate(zones[:1] if MODE_RULES[mode].reservation else zones))
