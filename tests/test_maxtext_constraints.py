"""The CPU test venvs' constraints are the wheels' tpu-post-train extras at their lowest versions.

tools/generate_maxtext_constraints.py writes recipes/environments/constraints-<version>.txt from each
pinned wheel; MaxText's environment (scripts/fit/environment.py) is built under it. A hand edit, or a wheel that changed
its extra, fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from contracts.maxtext_schema import fetch_wheel
from tpu_rl.recipes import all_recipes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from generate_maxtext_constraints import constraints_path, constraints_text, lowest_pins  # noqa: E402

VERSIONS = sorted({recipe.maxtext_version for recipe in all_recipes().values()})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_shipped_constraints_equal_the_ones_generated_from_the_wheel(version):
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        pytest.skip(reason)
    assert constraints_path(version).read_text() == constraints_text(version)


def test_each_requirement_is_pinned_to_its_lower_bound_with_its_marker_and_without_the_extra():
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: maxtext",
        "Requires-Dist: jax>=0.11.0; extra == 'tpu-post-train'",
        "Requires-Dist: torch==2.11.0+cpu; extra == 'tpu-post-train'",
        "Requires-Dist: triton>=3.6.0; (sys_platform == 'linux') and extra == 'tpu-post-train'",
        "Requires-Dist: google-tunix>=0.1.3; extra == 'tpu-post-train'",
        "Requires-Dist: jax>=0.12.0; extra == 'tpu'",
        "Requires-Dist: numpy",
        "",
    ])
    assert lowest_pins(metadata, {"google-tunix": "0.1.7"}) == [
        "google-tunix==0.1.7", "jax==0.11.0", "torch==2.11.0", "triton==3.6.0; sys_platform == 'linux'"]


def test_a_requirement_without_a_single_lowest_version_stops_the_generator():
    metadata = "Metadata-Version: 2.1\nName: maxtext\nRequires-Dist: jax<0.12; extra == 'tpu-post-train'\n"
    with pytest.raises(SystemExit, match="jax<0.12"):
        lowest_pins(metadata)
