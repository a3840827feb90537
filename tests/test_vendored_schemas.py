"""The vendored JobSet CRD is the unmodified upstream file of the release the clusters install."""

from __future__ import annotations

import hashlib
import subprocess
import tomllib
from pathlib import Path

from contracts.k8s_schema import JOBSET_CRD, jobset_source
from tpu_rl.recipes.conventions import JOBSET_VERSION


def test_vendored_jobset_crd_is_the_release_the_clusters_install():
    tag = jobset_source()["tag"]
    assert tag == JOBSET_VERSION, (
        f"the vendored JobSet CRD is {tag} but recipes/conventions.py pins {JOBSET_VERSION}: copy the CRD of "
        f"{JOBSET_VERSION} into {JOBSET_CRD.parent} and update SOURCE.toml")


def test_vendored_jobset_crd_is_unmodified():
    assert hashlib.sha256(JOBSET_CRD.read_bytes()).hexdigest() == jobset_source()["sha256"], (
        f"{JOBSET_CRD} differs from the upstream file SOURCE.toml names: vendored data is never edited by hand")


def test_the_source_record_names_the_licence_and_the_licence_text_is_beside_the_copy():
    source = jobset_source()
    assert source["license"] == "Apache-2.0"
    assert "Apache License" in (JOBSET_CRD.parent / "LICENSE").read_text()


def test_the_contract_tests_read_the_copy_in_the_repository_not_shared():
    """The copy is committed inside the repository, so every clone (a fork's CI) has it."""
    repo = Path(__file__).resolve().parents[1]
    assert JOBSET_CRD.is_relative_to(repo)
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(JOBSET_CRD)], cwd=repo,
                             capture_output=True, text=True)
    assert tracked.returncode == 0, tracked.stderr


def test_vendored_xpk_template_is_unmodified_and_licensed():
    folder = JOBSET_CRD.parents[1] / "xpk"
    source = tomllib.loads((folder / "SOURCE.toml").read_text())
    template = folder / source["path"].rsplit("/", 1)[-1]
    assert hashlib.sha256(template.read_bytes()).hexdigest() == source["sha256"], (
        f"{template} differs from the upstream file SOURCE.toml names: vendored data is never edited by hand")
    assert source["license"] == "Apache-2.0" and "Apache License" in (folder / "LICENSE").read_text()
