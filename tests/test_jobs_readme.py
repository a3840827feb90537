"""The job tables in the README and docs/ are generated from the recipe table and tests/seed_differences.py;
each page holds its table verbatim."""

from pathlib import Path

from tpu_rl.jobs.patches import patches_table
from seed_differences import differences_table, not_carried_over_table, xpk_differences_table
from tpu_rl.recipes import all_recipes
from tpu_rl.recipes.costs.run import run_table
from tpu_rl.recipes.costs.standing import standing_table

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
PIPELINE = (REPO / "docs" / "pipeline.md").read_text()
SEED_DIFFERENCES = (REPO / "docs" / "seed-differences.md").read_text()


def test_pipeline_page_source_patch_table_matches_the_recipe_table():
    assert patches_table(list(all_recipes().values())) in PIPELINE


def test_seed_differences_page_lists_every_deliberate_difference_from_the_tutorials():
    assert differences_table() in SEED_DIFFERENCES


def test_seed_differences_page_lists_the_steps_not_carried_over_and_the_differences_from_xpk():
    assert not_carried_over_table() in SEED_DIFFERENCES
    assert xpk_differences_table() in SEED_DIFFERENCES


def test_readme_run_table_matches_the_recipe_durations_and_prices():
    assert run_table(list(all_recipes().values())) in README


def test_readme_says_what_each_stack_bills_with_no_run_as_the_commands_do():
    """The figures `run`, `runs`, `down` and `recipes` give (recipes/costs/standing.py account), and no
    promise that destroying the stack stops every TPU charge (issue 37)."""
    assert standing_table(list(all_recipes().values())) in README
    assert "Stops every TPU" not in README
    # nor that the stack bills the $/h of a run until destroyed, or that destroying it ends a reservation's bill:
    # deploying says the same account as the table (issue 37's review)
    said = " ".join(README.split())
    assert "until you destroy it" not in said and "billed) from deploy to destroy" not in said
    assert ("the stack bills, with no run, what [Stop paying](#stop-paying) lists" in said
            and "stops the stack's part; a reservation bills until its owner ends it" in said)
