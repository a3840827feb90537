"""A new recipe is a [recipes.<name>] table and nothing else: two recipes made only here, on a model none of
the catalog's recipes uses (qwen3-8b, a dense Qwen3 that MaxText 0.2.4 knows), one on GKE and one on a TPU
VM, load, synthesize their stacks, render their JobSets and startup script and are listed and priced by
`tpu-rl recipes` with no change to code; and the MaxText CPU chain's tiny model of it comes from its own
config, with no entry for it either."""

from __future__ import annotations

import copy
import json
import re
import subprocess

import pytest

from conftest import recipe_table, resources, synthesize
from maxtext_cpu.chain import HERE, need_venv, step_env
from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.recipes import build_recipes, example_settings
from tpu_rl.recipes.runs.maxtext_values import release_schema
from tpu_rl.scripts.cli.offline import recipe_facts

MODEL = {"maxtext_name": "qwen3-8b", "hf_repo": "Qwen/Qwen3-8B", "tokenizer": "Qwen/Qwen3-8B", "scan_layers": True}
RL = {"num_batches": 20, "checkpoint_period": 10, "overrides": ["batch_size=4", "rl.num_generations=2"]}
NEW = {
    "qwen3-8b-v6e8": {
        "description": "Qwen3-8B GRPO on two v6e-4 hosts (2x4) with Pathways on GKE, for this test only",
        "platform": "gke", "pathways": True, "capacity": "spot", "maxtext_version": "0.2.4",
        "cpu_machine_type": "n4-standard-64", "durations_minutes": {"convert": 10, "train": 20, "export": 10},
        "model": MODEL, "rl": RL,
        "tpu": {"generation": "v6e", "topology": "2x4", "machine_type": "ct6e-standard-4t", "slices": 1},
    },
    "qwen3-8b-vm": {
        "description": "Qwen3-8B GRPO on one ct6e-standard-8t TPU VM, for this test only",
        "platform": "vm", "pathways": False, "capacity": "on-demand", "maxtext_version": "0.2.4",
        "durations_minutes": {"convert": 10, "train": 20, "export": 10},
        "model": MODEL, "rl": RL,
        "tpu": {"generation": "v6e", "topology": "2x4", "machine_type": "ct6e-standard-8t", "slices": 1},
    },
}


@pytest.fixture(scope="module")
def new_recipes():
    table = recipe_table()
    assert not any(entry["model"]["maxtext_name"] == MODEL["maxtext_name"] for entry in table["recipes"].values())
    table["recipes"] = copy.deepcopy(NEW)
    return build_recipes(table)


@pytest.fixture(scope="module")
def stacks(new_recipes, tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("new-recipes"), recipes=new_recipes)


def test_maxtext_knows_the_model_the_new_recipes_name():
    # configs/types.py's model_name choices of the release, as tools/generate_maxtext_keys.py read them
    assert MODEL["maxtext_name"] in release_schema("0.2.4")["keys"]["model_name"]["choices"]


def test_each_new_recipe_gets_its_own_stack_sized_from_its_table(stacks):
    assert {"qwen3-8b-v6e8", "qwen3-8b-vm"} <= set(stacks)
    pools = resources(stacks["qwen3-8b-v6e8"], "google_container_node_pool").values()
    assert [pool["placement_policy"]["tpu_topology"] for pool in pools if "placement_policy" in pool] == ["2x4"]
    (instance,) = [body for kind in stacks["qwen3-8b-vm"]["resource"].values() for body in kind.values()
                   if "metadata_startup_script" in body]
    assert "\npython3 -m maxtext.checkpoint_conversion.to_maxtext \\\n    model_name=qwen3-8b \\\n" in (
        instance["metadata_startup_script"])


def test_the_gke_recipe_renders_its_three_jobsets_on_its_model(new_recipes):
    manifests = jobs.render_manifests(spec_of(new_recipes["qwen3-8b-v6e8"]), example_settings())
    assert set(manifests) == {"convert", "train", "export"}
    for step, manifest in manifests.items():
        assert re.search(r"model_name=qwen3-8b\b", str(manifest)), step
    assert "--hf_model_path=Qwen/Qwen3-8B" in str(manifests["convert"])
    assert "--hf_model_path=Qwen/Qwen3-8B" in str(manifests["export"])  # 0.2.4's to_huggingface takes it


def test_the_vm_recipe_renders_its_startup_script_on_its_model(new_recipes):
    script = jobs.render_startup_script(spec_of(new_recipes["qwen3-8b-vm"]), example_settings())
    assert "\nreadonly MAXTEXT_PIP='maxtext[tpu-post-train]==0.2.4'\n" in script  # its release's pip
    assert script.count("model_name=qwen3-8b ") == 3  # convert, train and export


def test_the_maxtext_cpu_chain_shrinks_the_new_model_from_its_own_config():
    # tests/maxtext_cpu/tiny.py reads MaxText's HF_MODEL_CONFIGS["qwen3-8b"]: a dense model, so no experts
    code = ("import json, tiny; tiny._tokenizer('qwen3-8b'); "
            "print(json.dumps(tiny.tiny_sizes(tiny._real_config('qwen3-8b'))))")
    done = subprocess.run([str(need_venv("0.2.4")), "-c", code], cwd=HERE, env=step_env("0.2.4"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 512}


def test_tpu_rl_recipes_lists_and_prices_the_new_recipes(new_recipes):
    for name, recipe in new_recipes.items():
        facts = recipe_facts(recipe)
        assert (facts["name"], facts["model"], facts["topology"]) == (name, "Qwen/Qwen3-8B", "2x4")
        assert facts["hourly_usd_estimate"] > 0  # priced from prices.toml by its machines, not by its name
