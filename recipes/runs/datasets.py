"""How many steps a run's training data allows: train_rl trains on at most what its dataset holds.

What train_rl does with its data (MaxText 0.2.3 and 0.2.4, trainers/post_train/rl/train_rl.py
prepare_datasets): it loads the split (rl.yml's dataset_name, subset and train_split), filters out prompts
longer than max_prefill_predict_length, keeps the first int(num_batches x batch_size x train_fraction) rows
(`dataset_size`), counting the filtered ones (grain's FilterMapDataset keeps its parent's length and yields
None for a dropped row: grain 0.2.18 _src/python/dataset/transformations/filter.py, so the run trains on
fewer rows rather than taking more), repeats them num_epoch times and batches them by batch_size (0.2.4
drops a last partial batch; 0.2.3 keeps it); each batch trains rl.num_iterations steps. A num_batches past the split's rows
therefore trains no more steps than the rows make, however many it asks for. The rows of each split are
in recipes/runs/datasets.toml with their source; a dataset not there, or data files, is not capped.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Protocol

from tpu_rl.recipes.catalog.entry import RlSpec
from tpu_rl.recipes.catalog.facts import MaxTextRelease


class DataRecipe(Protocol):
    """What this module reads of a recipe (recipes/catalog/recipe.py Recipe), named here rather than imported:
    Recipe.last_step reads trained_steps, and the imports go one way (tests/test_imports.py)."""

    maxtext: MaxTextRelease
    rl: RlSpec

    @property
    def train_steps(self) -> int: ...

    def eval_setting(self, key: str) -> float: ...

    def step_factor(self, key: str) -> float: ...


@cache
def _split_rows() -> dict:
    return tomllib.loads(resources.files("tpu_rl.recipes").joinpath("runs/datasets.toml").read_text())


def _setting(recipe: DataRecipe, key: str, defaults: dict) -> str:
    given = recipe.rl.override(key)
    return str(given) if given is not None else str(defaults[key])


@dataclass(frozen=True)
class DataLimit:
    """The training split's rows and the steps they allow this run, against the steps it asks for."""

    dataset: str  # e.g. "openai/gsm8k's train split"
    rows: int
    source: str
    steps: int  # the steps the rows allow
    asked: int  # Recipe.train_steps: the steps num_batches x ... asks for

    @property
    def caps(self) -> bool:
        return self.steps < self.asked

    def warning(self) -> str | None:
        """One line when the run asks for more steps than its data makes, else None."""
        if not self.caps:
            return None
        return (f"warning: this run asks for {self.asked:,} training steps, but train_rl keeps at most num_batches "
                f"x batch_size x train_fraction rows and {self.dataset} has {self.rows:,}: it trains at most "
                f"{self.steps:,} steps, and the estimate counts those; lower num_batches to match")


def data_limit(recipe: DataRecipe) -> DataLimit | None:
    """The steps this run's training data allows, or None where its rows are not known (another dataset
    than recipes/runs/datasets.toml lists, or hf_train_files)."""
    release = recipe.maxtext
    defaults = {**release.data_defaults, release.subset_key: release.data_defaults["subset"]}
    if _setting(recipe, "hf_train_files", defaults):
        return None
    name, split = _setting(recipe, "dataset_name", defaults), _setting(recipe, "train_split", defaults)
    entry = _split_rows().get(name, {}).get(_setting(recipe, release.subset_key, defaults), {})
    if split not in entry:
        return None
    rows, batch = int(entry[split]), int(recipe.eval_setting("batch_size"))
    kept = min(rows, int(recipe.rl.num_batches * batch * recipe.step_factor("train_fraction")))
    repeated = kept * recipe.step_factor("num_epoch")
    batches = math.floor(repeated / batch) if release.last_batch_dropped else math.ceil(repeated / batch)
    steps = int(batches * recipe.step_factor("rl.num_iterations"))
    return DataLimit(f"{name}'s {split} split", rows, entry["source"], steps, recipe.train_steps)


def trained_steps(recipe: DataRecipe) -> int:
    """The steps the run can train: what it asks for (Recipe.train_steps), capped by its data."""
    limit = data_limit(recipe)
    return min(limit.steps, limit.asked) if limit else recipe.train_steps


def data_warning(recipe: DataRecipe) -> str | None:
    """DataLimit.warning of the run, or None (its data is not known, or makes the steps it asks for)."""
    limit = data_limit(recipe)
    return limit.warning() if limit else None
