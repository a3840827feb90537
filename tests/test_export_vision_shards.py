"""The export's vision-tower step (jobs/export.py) on a sharded export, as the real 26B one is.

The real Gemma 4 26B export is over to_huggingface's 3 GB shard size, so MaxText writes it as
model-0000i-of-0000N.safetensors with model.safetensors.index.json; the tiny model's export fits one
model.safetensors, so the chain of tests/test_maxtext_real.py runs the script's other branch only. Here
MaxText 0.2.4's own save path writes the tiny model's text tensors in shards (tests/maxtext_cpu/
sharded_export.py), the rendered script runs on it in the release's venv, and transformers loads the
result as a user would.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tpu_rl.jobs.export import VISION_SHARD, carry_vision_script
from tpu_rl.jobs.paths import ArtifactPaths
from maxtext_cpu.chain import Chain, in_venv, last_json, need_venv, tiny_model
from peers.fixtures import peer_settings, spec_of
from tpu_rl.recipes import get_recipe

RECIPE = "gemma4-v6e64"
SHARD_BYTES = 256 * 1024  # the tiny text tensors (~1 MB) in four of MaxText's shards


def _tensor_bytes(shard: Path) -> int:
    """The bytes of a safetensors file's tensors, from its header (8-byte length, then JSON)."""
    with shard.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(end - start for key, entry in header.items() if key != "__metadata__"
               for start, end in [entry["data_offsets"]])



pytestmark = pytest.mark.usefixtures("maxtext_warm_interpreters")  # tests/conftest.py

def test_the_vision_tower_is_carried_into_a_sharded_export_which_then_reloads_whole(tmp_path):
    recipe = peer_settings().recipe(get_recipe(RECIPE))
    need_venv(recipe.maxtext_version)
    prefixes = recipe.model.vision_parts
    tiny = tiny_model(recipe)
    source_map = json.loads((tiny / "model.safetensors.index.json").read_text())["weight_map"]
    vision_shards = {shard for key, shard in source_map.items() if key.startswith(prefixes)}
    assert len(vision_shards) >= 2, f"the tiny model's vision tensors lie in one shard: {vision_shards}"

    export = tmp_path / "hf"
    written = in_venv(recipe.maxtext_version, "sharded_export.py", str(tiny), str(export), ",".join(prefixes),
                      str(SHARD_BYTES))
    assert written.returncode == 0, written.stderr[-3000:]
    maxtext_shards = last_json(written.stdout)["shards"]
    assert len(maxtext_shards) >= 2 and not (export / "model.safetensors").exists(), maxtext_shards
    before = json.loads((export / "model.safetensors.index.json").read_text())
    assert not [key for key in before["weight_map"] if key.startswith(prefixes)]

    chain = Chain(recipe, ArtifactPaths(spec_of(recipe), peer_settings()), tmp_path, tiny)
    run = chain.run_script("carry-vision", carry_vision_script(str(tiny), f"{export}/", prefixes))
    assert run.returncode == 0, run.log[-3000:]

    after = json.loads((export / "model.safetensors.index.json").read_text())
    vision = {key for key in source_map if key.startswith(prefixes)}
    assert {key: after["weight_map"][key] for key in vision} == dict.fromkeys(vision, VISION_SHARD)
    assert {k: v for k, v in after["weight_map"].items() if k not in vision} == before["weight_map"]
    shards = sorted(set(after["weight_map"].values()))
    assert shards == sorted([*maxtext_shards, VISION_SHARD])
    assert after["metadata"]["total_size"] == sum(_tensor_bytes(export / shard) for shard in shards)

    reload = in_venv(recipe.maxtext_version, "reload.py", str(tiny), str(export))
    assert reload.returncode == 0, reload.stderr[-3000:]
    result = last_json(reload.stdout)
    assert result["export_class"] == result["original_class"] == "Gemma4ForConditionalGeneration"
    assert result["missing"] == [] and result["unexpected"] == [] and result["mismatched"] == [], result
    # every tensor of the original, the vision tower's included, is in the export and equal to it
    assert result["only_in_original"] == [] and result["only_in_export"] == [], result
    assert result["differing_tensors"] == [] and result["max_logit_diff"] == 0.0, result
