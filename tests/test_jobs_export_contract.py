"""The export bundles the tokenizer and config of the model we trained, not another one.

to_huggingface takes them from HF_IDS[model_name] (maxtext/utils/globals.py) unless --hf_model_path
names the repo (a flag from MaxText 0.2.4). Read from the pinned wheel, not restated."""

from __future__ import annotations

import ast
import zipfile

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.maxtext_schema import fetch_wheel
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import all_recipes, example_settings

SETTINGS = example_settings()


def hf_ids(version: str) -> dict[str, str]:
    wheel, why = fetch_wheel(version)
    if wheel is None:
        pytest.fail(f"the maxtext=={version} wheel is needed to read HF_IDS: {why}")
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read("maxtext/utils/globals.py").decode())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "HF_IDS" for t in node.targets):
            # Some entries are computed (os.environ.get(...)); the plain string entries are what we need.
            return {key.value: value.value for key, value in zip(node.value.keys, node.value.values)
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant)}
    raise AssertionError(f"no HF_IDS in maxtext {version}'s utils/globals.py")


@pytest.mark.parametrize("recipe", list(all_recipes().values()), ids=lambda recipe: recipe.name)
def test_the_export_takes_tokenizer_and_config_from_the_trained_models_repo(recipe):
    export = jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS))["export"]
    flags = dict(flag.removeprefix("--").partition("=")[::2] for flag in export.flags)
    source = flags.get("hf_model_path") or hf_ids(recipe.maxtext_version).get(export.value("model_name"))
    assert source == recipe.model.hf_repo


def test_llama_3_1_8b_would_bundle_the_base_models_tokenizer_in_0_2_3():
    """Why seed 002's model_name=llama3.1-8b is not kept (values read off the 0.2.3 wheel by hand)."""
    ids = hf_ids("0.2.3")
    assert ids["llama3.1-8b"] == "meta-llama/Llama-3.1-8B"
    assert ids["llama3.1-8b-Instruct"] == "meta-llama/Llama-3.1-8B-Instruct"
