"""Cost estimates: chips x $/chip-hour for the capacity mode, plus the GKE/VM overheads, from prices.toml."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from recipes import all_recipes, build_recipes, conventions, get_recipe
from recipes.cost import hourly_estimate, load_prices, parse_prices, pipeline_run_estimate
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


# The expected figures below are worked out by hand from recipes/prices.toml (us-east5 list prices) and the
# recipe table, never by recipes.cost: v6e chip-hour $1.89 reserved, $1.35 spot, $2.70 on demand;
# n4-standard-64 $3.03, c4d-standard-96 $4.65, e2-standard-4 (system pool) $0.134, GKE fee $0.10;
# Cloud NAT $0.0014 per VM, $0.044 flat beyond 32 VMs, plus $0.005 for its one IP.
# qwen3-v6e32, one 4x8 slice of ct6e-standard-4t (4 chips each): 32 chips on 8 hosts, reservation:
#   TPU 32 x $1.89 = $60.48; CPU pool 1 x $3.03; system pool 1 x $0.134; GKE fee $0.10;
#   NAT for 8 hosts + 1 CPU node + 1 system node = 10 nodes: 10 x $0.0014 + $0.005 = $0.019
#   total $60.48 + $3.03 + $0.134 + $0.10 + $0.019 = $63.763 per hour.


def test_qwen3_tpu_line_is_32_chips_at_the_reserved_chip_hour_price():
    breakdown = hourly_estimate(get_recipe("qwen3-v6e32"))
    tpu = breakdown.lines[0]
    assert (tpu.quantity, tpu.unit, tpu.reserved) == (32, "chip", True)
    assert tpu.hourly == pytest.approx(60.48)  # 32 chips x $1.89
    assert breakdown.total == pytest.approx(63.763)
    assert breakdown.has_reserved and breakdown.summary() == "$63.76/h (TPU reserved)"


def test_gemma4_on_8x8_costs_twice_the_tpu_of_qwen3_on_4x8():
    qwen, gemma = hourly_estimate(get_recipe("qwen3-v6e32")), hourly_estimate(get_recipe("gemma4-v6e64"))
    assert gemma.reserved == pytest.approx(2 * qwen.reserved) == pytest.approx(120.96)  # 64 chips x $1.89


def test_spot_and_on_demand_use_their_own_chip_hour_price_and_are_not_reserved():
    # qwen3-v6e32's overheads stay $3.03 + $0.134 + $0.10 + $0.019 = $3.283; only the chip-hour changes.
    expected = {
        "spot": (1.35, 46.483),  # 32 x $1.35 = $43.20, + $3.283
        "on-demand": (2.70, 89.683),  # 32 x $2.70 = $86.40, + $3.283
    }
    for mode, (chip_hour, total) in expected.items():
        breakdown = hourly_estimate(_with("qwen3-v6e32", capacity=mode))
        assert breakdown.lines[0].unit_price == pytest.approx(chip_hour)
        assert breakdown.total == pytest.approx(total)
        assert not breakdown.has_reserved and "reserved" not in breakdown.summary()


def test_two_slices_double_the_chips_and_put_more_nodes_behind_nat():
    one, two = hourly_estimate(get_recipe("qwen3-v6e32")), hourly_estimate(_with("qwen3-v6e32", slices=2))
    assert two.lines[0].quantity == 2 * one.lines[0].quantity == 64
    # one slice: 8 hosts + CPU node + system node = 10 nodes; two slices: 16 + 1 + 1 = 18 nodes
    assert (one.lines[-1].item, one.lines[-1].hourly) == ("Cloud NAT (10 nodes)", pytest.approx(0.019))
    assert (two.lines[-1].item, two.lines[-1].hourly) == ("Cloud NAT (18 nodes)", pytest.approx(0.0302))


def test_gke_recipe_prices_cpu_pool_system_pool_cluster_fee_and_nat():
    """gemma4-v6e64: one 8x8 slice = 64 chips on 16 hosts, CPU pool c4d-standard-96, reservation."""
    lines = hourly_estimate(get_recipe("gemma4-v6e64")).lines
    assert {line.item: line.quantity for line in lines} == {
        "TPU v6e chips (reservation)": 64, "CPU pool c4d-standard-96": 1, "system pool e2-standard-4": 1,
        "GKE cluster management fee": 1, "Cloud NAT (18 nodes)": 1,  # 16 hosts + CPU node + system node
    }
    assert {line.item: line.hourly for line in lines} == pytest.approx({
        "TPU v6e chips (reservation)": 120.96,  # 64 x $1.89
        "CPU pool c4d-standard-96": 4.65,
        "system pool e2-standard-4": 0.134,
        "GKE cluster management fee": 0.10,
        "Cloud NAT (18 nodes)": 0.0302,  # 18 x $0.0014 + $0.005
    })


def test_nat_gateway_price_is_capped_beyond_32_vms():
    prices = load_prices()
    assert prices.nat_hourly(33) == prices.nat_hourly(200) == pytest.approx(0.049)  # $0.044 + $0.005
    assert prices.nat_hourly(10) == pytest.approx(0.019)  # 10 x $0.0014 + $0.005


def test_vm_recipe_is_one_tpu_vm_with_8_chips_and_its_nat_without_cluster_overheads():
    vm, nat = hourly_estimate(get_recipe("llama31-v6e8")).lines
    assert vm.quantity == 8 and "ct6e-standard-8t" in vm.item
    assert vm.hourly == pytest.approx(15.12)  # 8 chips x $1.89
    assert (nat.item, nat.hourly) == ("Cloud NAT (1 VM)", pytest.approx(0.0064))  # $0.0014 + $0.005


def test_pipeline_run_is_the_hourly_estimate_for_the_recipe_durations():
    """qwen3-v6e32 runs 40 + 90 + 40 minutes at $63.763/h (worked out above):
    convert and export $63.763 x 40/60 = $42.5087 each, train $63.763 x 90/60 = $95.6445,
    the run $63.763 x 170/60 = $180.6618."""
    run = pipeline_run_estimate(get_recipe("qwen3-v6e32"))
    assert [(s.step, s.minutes) for s in run.steps] == [("convert", 40), ("train", 90), ("export", 40)]
    assert [s.usd for s in run.steps] == pytest.approx([42.5087, 95.6445, 42.5087], abs=1e-4)
    assert run.minutes == 170
    assert run.total == pytest.approx(180.6618, abs=1e-4)
    assert run.has_reserved and run.summary() == "$180.66 for 170 min (TPU reserved)"


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
