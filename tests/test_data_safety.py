"""Data safety on the synthesized stacks: trained weights and the token outlive every recipe stack, and
project-wide IAM stays within a stated allow-list.

Uses the session synth from tests/conftest.py (`stacks_json`); nothing is synthesized here.
"""

from __future__ import annotations

import re

import pytest
from conftest import only, resources

from tpu_rl.recipes import all_recipes
from tpu_rl.recipes.conventions import ARTIFACTS_STACK

RECIPE_STACKS = sorted(all_recipes())
OWNED_BY_ARTIFACTS = ("google_storage_bucket", "google_secret_manager_secret")
PROJECT_IAM_TYPES = ("google_project_iam_member", "google_project_iam_binding", "google_project_iam_policy")
# Authoritative project IAM (binding/policy) would strip every other member of a role in the user's
# project; only additive grants are allowed, and only these roles, only to the GKE node service account.
PROJECT_ROLE_ALLOW_LIST = {  # role -> the service accounts (construct ids) that may hold it project-wide
    # GKE nodes, and the TPU VM, whose guest agent sends the startup script's lines to Cloud Logging
    "roles/logging.logWriter": ("node-sa", "vm-sa"),
    "roles/monitoring.metricWriter": ("node-sa",),
    "roles/monitoring.viewer": ("node-sa",),
    "roles/stackdriver.resourceMetadata.writer": ("node-sa",),
    "roles/artifactregistry.reader": ("node-sa",),
}
_SA_REFERENCE = re.compile(r"^\$\{google_service_account\.(?P<id>[^.]+)\.(member|email)\}$")


def _path(stack_name: str, body: dict) -> str:
    return body["//"]["metadata"]["path"].removeprefix(f"{stack_name}/")


@pytest.mark.parametrize("stack", RECIPE_STACKS)
def test_recipe_stack_owns_no_bucket_and_no_secret(stacks_json, stack):
    """So `cdktf destroy <recipe>` never deletes trained weights or the token (the artifacts stack owns
    exactly one of each: tests/test_stacks_artifacts.py)."""
    for rtype in OWNED_BY_ARTIFACTS:
        assert resources(stacks_json[stack], rtype) == {}, (
            f"{stack} declares a {rtype}: destroying the recipe stack would destroy it")


def _bucket(stacks_json) -> dict:
    return only(stacks_json[ARTIFACTS_STACK], "google_storage_bucket")


def test_artifacts_bucket_cannot_be_force_destroyed(stacks_json):
    # Terraform's default for force_destroy is false; state it so that a change to true shows up here.
    assert _bucket(stacks_json)["force_destroy"] is False


def test_artifacts_bucket_keeps_deleted_or_overwritten_checkpoints_once_for_a_week(stacks_json):
    # Soft delete keeps a deleted or overwritten object for its retention (GCS's default: 7 days;
    # https://cloud.google.com/storage/docs/soft-delete). Versioning on top kept a deleted checkpoint a
    # week as a noncurrent version and then a week soft-deleted: about 14 days of hundreds of GB, billed.
    bucket = _bucket(stacks_json)
    assert bucket["soft_delete_policy"]["retention_duration_seconds"] == 7 * 24 * 3600
    assert bucket["versioning"] == {"enabled": False}


def test_artifacts_bucket_lifecycle_never_deletes_live_objects(stacks_json):
    # A Delete rule is fine only for noncurrent (archived) versions; one on live objects would expire
    # checkpoints and exports.
    for rule in _bucket(stacks_json).get("lifecycle_rule", []):
        if rule["action"]["type"] != "Delete":
            continue
        condition = rule["condition"]
        assert condition.get("with_state") == "ARCHIVED" or condition.get("days_since_noncurrent_time") or \
            condition.get("num_newer_versions"), f"a lifecycle rule deletes live objects: {rule}"


@pytest.mark.parametrize("stack", [ARTIFACTS_STACK, *RECIPE_STACKS])
def test_project_iam_grants_are_additive_and_on_the_allow_list(stacks_json, stack):
    config = stacks_json[stack]
    for rtype in ("google_project_iam_binding", "google_project_iam_policy"):
        assert resources(config, rtype) == {}, f"{stack} sets authoritative project IAM ({rtype})"
    accounts = {logical_id: _path(stack, body) for logical_id, body in resources(config, "google_service_account").items()}
    for body in resources(config, "google_project_iam_member").values():
        role = body["role"]
        assert role in PROJECT_ROLE_ALLOW_LIST, f"{stack} grants {role} project-wide (not on the allow-list)"
        reference = _SA_REFERENCE.match(body["member"])
        assert reference, f"{stack}: {role} goes to {body['member']}, not to a service account of the stack"
        owner = accounts[reference["id"]]
        assert owner.split("/")[0] in PROJECT_ROLE_ALLOW_LIST[role], f"{stack}: {role} goes to {owner}"


def test_every_project_iam_resource_type_is_checked(stacks_json):
    # A new kind of project-level grant must be added to the allow-list test above, not slip past it.
    seen = {rtype for config in stacks_json.values() for rtype in config.get("resource", {})
            if rtype.startswith("google_project_iam")}
    assert seen <= set(PROJECT_IAM_TYPES), seen


@pytest.mark.parametrize("stack", RECIPE_STACKS)
def test_workload_storage_access_is_granted_on_the_bucket_not_the_project(stacks_json, stack):
    config = stacks_json[stack]
    grants = resources(config, "google_storage_bucket_iam_member").values()
    assert grants, f"{stack} has no bucket-level grant for its workload"
    assert {grant["bucket"] for grant in grants} == {_bucket(stacks_json)["name"]}
    secret_grants = resources(config, "google_secret_manager_secret_iam_member").values()
    # Only the TPU VM reads the token from Secret Manager (at boot); GKE pods get it from the Kubernetes
    # Secret that `run` fills, so a GKE stack grants no Secret Manager role.
    expected = ["roles/secretmanager.secretAccessor"] if all_recipes()[stack].platform == "vm" else []
    assert [grant["role"] for grant in secret_grants] == expected
