"""The artifacts stack and the guarantees every stack shares: the example guard and state (data safety:
tests/test_data_safety.py)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from conftest import only, outputs, resources, synthesize
from terraform_cli import check_stack

from tpu_rl.recipes import example_settings
from tpu_rl.recipes.settings.checks import MAX_CLUSTER_NAME
from tpu_rl.recipes.settings.specs import EXAMPLE_PROJECT

ALL_STACKS = ["artifacts", "qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"]


def test_app_synthesizes_exactly_the_four_stacks(stacks_json):
    assert sorted(stacks_json) == sorted(ALL_STACKS)


def test_artifacts_bucket_is_the_settings_bucket_and_private(stacks_json):
    bucket = only(stacks_json["artifacts"], "google_storage_bucket")
    assert bucket["name"] == example_settings().gcs_bucket
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"


def test_token_secret_exists_without_any_value_in_terraform(stacks_json):
    secret = only(stacks_json["artifacts"], "google_secret_manager_secret")
    assert secret["secret_id"] == example_settings().hf_token_secret
    for stack in stacks_json.values():
        assert resources(stack, "google_secret_manager_secret_version") == {}
        assert "secret_data" not in json.dumps(stack)


def test_artifacts_outputs_say_how_to_add_the_token(stacks_json):
    settings = example_settings()
    got = outputs(stacks_json["artifacts"])
    assert got["bucket"] == f"gs://{settings.gcs_bucket}"
    assert got["add_token_command"] == (
        f"gcloud secrets versions add {settings.hf_token_secret} --data-file=- --project={settings.project}"
    )


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_example_settings_fail_the_plan_of_every_resource_before_anything_is_created(stacks_json, stack):
    stack_json = stacks_json[stack]
    assert stack_json["locals"] == {"settings_project": EXAMPLE_PROJECT}
    checked = 0
    for resource_type, by_id in stack_json["resource"].items():
        for logical_id, body in by_id.items():
            (guard,) = body["lifecycle"]["precondition"]
            assert guard["condition"] == f'${{(local.settings_project != "{EXAMPLE_PROJECT}")}}', logical_id
            for env in ("PROJECT", "REGION", "ZONE", "CLUSTER_NAME", "GCS_BUCKET", "RESERVATION", "AUTHORIZED_CIDR"):
                assert env in guard["error_message"]
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_google_provider_takes_project_and_region_from_settings(stacks_json, stack):
    settings = example_settings()
    (google,) = stacks_json[stack]["provider"]["google"]
    assert (google["project"], google["region"], google["zone"]) == (settings.project, settings.region, settings.zone)
    assert stacks_json[stack]["terraform"]["required_providers"]["google"]["version"] == "6.50.0"


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_state_is_local_by_default_outside_cdktf_out(stacks_json, stack):
    assert stacks_json[stack]["terraform"]["backend"] == {"local": {"path": f"../../../terraform.{stack}.tfstate"}}


LONGEST_CLUSTER_NAME = "a" * MAX_CLUSTER_NAME


@pytest.fixture(scope="module")
def real_settings_stacks(tmp_path_factory):
    """Non-example settings with TF_STATE_BUCKET: what a user's synth looks like."""
    settings = dataclasses.replace(
        example_settings(), project="my-rl-project", state_bucket="my-tf-state", source="environment",
        cluster_name=LONGEST_CLUSTER_NAME,
    )
    return synthesize(tmp_path_factory.mktemp("real"), settings=settings)


def test_tf_state_bucket_switches_every_stack_to_a_gcs_backend_with_its_own_prefix(real_settings_stacks):
    for stack, stack_json in real_settings_stacks.items():
        assert stack_json["terraform"]["backend"] == {"gcs": {"bucket": "my-tf-state", "prefix": f"tpu-rl/{stack}"}}


def test_real_settings_carry_no_example_guard(real_settings_stacks):
    for stack_json in real_settings_stacks.values():
        assert "locals" not in stack_json
        assert "precondition" not in json.dumps(stack_json)
        assert EXAMPLE_PROJECT not in json.dumps(stack_json["provider"])


