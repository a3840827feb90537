"""The list prices in recipes/costs/prices.toml, read once and checked (every price says where it comes from
and when), and how a dollar amount prints."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from tpu_rl.recipes.capacity.modes import CapacityMode
from tpu_rl.recipes.errors import UserError


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str
    checked: str


def usd(amount: float) -> str:
    return f"${amount:,.2f}"


@dataclass(frozen=True)
class PriceTable:
    region: str
    tpu: dict[str, dict[str, Price]]  # generation -> capacity mode -> price per chip-hour
    machines: dict[str, Price]  # machine type -> on-demand price per hour
    gke_cluster: Price
    nat_per_vm: Price
    nat_max_vms: int
    nat_cap: float
    nat_per_ip: float

    def tpu_chip_hour(self, generation: str, capacity: str) -> Price:
        by_mode = self.tpu.get(generation)
        if by_mode is None or capacity not in by_mode:
            raise UserError(
                f"recipes/costs/prices.toml has no {capacity} price for TPU {generation}: add [tpu.{generation}.{capacity}] "
                f"{TPU_PRICE_KEY} = <USD per chip-hour> with its source and date"
            )
        return by_mode[capacity]

    def machine(self, machine_type: str) -> Price:
        price = self.machines.get(machine_type)
        if price is None:
            raise UserError(
                f"recipes/costs/prices.toml has no price for machine type '{machine_type}': add "
                f"[machine.{machine_type}] {MACHINE_PRICE_KEY} = <USD per hour> with its source and date"
            )
        return price

    def nat_hourly(self, vms: int) -> float:
        # Per VM up to the cap; one NAT IP (auto-allocated) for a gateway this size.
        gateway = self.nat_cap if vms > self.nat_max_vms else self.nat_per_vm.usd_per_hour * vms
        return gateway + self.nat_per_ip


def _price(entry: dict, key: str) -> Price:
    return Price(
        usd_per_hour=float(entry[key]),
        source=entry["source"],
        checked=entry["checked"],
    )


TPU_PRICE_KEY = "chip_hour"  # [tpu.<generation>.<capacity mode>] chip_hour = USD per chip-hour
MACHINE_PRICE_KEY = CapacityMode.ON_DEMAND.value  # [machine.<type>] on-demand = USD per hour: CPU pools run on demand


def parse_prices(table: dict) -> PriceTable:
    """Build the price table from parsed TOML; every price must say where it comes from and when."""
    try:
        tpu = {
            generation: {mode: _price(entry, TPU_PRICE_KEY) for mode, entry in modes.items()}
            for generation, modes in table["tpu"].items()
        }
        machines = {name: _price(entry, MACHINE_PRICE_KEY) for name, entry in table["machine"].items()}
        nat = table["nat"]
        return PriceTable(
            region=table["region"],
            tpu=tpu,
            machines=machines,
            gke_cluster=_price(table["gke"], "cluster"),
            nat_per_vm=_price(nat, "per_vm"),
            nat_max_vms=int(nat["max_vms"]),
            nat_cap=float(nat["cap"]),
            nat_per_ip=float(nat["per_ip"]),
        )
    except KeyError as missing:
        raise UserError(f"recipes/costs/prices.toml lacks {missing}: every price needs a value, source and checked date") from None


@cache
def load_prices() -> PriceTable:
    text = resources.files("tpu_rl.recipes.costs").joinpath("prices.toml").read_text()
    return parse_prices(tomllib.loads(text))
