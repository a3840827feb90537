"""The recipe table: derived facts, and every load-time rule with a one-line error naming the field."""

from __future__ import annotations

import copy

import pytest
from conftest import recipe_table

from tpu_rl.recipes import UserError, all_recipes, build_recipes, get_recipe


@pytest.fixture(scope="module")
def table() -> dict:
    return recipe_table()


def with_change(table: dict, recipe: str, path: str, value) -> dict:
    """A copy of the table with one field of one recipe set (dotted path), or deleted when value is None."""
    changed = copy.deepcopy(table)
    node = changed["recipes"][recipe]
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[key]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return changed


def error_of(table: dict) -> str:
    with pytest.raises(UserError) as caught:
        build_recipes(table)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_three_seed_recipes_are_the_stack_names():
    assert list(all_recipes()) == ["qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"]


@pytest.mark.parametrize(
    ("name", "topology", "machine", "slices", "hosts", "chips", "accelerator"),
    [
        ("qwen3-v6e32", "4x8", "ct6e-standard-4t", 1, 8, 32, "v6e-32"),
        ("gemma4-v6e64", "8x8", "ct6e-standard-4t", 1, 16, 64, "v6e-64"),
        ("llama31-v6e8", "2x4", "ct6e-standard-8t", 1, 1, 8, "v6e-8"),
    ],
)
def test_shapes_derive_hosts_from_chips_per_vm(name, topology, machine, slices, hosts, chips, accelerator):
    shape = get_recipe(name).shape
    assert (shape.topology, shape.machine_type, shape.slices) == (topology, machine, slices)
    assert shape.hosts_per_slice == hosts
    assert shape.total_chips == chips
    assert shape.accelerator_type == accelerator


def test_platforms_and_capacity_follow_the_seeds():
    assert [r.platform for r in all_recipes().values()] == ["gke", "gke", "vm"]
    assert {r.capacity for r in all_recipes().values()} == {("reservation",)}
    assert get_recipe("gemma4-v6e64").cpu_machine_type == "c4d-standard-96"


def test_machine_sizes_come_from_the_table():
    assert get_recipe("qwen3-v6e32").tpu_host.vcpus == 180
    assert get_recipe("gemma4-v6e64").cpu_machine.memory_gib == 372
    assert get_recipe("llama31-v6e8").cpu_machine is None


def test_unknown_recipe_names_the_choices():
    with pytest.raises(UserError, match="unknown recipe 'nope'.*qwen3-v6e32"):
        get_recipe("nope")


def test_two_slices_are_data_only(table):
    recipes = build_recipes(with_change(table, "qwen3-v6e32", "tpu.slices", 2))
    shape = recipes["qwen3-v6e32"].shape
    assert (shape.slices, shape.hosts_per_slice, shape.total_hosts, shape.total_chips) == (2, 8, 16, 64)


@pytest.mark.parametrize(
    ("recipe", "path", "value", "expected"),
    [
        ("qwen3-v6e32", "tpu.topology", "4x6", "tpu.topology '4x6' is not a v6e topology"),
        ("qwen3-v6e32", "tpu.topology", "1x1", "not a whole number of ct6e-standard-4t hosts"),
        ("llama31-v6e8", "tpu.topology", "4x4", "multi-host v6e slices need tpu.machine_type = 'ct6e-standard-4t'"),
        ("qwen3-v6e32", "tpu.machine_type", "ct5lp-hightpu-4t", "tpu.machine_type 'ct5lp-hightpu-4t' is not a v6e"),
        ("qwen3-v6e32", "tpu.generation", "v7x", "tpu.generation 'v7x' is unknown"),
        ("qwen3-v6e32", "tpu.slices", 0, "tpu.slices"),
        ("qwen3-v6e32", "cpu_machine_type", None, "cpu_machine_type is required for platform 'gke'"),
        ("qwen3-v6e32", "cpu_machine_type", "n2-standard-2", "cpu_machine_type 'n2-standard-2' has no [machines"),
        ("llama31-v6e8", "pathways", True, "pathways needs platform 'gke'"),
        ("llama31-v6e8", "tpu.slices", 2, "tpu.slices must be 1 for platform 'vm'"),
        ("qwen3-v6e32", "capacity", "preemptible", "capacity"),
        ("qwen3-v6e32", "capacity", "spot,spot", "names a mode twice"),
        ("qwen3-v6e32", "capacity", "", "names no mode"),
        ("llama31-v6e8", "capacity", "flex-start", "a TPU VM takes one of reservation, spot, on-demand, not flex-start"),
        ("llama31-v6e8", "capacity", ["spot", "on-demand"], "a TPU VM has one provisioning model"),
        ("qwen3-v6e32", "tpu.flex_start_max_run_hours", 200, "flex-start nodes run at most 168 hours"),
        ("qwen3-v6e32", "maxtext_version", "9.9.9", "maxtext_version '9.9.9' has no"),
        ("qwen3-v6e32", "rl.patches", ["no-such-patch"], "rl.patches names 'no-such-patch'"),
        ("qwen3-v6e32", "rl.overrides", ["not an override"], "rl.overrides"),
    ],
)
def test_bad_recipe_fails_at_load_with_one_line_naming_the_field(table, recipe, path, value, expected):
    message = error_of(with_change(table, recipe, path, value))
    assert expected in message
    assert recipe in message or "recipes." in message


def test_recipe_name_must_be_a_stack_name(table):
    changed = copy.deepcopy(table)
    changed["recipes"]["Qwen_Big"] = changed["recipes"].pop("qwen3-v6e32")
    assert "recipe 'Qwen_Big' is not a recipe name: use 2-20 lowercase letters" in error_of(changed)


def test_images_must_be_pinned(table):
    changed = copy.deepcopy(table)
    changed["maxtext"]["0.2.4"]["image"] = "us-docker.pkg.dev/x/tpu_post_training:latest"
    assert "maxtext.0.2.4.image" in error_of(changed)
    changed = copy.deepcopy(table)
    changed["pathways"]["tag"] = "latest"
    assert "pathways.tag" in error_of(changed)


def test_unknown_keys_are_rejected(table):
    assert "typo_field" in error_of(with_change(table, "qwen3-v6e32", "typo_field", 1))


def test_a_capacity_list_keeps_its_order(table):
    changed = with_change(table, "qwen3-v6e32", "capacity", "reservation, flex-start,spot")
    assert build_recipes(changed)["qwen3-v6e32"].capacity == ("reservation", "flex-start", "spot")


def test_flex_start_needs_a_max_run_duration(table):
    changed = copy.deepcopy(table)
    changed["recipes"]["qwen3-v6e32"]["capacity"] = "flex-start"
    del changed["recipes"]["qwen3-v6e32"]["tpu"]["flex_start_max_run_hours"]
    assert "flex-start needs tpu.flex_start_max_run_hours" in error_of(changed)
