"""Cost estimates: chips x $/chip-hour for the capacity mode, plus the GKE/VM overheads, from prices.toml."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from tpu_rl.recipes import all_recipes, build_recipes, conventions, example_settings, get_recipe
from tpu_rl.recipes.costs.prices import load_prices, parse_prices
from tpu_rl.recipes.costs.run import hourly_estimate, pipeline_run_estimate, run_table
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.runs.spec import RunSpec

PRICES_TEXT = resources.files("tpu_rl.recipes.costs").joinpath("prices.toml").read_text()
RECIPES_TEXT = resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text()


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
    tpu = [entry for modes in table["tpu"].values() for entry in modes.values()]
    entries = [*tpu, *table["machine"].values(), table["gke"], table["nat"]]
    for entry in entries:
        assert entry["source"].startswith("https://cloud.google.com/")
        assert len(entry["checked"]) == 10 and entry["checked"].startswith("20")
        assert isinstance(entry["confirmed"], bool)


def test_every_capacity_mode_has_a_tpu_price_and_the_unconfirmed_ones_say_how_they_were_derived():
    table = tomllib.loads(PRICES_TEXT)["tpu"]["v6e"]
    assert set(table) == {"reservation", "flex-start", "spot", "on-demand"}
    for entry in table.values():
        assert entry["confirmed"] or entry["note"]
    assert "estimate" in table["flex-start"]["note"] and "on-demand" in table["flex-start"]["note"]


def test_every_machine_type_the_recipes_and_stacks_use_has_a_price():
    prices = load_prices()
    used = {r.cpu_machine_type for r in all_recipes().values() if r.cpu_machine_type}
    used.add(conventions.SYSTEM_POOL_MACHINE_TYPE)
    assert used <= set(prices.machines)


# The expected figures below are worked out by hand from recipes/costs/prices.toml (us-east5 list prices) and the
# recipe table, never by tpu_rl.recipes.costs.run: v6e chip-hour $1.89 reserved, $1.35 spot, $2.70 on demand, $2.70
# flex-start (an estimate);
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
    # qwen3-v6e32's overheads while training stay $3.03 + $0.134 + $0.10 + $0.019 = $3.283; only the
    # chip-hour changes. Outside train the slice is gone: $3.03 + $0.134 + $0.10 + NAT for the CPU and
    # system nodes (2 x $0.0014 + $0.005 = $0.0078) = $3.2718.
    expected = {
        "spot": (1.35, 46.483, "$46.48/h in train, $3.27/h in convert/export"),  # 32 x $1.35 = $43.20, + $3.283
        "on-demand": (2.70, 89.683, "$89.68/h in train, $3.27/h in convert/export"),  # 32 x $2.70 = $86.40, + $3.283
    }
    for mode, (chip_hour, total, summary) in expected.items():
        breakdown = hourly_estimate(_with("qwen3-v6e32", capacity=mode))
        assert breakdown.lines[0].unit_price == pytest.approx(chip_hour)
        assert breakdown.total == pytest.approx(total)
        assert breakdown.outside_train == pytest.approx(3.2718)
        assert not breakdown.has_reserved and breakdown.summary() == summary


def test_flex_start_bills_the_slice_and_its_nat_share_only_in_train():
    """qwen3-v6e32 on flex-start: 32 chips x $2.70 = $86.40 while training. NAT: the CPU and system nodes
    always (2 x $0.0014 + $0.005 = $0.0078), the 8 TPU hosts on top only in train (10 nodes cost $0.019,
    so $0.019 - $0.0078 = $0.0112). Train $86.40 + $3.03 + $0.134 + $0.10 + $0.0078 + $0.0112 = $89.683/h;
    convert and export $3.03 + $0.134 + $0.10 + $0.0078 = $3.2718/h."""
    breakdown = hourly_estimate(_with("qwen3-v6e32", capacity="flex-start"))
    lines = {line.item: (line.hourly, line.train_only) for line in breakdown.lines}
    assert lines == {
        "TPU v6e chips (flex-start)": (pytest.approx(86.40), True),
        "CPU pool n4-standard-64": (pytest.approx(3.03), False),
        "system pool e2-standard-4": (pytest.approx(0.134), False),
        "GKE cluster management fee": (pytest.approx(0.10), False),
        "Cloud NAT (2 nodes)": (pytest.approx(0.0078), False),
        "Cloud NAT for 8 TPU hosts": (pytest.approx(0.0112), True),
    }
    assert (breakdown.total, breakdown.outside_train) == (pytest.approx(89.683), pytest.approx(3.2718))
    assert breakdown.summary() == "$89.68/h in train, $3.27/h in convert/export"


def test_a_run_without_a_reservation_bills_tpu_chip_hours_only_in_train():
    """qwen3-v6e32 on flex-start, 40 + 90 + 40 minutes at the rates above:
    convert and export $3.2718 x 40/60 = $2.1812 each, no chip-hour billed, 32 x 40/60 = 21.33 avoided;
    train $89.683 x 90/60 = $134.5245, 32 x 90/60 = 48.0 chip-hours billed;
    the run $134.5245 + 2 x $2.1812 = $138.8869, 48.0 chip-hours billed and 42.67 avoided."""
    run = pipeline_run_estimate(RunSpec.of_catalog(_with("qwen3-v6e32", capacity="flex-start")))
    assert [(s.step, s.usd, s.tpu_chip_hours, s.tpu_chip_hours_avoided) for s in run.steps] == [
        ("convert", pytest.approx(2.1812, abs=1e-4), 0.0, pytest.approx(21.3333, abs=1e-4)),
        ("train", pytest.approx(134.5245, abs=1e-4), pytest.approx(48.0), 0.0),
        ("export", pytest.approx(2.1812, abs=1e-4), 0.0, pytest.approx(21.3333, abs=1e-4)),
    ]
    assert run.total == pytest.approx(138.8869, abs=1e-4)
    assert not run.has_reserved
    assert run.summary() == "$138.89 for 170 min (TPU only in train: 48.0 chip-hours billed, 42.7 avoided)"


def test_the_first_mode_of_a_fallback_list_is_the_one_priced():
    # reservation,flex-start is served by the reservation: priced as the reservation alone ($63.763/h).
    breakdown = hourly_estimate(_with("qwen3-v6e32", capacity="reservation,flex-start"))
    assert breakdown.total == pytest.approx(63.763) and breakdown.summary() == "$63.76/h (TPU reserved)"


def test_a_spot_vm_exists_through_every_step_so_it_bills_the_whole_run():
    """llama31-v6e8 on spot: one VM of 8 chips x $1.35 = $10.80, + NAT for 1 VM ($0.0064) = $10.8064/h,
    through all 5 + 10 + 5 = 20 minutes: $3.6021, 8 x 20/60 = 2.67 chip-hours, none avoided."""
    run = pipeline_run_estimate(RunSpec.of_catalog(_with("llama31-v6e8", capacity="spot")))
    assert run.total == pytest.approx(3.6021, abs=1e-4)
    assert (run.tpu_chip_hours, run.tpu_chip_hours_avoided) == (pytest.approx(8 * 20 / 60), 0.0)
    assert run.summary() == "$3.60 for 20 min"


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
    run = pipeline_run_estimate(RunSpec.of_catalog(get_recipe("qwen3-v6e32")))
    assert [(s.step, s.minutes) for s in run.steps] == [("convert", 40), ("train", 90), ("export", 40)]
    assert [s.usd for s in run.steps] == pytest.approx([42.5087, 95.6445, 42.5087], abs=1e-4)
    assert run.minutes == 170
    assert run.total == pytest.approx(180.6618, abs=1e-4)
    assert run.has_reserved and run.summary() == "$180.66 for 170 min (TPU reserved)"
    # A reservation's slice is up through every step: 32 chips x 170/60 = 90.67 chip-hours, none avoided.
    assert (run.tpu_chip_hours, run.tpu_chip_hours_avoided) == (pytest.approx(90.6667, abs=1e-4), 0.0)


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


def test_capacity_page_shows_a_run_without_a_reservation_as_capacity_flex_start_spot_gives_it():
    """docs/capacity.md's table for users without a reservation: every recipe as CAPACITY=flex-start,spot runs it
    (GKE recipes on flex-start, the VM on spot), from the price table. Two rows by hand: gemma4-v6e64's
    whole run, 64 chips x $2.70 = $172.80 + $4.65 + $0.134 + $0.10 + NAT for 18 nodes ($0.0302) = $177.7142/h
    for 90 min = $266.5713, plus convert and export at $4.65 + $0.134 + $0.10 + $0.0078 = $4.8918/h for
    2 x 40 min = $6.5224: $273.09, 64 x 90/60 = 96.0 chip-hours billed, 64 x 80/60 = 85.3 avoided; and the
    VM's run ($3.60, see above)."""
    from dataclasses import replace

    settings = replace(example_settings(), capacity=("flex-start", "spot"))
    table = run_table([settings.recipe(recipe) for recipe in all_recipes().values()])
    page = (Path(__file__).resolve().parents[1] / "docs" / "capacity.md").read_text()
    section = page.split("## Without a reservation", 1)[1].split("\n## ", 1)[0]
    assert table in section
    assert "| gemma4-v6e64 | flex-start | **whole run** | 170 | 96.0 | 85.3 | $273.09 |" in table
    assert "| llama31-v6e8 | spot | **whole run** | 20 | 2.7 | 0.0 | $3.60 |" in table


