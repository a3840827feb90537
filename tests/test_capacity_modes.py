"""Each capacity mode has one home (issue 26): recipes/capacity/modes.py names the modes (CapacityMode) and
holds every rule the code decides on a mode by (MODE_RULES). Code elsewhere asks a rule, or names a member,
and never writes a mode's string: a new mode is then a row there, not a hunt through string comparisons."""

from __future__ import annotations

import ast
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from tpu_rl.recipes import all_recipes, example_settings
from tpu_rl.recipes.capacity.modes import CAPACITY_MODES, DEFAULT_WAIT_SECONDS, MODE_RULES, CapacityMode, parse_capacity
from tpu_rl.recipes.catalog.facts import QuotaMetrics
from tpu_rl.recipes.platforms import PLATFORMS

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("recipes", "infra", "stacks", "jobs", "scripts")
HOME = "recipes/capacity/modes.py"
MODES = {mode.value for mode in CapacityMode}
# "reservation" is also the name of the RESERVATION setting's field (BY_FIELD["reservation"], needs tables),
# so it counts only where it can only be a mode: compared, a default, assigned, or beside another mode.
ALSO_A_SETTING = {CapacityMode.RESERVATION.value}


def _is_mode(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in MODES


def _modes_only(node: ast.AST | None) -> bool:
    """A mode, or a literal tuple, list or set of nothing but modes."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_mode(element) for element in node.elts)
    return node is not None and _is_mode(node)


def _as_a_mode(tree: ast.AST) -> set[int]:
    """The lines where a string that is also a setting's name stands as a capacity mode."""
    lines: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            lines.update(n.lineno for n in ast.walk(node) if _is_mode(n))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if _is_mode(side) or isinstance(side, (ast.Tuple, ast.List, ast.Set)):
                    mark(side)
        elif isinstance(node, ast.MatchValue):
            mark(node.value)
        elif isinstance(node, ast.arguments):
            for default in (*node.defaults, *node.kw_defaults):
                if _modes_only(default):
                    mark(default)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _modes_only(node.value):
            mark(node.value)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            elements = [*node.keys, *node.values] if isinstance(node, ast.Dict) else node.elts
            if sum(_is_mode(element) for element in elements) > 1:
                mark(node)
    return lines


def mode_literals(source: str, filename: str = "<string>") -> list[int]:
    """The lines of `source` that write a capacity mode's string (see ALSO_A_SETTING)."""
    tree = ast.parse(source, filename)
    as_a_mode = _as_a_mode(tree)
    return sorted({node.lineno for node in ast.walk(tree) if _is_mode(node)
                   and (node.value not in ALSO_A_SETTING or node.lineno in as_a_mode)})


def _literals_outside_the_home() -> list[str]:
    found = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == HOME:
                continue
            text = path.read_text()
            lines = text.splitlines()
            found += [f"{relative}:{number}: {lines[number - 1].strip()}" for number in mode_literals(text, relative)]
    return found


def test_the_scan_sees_each_way_of_naming_a_mode():
    # Guards the guard: the forms this home replaced (settings, infra, jobs/train.py, preflight), and the
    # setting named reservation, which is not a mode.
    for line in ('if "flex-start" in recipe.capacity: pass', 'spot = props.capacity == "spot"',
                 'x = "DELETE" if props.capacity != "on-demand" else None',
                 'if "reservation" in recipe.capacity: pass', 'if capacity == "reservation": pass',
                 'STATIC = "reservation"', 'PREEMPTIBLE = ("spot", "flex-start")',
                 'MODEL = {"reservation": "RESERVATION_BOUND", "spot": "SPOT"}',
                 'def name(index, capacity="reservation"): pass', 'tpu_capacity: tuple = ("reservation",)',
                 'with_capacity(("on-demand",), source="CAPACITY")',
                 'match mode:\n    case "reservation": pass'):
        assert mode_literals(line), line
    for line in ('missing.append(BY_FIELD["reservation"])', 'if needed("reservation"): pass',
                 'RULES = ("reservation", "authorized_cidr")', 'x = _fields(BUCKET, ("reservation",))',
                 'EXAMPLE = {"reservation": "tpu-rl-example-reservation", "zone": "us-east5-b"}',
                 'SettingSpec("reservation", "RESERVATION", "the TPU reservation name")',
                 'wanted = set(needs) - {"reservation", "authorized_cidr"}',
                 'if MODE_RULES[mode].reservation: pass', 'f"capacity {mode}: spot-free"'):
        assert not mode_literals(line), line
    assert mode_literals('a = 1\nb = ["spot"]\n') == [2]


def test_no_capacity_mode_string_outside_its_home():
    found = _literals_outside_the_home()
    assert not found, ("a capacity mode's string outside recipes/capacity/modes.py: ask its rule in MODE_RULES "
                       "(or name a CapacityMode member) instead:\n" + "\n".join(found))


def test_every_mode_has_one_row_of_rules():
    assert set(MODE_RULES) == set(CapacityMode)
    assert CAPACITY_MODES == ("reservation", "flex-start", "spot", "on-demand")  # recipes.toml's spelling


def test_the_modes_stay_the_strings_recipes_and_runs_store():
    # A member would reach Terraform through jsii as a jsii enum, and yaml.safe_dump refuses it: recipes and
    # settings hold the modes' plain strings, whatever way they were given.
    assert parse_capacity("flex-start,spot") == ("flex-start", "spot")
    settings = replace(example_settings(), capacity=parse_capacity("flex-start,spot,on-demand"))
    for recipe in all_recipes().values():
        for given in (recipe, settings.deployable(recipe)[0], recipe.with_capacity((CapacityMode.SPOT,), "test")):
            assert all(type(mode) is str for mode in given.capacity), (recipe.name, given.capacity)
    assert all(type(mode) is str for mode in PLATFORMS["vm"].capacity)
    assert all(type(key) is str for key in DEFAULT_WAIT_SECONDS)


def test_what_the_platforms_take_and_wait():
    # The values the code held as literals before the table: the VM's modes and the default waits.
    assert PLATFORMS["vm"].capacity == ("reservation", "spot", "on-demand")
    assert PLATFORMS["gke"].capacity == ("reservation", "flex-start", "spot", "on-demand")
    assert dict(DEFAULT_WAIT_SECONDS) == {"reservation": 1800, "flex-start": 14400, "spot": 1800,
                                          "on-demand": 1800, "cpu": 1800}


@pytest.mark.parametrize("mode", list(CapacityMode), ids=str)
def test_a_mode_has_a_price_a_readable_quota_and_its_row_in_the_docs(mode):
    # What else a mode needs (docs/development.md): a chip-hour price per TPU generation in prices.toml, a
    # quota preflight can read (a field of [tpu.<generation>.quota]) and a row of capacity.md's table.
    prices = tomllib.loads(resources.files("tpu_rl.recipes.costs").joinpath("prices.toml").read_text())
    for generation, by_mode in prices["tpu"].items():
        assert mode.value in by_mode, f"prices.toml has no [tpu.{generation}.{mode}]"
    quota = MODE_RULES[mode].quota
    assert quota is None or quota in QuotaMetrics.model_fields, quota
    assert f"\n| `{mode}` |" in (ROOT / "docs" / "capacity.md").read_text(), f"docs/capacity.md has no row for {mode}"
