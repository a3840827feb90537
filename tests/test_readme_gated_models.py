"""The README's path names what a newcomer cannot find alone: the licences of the gated models (each
recipe's hf_repo that the Hub gates, tests/peers/hf_hub.py) and how to find the address AUTHORIZED_CIDR
wants."""

from __future__ import annotations

import re
from pathlib import Path

from peers.hf_hub import MODELS
from tpu_rl.recipes import all_recipes

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_readme_names_each_gated_models_licence_page():
    unknown = {recipe.model.hf_repo for recipe in all_recipes().values()} - set(MODELS)
    assert not unknown, (f"tests/peers/hf_hub.py MODELS has no entry for {sorted(unknown)}: add whether the Hub "
                         "gates each and its licence, as its model page says")
    gated = {recipe.model.hf_repo for recipe in all_recipes().values() if MODELS[recipe.model.hf_repo][0]}
    assert gated  # Llama 3.1
    for repo in gated:
        assert f"https://huggingface.co/{repo}" in README, repo
    assert "Llama 3.1 Community License" in README


def test_the_readme_claims_no_gemma_licence_it_has_no_source_for():
    """Gemma 4 is Apache 2.0 by third-party pages and no source shows it gated (tests/peers/hf_hub.py): the
    README sends its users to the model page instead of naming a licence to accept."""
    gemma = next(recipe.model.hf_repo for recipe in all_recipes().values() if "gemma" in recipe.model.hf_repo)
    assert not MODELS[gemma][0]
    assert "Gemma licence" not in README and "Gemma are gated" not in " ".join(README.split())
    assert f"For Gemma, open https://huggingface.co/{gemma}" in " ".join(README.split())


def test_the_readme_shows_how_to_find_your_address_for_authorized_cidr():
    paragraph = next(part for part in README.split("\n\n") if "`AUTHORIZED_CIDR` is the" in part)
    assert re.search(r"`curl -s https://\S+`", paragraph) and "/32" in paragraph