def terraform_plan_errors(stack: dict, tmp_path) -> list[str]:
    """Terraform itself plans the whole stack, provider-free (tests/terraform_cli.py); the plan must fail,
    each error a precondition. Returns the errors, each joined on spaces."""
    run = check_stack("stack", stack, tmp_path)
    assert run.validate_errors == [] and run.plan_errors
    assert all("Resource precondition failed" in error for error in run.plan_errors), run.plan_errors
    return [" ".join(error.split()) for error in run.plan_errors]


def test_terraform_plan_fails_on_the_example_guard_with_the_message(stacks_json, tmp_path):
    """The artifacts stack's guard: the plan fails at its bucket with our message before anything is created."""
    errors = terraform_plan_errors(stacks_json["artifacts"], tmp_path)
    (bucket,) = resources(stacks_json["artifacts"], "google_storage_bucket")
    assert any(error.startswith(f"google_storage_bucket.{bucket}: ") and "These are the example settings" in error
               for error in errors), errors


@pytest.fixture(scope="module")
def gke_only_stacks(tmp_path_factory):
    """A GKE-only user: CAPACITY=flex-start and no RESERVATION, which the TPU VM cannot use."""
    settings = dataclasses.replace(example_settings(), project="my-rl-project", source="environment",
                                   capacity=("flex-start",), reservation=None)
    return synthesize(tmp_path_factory.mktemp("gke-only"), settings=settings)


VM_CAPACITY_LINE = ("CAPACITY 'flex-start' has no mode the TPU VM of recipe 'llama31-v6e8' can use (reservation, "
                    "spot, on-demand): add one after the others, e.g. CAPACITY=flex-start,spot gives the VM spot")


def test_a_capacity_the_vm_cannot_use_still_synthesizes_every_stack_and_only_the_vm_plan_fails(gke_only_stacks):
    assert set(gke_only_stacks) == {"artifacts", "qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"}
    vm = gke_only_stacks["llama31-v6e8"]
    guarded = [body for kind in vm["resource"].values() for body in kind.values()]
    assert vm["locals"]["plan_allowed"] is False
    guard = {"condition": "${local.plan_allowed}", "error_message": VM_CAPACITY_LINE}
    assert guarded and all(body["lifecycle"]["precondition"] == [guard] for body in guarded)
    for stack in ("artifacts", "qwen3-v6e32", "gemma4-v6e64"):
        assert "precondition" not in json.dumps(gke_only_stacks[stack]["resource"]), stack


def test_terraform_plan_of_the_vm_stack_fails_with_the_same_line_the_cli_prints(gke_only_stacks, tmp_path):
    errors = terraform_plan_errors(gke_only_stacks["llama31-v6e8"], tmp_path)
    assert all(error.endswith(f"Resource precondition failed: {VM_CAPACITY_LINE}") for error in errors), errors


def test_names_derived_from_the_longest_cluster_name_fit_google_limits(real_settings_stacks):
    account_ids = [sa["account_id"] for stack in real_settings_stacks.values()
                   for sa in resources(stack, "google_service_account").values()]
    assert len(account_ids) == 5  # node + workload per GKE stack, one for the VM
    assert all(re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account_id) for account_id in account_ids), account_ids
    for stack in real_settings_stacks.values():
        for resource_type in ("google_compute_network", "google_compute_subnetwork", "google_compute_router",
                              "google_compute_router_nat", "google_compute_firewall"):
            assert all(len(r["name"]) <= 63 for r in resources(stack, resource_type).values())


def test_the_example_guard_reaches_resources_added_after_the_stack_is_composed(tmp_path):
    """The guard is an aspect applied at synth, so a composition cannot forget to call it last."""
    from cdktf import App

    from tpu_rl.infra.google import storage_bucket
    from tpu_rl.stacks.artifacts import ArtifactsStack

    app = App(outdir=str(tmp_path))
    stack = ArtifactsStack(app, example_settings())
    storage_bucket.StorageBucket(stack, "added-later", name="added-later-bucket", location="US")
    app.synth()
    synthesized = json.loads((tmp_path / "stacks" / "artifacts" / "cdk.tf.json").read_text())
    (guard,) = synthesized["resource"]["google_storage_bucket"]["added-later"]["lifecycle"]["precondition"]
    assert guard["condition"] == f'${{(local.settings_project != "{EXAMPLE_PROJECT}")}}'