def test_each_recipes_evaluation_is_a_small_stated_share_of_train():
    from tpu_rl.recipes.runs.evaluation import eval_plan
    from tpu_rl.recipes.costs.run import evaluation_estimate

    # qwen3-v6e32: 2 batches x eval_batch_size 32; before, at 20 and 40, after (eval_interval 20, 50 steps);
    # train generates 50 steps x batch_size 8 x 4 generations.
    plan = eval_plan(get_recipe("qwen3-v6e32"))
    assert (plan.questions, plan.evaluations, plan.completions, plan.train_completions) == (64, 4, 256, 1600)
    assert evaluation_estimate(get_recipe("qwen3-v6e32")).minutes == pytest.approx(90 * 256 / 1856)
    # gemma4-v6e64: 64 questions before and after (eval_interval 0); 50 x 8 x rl.yml's 2 generations.
    plan = eval_plan(get_recipe("gemma4-v6e64"))
    assert (plan.questions, plan.evaluations, plan.completions, plan.train_completions) == (64, 2, 128, 800)
    # llama31-v6e8: seed 002's 10 batches of rl.yml's batch_size 1, before and after; 50 x 1 x 2.
    plan = eval_plan(get_recipe("llama31-v6e8"))
    assert (plan.questions, plan.evaluations, plan.completions, plan.train_completions) == (10, 2, 20, 100)
    cost = evaluation_estimate(get_recipe("llama31-v6e8"))
    assert cost.minutes == pytest.approx(10 * 20 / 120)  # of the recipe's 10 train minutes
    assert cost.summary().startswith("2 evaluations of 10 test questions: at most 2 min and $")
    assert cost.summary().endswith(" of the train step (17%)")


def test_a_recipe_without_evaluation_says_so():
    from tpu_rl.recipes.costs.run import evaluation_estimate
    from tpu_rl.recipes.runs.identity import with_sets

    recipe = with_sets(get_recipe("qwen3-v6e32"), ["num_test_batches=0"])
    assert evaluation_estimate(recipe).summary() == "no held-out evaluation (num_test_batches=0)"
    assert evaluation_estimate(recipe).minutes == 0


def test_two_zones_name_where_the_one_slice_may_run_and_change_no_figure():
    """ZONE=us-east5-b,us-east5-a: pools in both zones, but one train step runs one slice in one of them,
    so the estimate is the single-zone one ($89.683/h, above), and it says which zones."""
    recipe = _with("qwen3-v6e32", capacity="flex-start")
    one, two = hourly_estimate(recipe), hourly_estimate(recipe, zones=("us-east5-b", "us-east5-a"))
    assert two.lines == one.lines and two.total == pytest.approx(89.683)
    assert two.summary() == "$89.68/h (one slice, in us-east5-b or us-east5-a) in train, $3.27/h in convert/export"
    assert hourly_estimate(recipe, zones=("us-east5-b",)).summary() == one.summary()
