"""The steps a run's data allows (recipes/runs/datasets.py): train_rl keeps at most num_batches x batch_size x
train_fraction rows of its split (MaxText 0.2.4 train_rl.py L375-378 `dataset_size`, 0.2.3 L339-342), so the
estimate caps the steps there and says so. The rows: openai/gsm8k's train split, 7,473 (its README's
dataset_info, configs main and socratic alike; recipes/runs/datasets.toml cites it). Each figure below is worked by hand."""

from __future__ import annotations

import pytest

from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.runs.datasets import data_limit, data_warning, trained_steps
from tpu_rl.recipes.runs.spec import RunSpec


def _recipe(name: str, *sets: str):
    return RunSpec.requested(get_recipe(name), sets).recipe


@pytest.mark.parametrize(("name", "sets", "steps"), [
    # qwen3-v6e32: batch_size=8, MaxText 0.2.4 drops the last partial batch: 7473 // 8 = 934
    ("qwen3-v6e32", ("num_batches=100000000",), 934),
    ("qwen3-v6e32", ("num_batches=935",), 934),
    ("qwen3-v6e32", ("num_batches=2000", "num_epoch=2"), 1868),  # 934 x 2 epochs, of 4,000 asked for
    ("qwen3-v6e32", ("num_batches=2000", "rl.num_iterations=2"), 1868),  # each batch trained twice
    # llama31-v6e8: rl.yml's batch_size=1; with 2, 0.2.3 keeps the last partial batch: ceil(7473 / 2) = 3737
    ("llama31-v6e8", ("num_batches=100000",), 7473),
    ("llama31-v6e8", ("num_batches=100000", "batch_size=2"), 3737),
])
def test_the_steps_are_capped_at_what_the_train_split_makes(name, sets, steps):
    recipe = _recipe(name, *sets)
    assert trained_steps(recipe) == steps
    assert f"it trains at most {steps:,} steps" in data_warning(recipe)


@pytest.mark.parametrize(("sets", "steps"), [((), 50), (("num_batches=934",), 934)])  # 934 x 8 = 7,472 rows
def test_a_run_within_its_data_is_not_capped_and_gets_no_warning(sets, steps):
    recipe = _recipe("qwen3-v6e32", *sets)
    assert trained_steps(recipe) == recipe.train_steps == steps and data_warning(recipe) is None


def test_another_dataset_or_data_files_are_not_capped():
    assert data_limit(_recipe("qwen3-v6e32", "num_batches=100000", "dataset_name=someone/else")) is None
    assert data_limit(_recipe("qwen3-v6e32", "num_batches=100000", "hf_train_files=gs://b/train.parquet")) is None


def test_the_row_count_names_its_source():
    limit = data_limit(_recipe("qwen3-v6e32", "num_batches=100000"))
    assert limit.rows == 7473 and "huggingface.co/datasets/openai/gsm8k" in limit.source


def test_the_socratic_subset_is_capped_as_main_is():
    # the same card's dataset_info gives config socratic 7,473 train rows: 7473 // 8 = 934 batches of qwen3's 8
    recipe = _recipe("qwen3-v6e32", "num_batches=100000000", "hf_subset=socratic")
    assert trained_steps(recipe) == 934
    assert "config_name socratic" in data_limit(recipe).source
