"""The output checks against the GCS emulator: a step's output counts only when its writer finished it.

The complete layouts come from peers.fixtures.put_step_output, which writes what orbax-checkpoint and
MaxText's to_huggingface write (sources there). Each test takes one piece away, as an interrupted
container would leave it, and expects exactly that piece to be reported.
"""

from __future__ import annotations

import re

import pytest

from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.fixtures import EXPORT_SHARDS, peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cloud.gcs import missing_outputs

RECIPE = "qwen3-v6e32"
ROOT = "gs://rl-test-artifacts/qwen3-30b-a3b/"
RUN = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings()).run_name
CONVERTED = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings()).converted
assert re.fullmatch(rf"{re.escape(ROOT)}max-text-format/0\.2\.4-scan-[0-9a-f]{{7}}/", CONVERTED)
CONVERTED_STEP = CONVERTED + "0/"  # to_maxtext saves step 0 under its output directory
EXPORT = ROOT + f"hf-trained/{RUN}/"


@pytest.fixture
def paths() -> ArtifactPaths:
    return ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings())


@pytest.fixture
def trained_step(paths) -> str:
    """The step directory of the last checkpoint (its number is the recipe's last step)."""
    assert paths.final_params.startswith(ROOT + f"trained/{RUN}/checkpoints/actor/")
    return paths.final_params.removesuffix("model_params/")


def missing(gcs, paths, step: str) -> list[str]:
    return [req.describe() for req in missing_outputs(gcs, paths, step)]


def delete(gcs, url: str) -> None:
    bucket, name = split_gs_url(url)
    gcs.bucket(bucket).blob(name).delete()


def upload(gcs, url: str, data: bytes) -> None:
    bucket, name = split_gs_url(url)
    gcs.bucket(bucket).blob(name).upload_from_string(data)


@pytest.mark.parametrize("step", ["convert", "train", "export"])
def test_a_complete_output_is_verified(gcs, paths, step):
    put_step_output(gcs, get_recipe(RECIPE), step)
    assert missing(gcs, paths, step) == []


def test_a_conversion_without_the_orbax_completion_marker_is_missing(gcs, paths):
    put_step_output(gcs, get_recipe(RECIPE), "convert")
    delete(gcs, CONVERTED_STEP + "commit_success.txt")
    assert missing(gcs, paths, "convert") == [f"{CONVERTED_STEP}commit_success.txt (orbax completion marker)"]


NO_FINISHED_STEP = "<step>/commit_success.txt (no checkpoint step with orbax's commit marker yet)"


def test_a_training_checkpoint_without_the_orbax_completion_marker_is_no_finished_step(gcs, paths, trained_step):
    put_step_output(gcs, get_recipe(RECIPE), "train")
    delete(gcs, trained_step + "commit_success.txt")
    assert missing(gcs, paths, "train") == [paths.actor_checkpoints + NO_FINISHED_STEP]


def test_an_absent_checkpoint_is_no_finished_step(gcs, paths):
    assert missing(gcs, paths, "train") == [paths.actor_checkpoints + NO_FINISHED_STEP]


def test_a_finished_step_without_its_model_params_is_missing(gcs, paths, trained_step):
    put_step_output(gcs, get_recipe(RECIPE), "train")
    bucket, prefix = split_gs_url(trained_step + "model_params/")
    for blob in list(gcs.list_blobs(bucket, prefix=prefix)):
        blob.delete()
    assert missing(gcs, paths, "train") == [f"objects under {trained_step}model_params/"]


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "tokenizer.json"])
def test_an_export_without_its_config_or_a_tokenizer_file_is_missing(gcs, paths, name):
    put_step_output(gcs, get_recipe(RECIPE), "export")
    delete(gcs, EXPORT + name)
    assert missing(gcs, paths, "export") == [EXPORT + name]


def test_an_export_without_a_shard_named_in_the_index_is_missing(gcs, paths):
    put_step_output(gcs, get_recipe(RECIPE), "export")
    delete(gcs, EXPORT + EXPORT_SHARDS[1])
    assert missing(gcs, paths, "export") == [
        f"{EXPORT}{EXPORT_SHARDS[1]} (named in model.safetensors.index.json)"]


def test_an_export_whose_index_was_never_written_is_missing(gcs, paths):
    # to_huggingface uploads the index after every shard: shards without it are an interrupted export.
    put_step_output(gcs, get_recipe(RECIPE), "export")
    delete(gcs, EXPORT + "model.safetensors.index.json")
    assert missing(gcs, paths, "export") == [f"{EXPORT}model.safetensors.index.json (or model.safetensors)"]


def test_an_export_with_an_unreadable_index_is_missing(gcs, paths):
    put_step_output(gcs, get_recipe(RECIPE), "export")
    upload(gcs, EXPORT + "model.safetensors.index.json", b'{"metadata": {}}')
    assert missing(gcs, paths, "export") == [
        f"{EXPORT}model.safetensors.index.json (with a readable weight_map)"]


def test_a_small_export_in_one_file_is_verified(gcs, paths):
    # Under 3 GB, to_huggingface writes one model.safetensors and no index (shard_checkpoint).
    put_step_output(gcs, get_recipe(RECIPE), "export")
    delete(gcs, EXPORT + "model.safetensors.index.json")
    for shard in EXPORT_SHARDS:
        delete(gcs, EXPORT + shard)
    upload(gcs, EXPORT + "model.safetensors", b"\0")
    assert missing(gcs, paths, "export") == []


def test_an_empty_export_lists_every_piece(gcs, paths):
    assert missing(gcs, paths, "export") == [
        EXPORT + "config.json", EXPORT + "tokenizer_config.json", EXPORT + "tokenizer.json",
        f"{EXPORT}model.safetensors.index.json (or model.safetensors)"]


def test_no_bucket_means_every_piece_is_missing(gcs, paths):
    bucket = gcs.bucket("rl-test-artifacts")
    bucket.delete(force=True)
    assert missing(gcs, paths, "convert") == [f"objects under {CONVERTED_STEP}items/",
                                              f"{CONVERTED_STEP}commit_success.txt (orbax completion marker)"]
