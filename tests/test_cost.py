"""Cost estimates: chips x $/chip-hour for the capacity mode, plus the GKE/VM overheads, from prices.toml."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from recipes import all_recipes, build_recipes, conventions, get_recipe
from recipes.cost import (
    CPU_NODES_DURING_RUN,
    hourly_estimate,
    load_prices,
    parse_prices,
    pipeline_run_estimate,
)
from recipes.errors import UserError

PRICES_TEXT = resources.files("recipes").joinpath("prices.toml").read_text()
RECIPES_TEXT = resources.files("recipes").joinpath("recipes.toml").read_text()


def _with(name: str, **changes) -> object:
    """A copy of recipe `name` with fields of its [recipes.<name>] or [recipes.<name>.tpu] table changed."""
    table = tomllib.loads(RECIPES_TEXT)
    entry = table["recipes"][name]
    for key, value in changes.items():
        if key in entry["tpu"]:
            entry["tpu"][key] = value
        else:
            entry[key] = value
    return build_recipes(table)[name]


def test_every_price_names_its_source_date_and_whether_it_was_confirmed():
    table = tomllib.loads(PRICES_TEXT)
    entries = [*table["tpu"].values(), *table["machine"].values(), table["gke"], table["nat"]]
    for entry in entries:
        assert entry["source"].startswith("https://cloud.google.com/")
        assert len(entry["checked"]) == 10 and entry["checked"].startswith("20")
        assert isinstance(entry["confirmed"], bool)


def test_every_machine_type_the_recipes_and_stacks_use_has_a_price():
    prices = load_prices()
    used = {r.cpu_machine_type for r in all_recipes().values() if r.cpu_machine_type}
    used.add(conventions.SYSTEM_POOL_MACHINE_TYPE)
    assert used <= set(prices.machines)


def test_qwen3_tpu_line_is_32_chips_at_the_reserved_chip_hour_price():
    prices = load_prices()
    breakdown = hourly_estimate(get_recipe("qwen3-v6e32"))
    tpu = breakdown.lines[0]
    assert (tpu.quantity, tpu.unit, tpu.reserved) == (32, "chip", True)
    assert tpu.hourly == pytest.approx(32 * prices.tpu["v6e"]["reservation"].usd_per_hour)
    assert breakdown.has_reserved and breakdown.summary().endswith("(TPU reserved)")


def test_gemma4_on_8x8_costs_twice_the_tpu_of_qwen3_on_4x8():
    qwen, gemma = hourly_estimate(get_recipe("qwen3-v6e32")), hourly_estimate(get_recipe("gemma4-v6e64"))
    assert gemma.reserved == pytest.approx(2 * qwen.reserved)


def test_spot_and_on_demand_use_their_own_chip_hour_price_and_are_not_reserved():
    prices = load_prices()
    for mode in ("spot", "on-demand"):
        breakdown = hourly_estimate(_with("qwen3-v6e32", capacity=mode))
        assert breakdown.lines[0].unit_price == prices.tpu["v6e"][mode].usd_per_hour
        assert not breakdown.has_reserved and "reserved" not in breakdown.summary()
    spot = hourly_estimate(_with("qwen3-v6e32", capacity="spot")).total
    on_demand = hourly_estimate(_with("qwen3-v6e32", capacity="on-demand")).total
    assert spot < on_demand


def test_two_slices_double_the_chips_and_put_more_nodes_behind_nat():
    one, two = hourly_estimate(get_recipe("qwen3-v6e32")), hourly_estimate(_with("qwen3-v6e32", slices=2))
    assert two.lines[0].quantity == 2 * one.lines[0].quantity == 64
    nat_one, nat_two = one.lines[-1], two.lines[-1]
    overhead = CPU_NODES_DURING_RUN + conventions.SYSTEM_POOL_NODES
    assert (nat_one.item, nat_two.item) == (f"Cloud NAT ({8 + overhead} nodes)", f"Cloud NAT ({16 + overhead} nodes)")
    assert nat_two.hourly > nat_one.hourly


def test_gke_recipe_prices_cpu_pool_system_pool_cluster_fee_and_nat():
    prices = load_prices()
    recipe = get_recipe("gemma4-v6e64")
    items = {line.item: line for line in hourly_estimate(recipe).lines}
    cpu = items["CPU pool c4d-standard-96"]
    assert cpu.quantity == CPU_NODES_DURING_RUN and cpu.unit_price == prices.machines["c4d-standard-96"].usd_per_hour
    system = items[f"system pool {conventions.SYSTEM_POOL_MACHINE_TYPE}"]
    assert system.quantity == conventions.SYSTEM_POOL_NODES
    assert items["GKE cluster management fee"].hourly == prices.gke_cluster.usd_per_hour
    nodes = recipe.shape.total_hosts + CPU_NODES_DURING_RUN + conventions.SYSTEM_POOL_NODES
    assert items[f"Cloud NAT ({nodes} nodes)"].hourly == pytest.approx(
        prices.nat_per_vm.usd_per_hour * nodes + prices.nat_per_ip)


def test_nat_gateway_price_is_capped_beyond_32_vms():
    prices = load_prices()
    assert prices.nat_hourly(33) == prices.nat_hourly(200) == pytest.approx(prices.nat_cap + prices.nat_per_ip)
    assert prices.nat_hourly(10) < prices.nat_hourly(33)


def test_vm_recipe_is_one_tpu_vm_with_8_chips_and_its_nat_without_cluster_overheads():
    prices = load_prices()
    vm, nat = hourly_estimate(get_recipe("llama31-v6e8")).lines
    assert vm.quantity == 8 and "ct6e-standard-8t" in vm.item
    assert (nat.item, nat.hourly) == ("Cloud NAT (1 VM)", prices.nat_per_vm.usd_per_hour + prices.nat_per_ip)


def test_pipeline_run_is_the_hourly_estimate_for_the_recipe_durations():
    recipe = get_recipe("qwen3-v6e32")
    run = pipeline_run_estimate(recipe)
    minutes = recipe.durations_minutes
    assert [s.step for s in run.steps] == ["convert", "train", "export"]
    assert run.minutes == minutes.convert + minutes.train + minutes.export == 170
    assert run.total == pytest.approx(hourly_estimate(recipe).total * 170 / 60)
    assert run.has_reserved


def test_a_price_missing_from_the_table_is_one_line_naming_what_to_add():
    table = tomllib.loads(PRICES_TEXT)
    del table["machine"]["n4-standard-64"]
    prices = parse_prices(table)
    with pytest.raises(UserError, match=r"no price for machine type 'n4-standard-64'.*\[machine.n4-standard-64\]"):
        hourly_estimate(get_recipe("qwen3-v6e32"), prices)


def test_a_price_without_its_source_is_rejected():
    table = tomllib.loads(PRICES_TEXT)
    del table["gke"]["source"]
    with pytest.raises(UserError, match="lacks 'source'"):
        parse_prices(table)
