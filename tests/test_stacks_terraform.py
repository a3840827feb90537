"""Terraform itself loads every synthesized stack, in every capacity mode: each cdk.tf.json, made
provider-free by tests/terraform_cli.py, goes through `terraform init` (offline), `validate` and `plan`,
so Terraform parses every string as the template it reads, resolves every reference and runs every
function, precondition and postcondition.

- With real-looking settings (conftest.USER_ENV, two zones, a state bucket) every stack plans.
- With the example settings every stack validates and its plan stops at the example guard.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import USER_ENV, data_only_recipes, synthesize
from terraform_cli import check_stack, check_stacks, planned

from peers.settings import spec_of
from tpu_rl.jobs import render_startup_script
from tpu_rl.recipes import all_recipes
from tpu_rl.recipes.settings.load import load_settings
from tpu_rl.stacks.base import example_guard_message

# Two zones that both offer v6e flex-start (tests/test_stacks_zones.py), and a state bucket (a gcs backend).
USER_SETTINGS_ENV = {**USER_ENV, "ZONE": "us-east5-b,us-east5-a", "TF_STATE_BUCKET": "my-rl-tf-state"}


@pytest.fixture(scope="module")
def user_settings():
    return load_settings(USER_SETTINGS_ENV)


@pytest.fixture(scope="module")
def user_recipes():
    return {**all_recipes(), **data_only_recipes()}


@pytest.fixture(scope="module")
def user_runs(tmp_path_factory, user_settings, user_recipes):
    stacks = synthesize(tmp_path_factory.mktemp("user-stacks"), recipes=user_recipes, settings=user_settings)
    assert "gcs" in stacks["artifacts"]["terraform"]["backend"]  # the state bucket reached the stacks
    return check_stacks(stacks, tmp_path_factory.mktemp("terraform-user"))


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory, stacks_json, data_only_variants):
    stacks = {**stacks_json, **{f"data-only-{name}": stack for name, stack in data_only_variants.items()}}
    return check_stacks(stacks, tmp_path_factory.mktemp("terraform-example"))


def test_terraform_plans_every_stack_in_every_capacity_mode_with_real_looking_settings(user_runs, user_recipes):
    assert set(user_runs) == {"artifacts", *user_recipes}
    modes = {mode for recipe in user_recipes.values() for mode in recipe.capacity}
    assert modes == {"reservation", "flex-start", "spot", "on-demand"}
    assert any(len(recipe.capacity) > 1 for recipe in user_recipes.values())  # a fallback list
    failed = {stack: run.errors for stack, run in user_runs.items() if run.errors or run.plan_errors is None}
    assert failed == {}


def test_example_settings_pass_validate_and_stop_every_plan_at_the_example_guard(example_runs):
    for stack, run in example_runs.items():
        assert run.validate_errors == [], stack
        assert run.plan_errors, f"{stack}: the plan went through with the example settings"
        for error in run.plan_errors:
            assert "Resource precondition failed" in error and example_guard_message() in error, (stack, error)


@pytest.mark.parametrize("stack", ["llama31-v6e8", "llama31-spot"])
def test_terraform_reads_the_vm_startup_script_as_rendered(user_runs, user_settings, user_recipes, stack):
    """The escaped script (infra/terraform_literals.py) is, to Terraform, the script the recipe renders."""
    run = user_runs[stack]
    assert run.errors == []
    plan = planned(run.directory, run.env)
    (instance,) = [change for change in plan["resource_changes"]
                   if change["address"].startswith("terraform_data.google_compute_instance__")]
    script = instance["change"]["after"]["input"]["metadata_startup_script"]
    assert script == render_startup_script(spec_of(user_recipes[stack]), user_settings)
    assert "${TPU_RL_GCS_RETRY_SECONDS:-10}" in script  # one of the shell expansions Terraform once refused


def test_check_stack_names_the_block_and_attribute_terraform_refuses(tmp_path: Path):
    from terraform_cli import check_stack

    stack = {"resource": {"google_compute_instance": {"vm": {
        "name": "ok", "metadata_startup_script": "#!/bin/bash\necho ${HOME:-/root}\n",
    }}}}
    run = check_stack("s", stack, tmp_path)
    assert run.validate_errors and all(error.startswith("google_compute_instance.vm: metadata_startup_script: ")
                                       for error in run.validate_errors), run.validate_errors


def _fake_terraform(directory: Path, says: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "terraform").write_text(f'#!/bin/sh\necho "{says}"\n')
    (directory / "terraform").chmod(0o755)


def test_a_missing_or_old_terraform_fails_naming_it_and_how_to_install(tmp_path, monkeypatch):
    from terraform_cli import INSTALL_HINT, terraform

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="the terraform CLI is not on PATH: install Terraform >= 1.5"):
        terraform()
    _fake_terraform(tmp_path, "Terraform v1.4.7")
    monkeypatch.setenv("PATH", f"{tmp_path}:")  # another PATH: checked again
    with pytest.raises(pytest.fail.Exception) as failed:
        terraform()
    assert str(failed.value) == f"{tmp_path}/terraform is not Terraform >= 1.5 (Terraform v1.4.7): {INSTALL_HINT}"


@pytest.mark.parametrize("says, exit_code", [(None, 2), ("Terraform v1.4.7", 2), ("Terraform v1.10.0", 0)])
def test_make_install_checks_terraform_and_says_how_to_install_it(tmp_path, says, exit_code):
    if says:
        _fake_terraform(tmp_path / "bin", says)
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin" if says else "/usr/bin:/bin"  # /usr/local/bin: the real one
    result = subprocess.run(["make", "-s", "--no-print-directory", "terraform-check"], cwd=Path(__file__).parents[1],
                            env={**os.environ, "PATH": path}, capture_output=True, text=True)
    assert result.returncode == exit_code, result.stdout + result.stderr
    found = says.removeprefix("Terraform v") if says else "none on PATH"
    expected = ("" if exit_code == 0 else f"Terraform >= 1.5 is needed (found: {found}): install it from "
                "https://developer.hashicorp.com/terraform/install\n")
    assert result.stdout == expected


BUCKET = {"name": "b", "location": "US"}


def _member_reading(expression: str) -> dict:
    return {"resource": {"google_storage_bucket": {"x": dict(BUCKET)}, "google_storage_bucket_iam_member": {"y": {
        "bucket": "${google_storage_bucket.x.name}", "role": "roles/storage.objectViewer",
        "member": f"user:${{{expression}}}"}}}}


@pytest.mark.parametrize("expression", ["google_storage_bucket.x.url", "google_storage_bucket.x.self_link",
                                        "google_storage_bucket.x.versioning[0].enabled",
                                        'google_storage_bucket.x.effective_labels["a"]'])
def test_a_reference_to_an_attribute_the_provider_computes_plans_as_unknown(tmp_path: Path, expression):
    run = check_stack("s", _member_reading(expression), tmp_path)
    assert run.errors == [] and run.plan_errors == []


@pytest.mark.parametrize("expression, attribute", [
    ('google_storage_bucket.x.labelz["a"]', "labelz"),
    ("google_storage_bucket.x.labels_input", "labels_input"),  # cdktf's input getter, not a Terraform attribute
    ("google_storage_bucket.x.versionin[0].enabled", "versionin"),
])
def test_a_reference_to_an_attribute_the_provider_does_not_have_fails_naming_the_block_and_the_reference(
        tmp_path: Path, expression, attribute):
    # Before: an attribute the body did not set became jsondecode(<stand-in>.id).<attribute>, an unknown that
    # Terraform accepted whatever its name.
    run = check_stack("s", _member_reading(expression), tmp_path)
    assert run.validate_errors == [
        f"google_storage_bucket_iam_member.y: member: {expression}: google_storage_bucket has no attribute "
        f"'{attribute}' (the provider's bindings: cdktf_cdktf_provider_google.storage_bucket.StorageBucket)"]
    assert run.plan_errors is None  # not planned


def test_a_postconditions_self_reference_is_checked_against_its_own_type(tmp_path: Path):
    stack = {"resource": {"google_storage_bucket": {"x": {**BUCKET, "lifecycle": {"postcondition": [
        {"condition": "${self.labelz != null}", "error_message": "no labels"}]}}}}}
    run = check_stack("s", stack, tmp_path)
    assert run.validate_errors == [
        "google_storage_bucket.x: lifecycle.postcondition[0].condition: self.labelz: google_storage_bucket has no "
        "attribute 'labelz' (the provider's bindings: cdktf_cdktf_provider_google.storage_bucket.StorageBucket)"]


def test_a_reference_into_a_type_without_bindings_fails_naming_it(tmp_path: Path):
    stack = {"resource": {"random_id": {"r": {"byte_length": 4}}, "google_storage_bucket": {"x": {
        **BUCKET, "name": "${random_id.r.hex}"}}}}
    run = check_stack("s", stack, tmp_path)
    assert run.validate_errors == ["google_storage_bucket.x: name: random_id.r.hex: no generated bindings for "
                                   "random_id: add its provider to BINDINGS in provider_attributes"]
