"""The README's job tables are generated from the recipe table and jobs/seed_differences.py."""

from pathlib import Path

from jobs.patches import patches_table
from jobs.seed_differences import differences_table, not_carried_over_table, xpk_differences_table
from recipes import all_recipes
from recipes.cost import run_table

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_source_patch_table_matches_the_recipe_table():
    assert patches_table(list(all_recipes().values())) in README


def test_readme_lists_every_deliberate_difference_from_the_seeds():
    assert differences_table() in README


def test_readme_lists_the_seed_steps_not_carried_over_and_the_differences_from_xpk():
    assert not_carried_over_table() in README
    assert xpk_differences_table() in README


def test_readme_run_table_matches_the_recipe_durations_and_prices():
    assert run_table(list(all_recipes().values())) in README
