"""docs/plan-review.md against what it documents: the setup commands grant the roles the plan identity
needs (scripts/plan_review/plan_identity.py) and no other, set the variables the workflow reads and no
other, trust the repository by its numeric ids, and grant Secret reads only where Helm releases live;
the workflow facts it states are the workflow's."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import resources

from tpu_rl.infra.cluster_addons import release_namespaces
from tpu_rl.recipes import conventions
from tpu_rl.scripts.plan_review.plan_identity import (
    ARTIFACTS_BUCKET,
    PLAN_ROLES,
    PROJECT,
    ROLE_FOR_TYPE,
    STATE_BUCKET,
    TOKEN_SECRET,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plan-review.md"
PLAN = ROOT / ".github" / "workflows" / "plan.yml"
SCOPE_TARGET = {  # where docs/plan-review.md grants a role of each scope
    PROJECT: 'gcloud projects add-iam-policy-binding "$PROJECT"',
    ARTIFACTS_BUCKET: 'gcloud storage buckets add-iam-policy-binding "gs://$GCS_BUCKET"',
    TOKEN_SECRET: 'gcloud secrets add-iam-policy-binding "$HF_TOKEN_SECRET"',
    STATE_BUCKET: 'gcloud storage buckets add-iam-policy-binding "gs://$TF_STATE_BUCKET"',
}


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.DOTALL)


def _commands() -> list[str]:
    """The shell commands of the doc, continuation lines joined."""
    return [line for block in _bash_blocks() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _loop_items(variable: str) -> list[str]:
    (loop,) = [c for c in _commands() if c.startswith(f"for {variable} in ")]
    return loop.removeprefix(f"for {variable} in ").split(";")[0].split()


def test_every_resource_type_of_every_stack_has_a_read_role(stacks_json, data_only_variants):
    types = {rtype for stacks in (stacks_json, data_only_variants) for stack in stacks.values()
             for rtype in stack.get("resource", {})}
    assert sorted(types - ROLE_FOR_TYPE.keys()) == [], "add the role that reads it to plan_identity.ROLE_FOR_TYPE"
    assert set(ROLE_FOR_TYPE.values()) <= {role.role for role in PLAN_ROLES}
    assert {role.role for role in PLAN_ROLES} - set(ROLE_FOR_TYPE.values()) == {"roles/storage.objectViewer"}


def test_the_setup_grants_exactly_the_plan_roles_each_where_it_belongs():
    commands = _commands()
    granted = set(re.findall(r"--role=(roles/[\w.]+)", " ".join(commands))) | set(_loop_items("role"))
    assert granted == {role.role for role in PLAN_ROLES} | {"roles/iam.workloadIdentityUser"}
    assert "roles/viewer" not in DOC.read_text()
    (project_grant,) = [c for c in commands if c.strip().startswith(SCOPE_TARGET[PROJECT])]
    assert '--role="$role"' in project_grant
    for role in PLAN_ROLES:
        if role.scope == PROJECT:
            assert role.role in _loop_items("role"), role
        else:
            (grant,) = [c for c in commands if f"--role={role.role}" in c]
            assert grant.startswith(SCOPE_TARGET[role.scope]), (role, grant)
    table = re.findall(r"^\| `(roles/[\w.]+)` \| ([^|]+) \|", DOC.read_text(), re.MULTILINE)
    assert [(r, s.strip()) for r, s in table] == [
        (role.role, "the project" if role.scope == PROJECT else f"the {role.scope}") for role in PLAN_ROLES]


def test_the_trust_condition_names_the_repository_by_id_the_event_and_the_base_branch():
    """google-github-actions/auth v3.0.0 docs/SECURITY_CONSIDERATIONS.md: names can be re-registered,
    the numeric *_id claims never are; GitHub's OIDC token also carries event_name and base_ref."""
    (provider,) = [c for c in _commands() if "providers create-oidc" in c]
    args = shlex.split(provider)
    condition = next(a for a in args if a.startswith("--attribute-condition=")).split("=", 1)[1]
    clauses = [clause.strip() for clause in condition.split("&&")]
    assert clauses == ["assertion.repository_id == '$REPO_ID'", "assertion.repository_owner_id == '$OWNER_ID'",
                       "assertion.event_name == 'pull_request'", "assertion.base_ref == '$BASE_BRANCH'"]
    mapping = next(a for a in args if a.startswith("--attribute-mapping=")).split("=", 1)[1]
    assert "attribute.repository_id=assertion.repository_id" in mapping.split(",")
    (binding,) = [c for c in _commands() if "roles/iam.workloadIdentityUser" in c]
    assert '/attribute.repository_id/$REPO_ID"' in binding  # a mapped attribute, by id


def test_the_setup_sets_exactly_the_variables_the_workflow_reads():
    used = set(re.findall(r"\bvars\.([A-Z_]+)", PLAN.read_text()))
    commands = _commands()
    named = {c.split()[3] for c in commands if c.startswith("gh variable set ")} | set(_loop_items("name"))
    assert named == used
    (loop_body,) = [c for c in commands if "gh variable set \"$name\"" in c]
    assert '--body "${!name}"' in loop_body


def test_secret_reads_are_granted_only_where_helm_releases_live(stacks_json):
    namespaces = _loop_items("ns")
    assert tuple(namespaces) == release_namespaces()
    deployed = {release["namespace"] for stack in stacks_json.values()
                for release in resources(stack, "helm_release").values()}
    assert set(namespaces) == deployed
    assert conventions.NAMESPACE not in namespaces  # where the token Secret is


def test_the_workflow_facts_in_the_doc_are_the_workflows():
    workflow = yaml.safe_load(PLAN.read_text())
    env, text = workflow["env"], " ".join(DOC.read_text().split())
    versions = f"Python {env['PYTHON_VERSION']}, Node {env['NODE_VERSION']} and Terraform {env['TERRAFORM_VERSION']}"
    assert versions in text
    test_runs = [s["run"] for s in workflow["jobs"]["review"]["steps"] if "pytest" in s.get("run", "")]
    assert len(test_runs) == 2  # all but what needs root, then that as root
    for test_run in test_runs:
        assert f"`{test_run.strip()}`" in text
    assert "Node 20" not in text and "make test" not in text


@pytest.mark.parametrize("index", range(5))
def test_every_command_block_is_valid_bash(index):
    blocks = _bash_blocks()
    assert len(blocks) == 5
    result = subprocess.run(["bash", "-n"], input=blocks[index], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
