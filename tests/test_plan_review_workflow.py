"""The pull request workflow: it parses, pins every action to a commit, and asks for least privilege."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "plan.yml"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s*)?uses:\s*(\S+)\s*(#.*)?$")


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_workflow_parses_and_runs_on_pull_requests():
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request"}
    assert {"review", "terraform-plan", "comment"} <= set(workflow["jobs"])


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_version_in_a_comment():
    uses = [step["uses"] for step in _steps(_workflow()) if "uses" in step]
    assert uses and all(PINNED.match(action) for action in uses), uses
    for line in WORKFLOW.read_text().splitlines():
        match = USES_LINE.match(line)
        if match:
            assert match.group(2) and re.match(r"# v\d+\.\d+\.\d+$", match.group(2)), line


def test_permissions_are_least_privilege():
    workflow = _workflow()
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    jobs = workflow["jobs"]
    assert jobs["review"]["permissions"] == {"contents": "read"}
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    # The OIDC token exists only in the job that runs terraform plan with read-only credentials.
    assert jobs["terraform-plan"]["permissions"] == {"contents": "read", "id-token": "write"}


def test_review_job_sets_up_python_311_node_20_with_caches_and_runs_make_test_then_plan_review():
    workflow = _workflow()
    steps = workflow["jobs"]["review"]["steps"]
    by_action = {step["uses"].split("@")[0]: step for step in steps if "uses" in step}
    assert workflow["env"]["PYTHON_VERSION"] == "3.11" and workflow["env"]["NODE_VERSION"] == "20"
    assert by_action["actions/setup-python"]["with"]["cache"] == "pip"
    assert by_action["actions/setup-node"]["with"]["cache"] == "npm"
    assert "~/.cache/aws/jsii/package-cache" in by_action["actions/cache"]["with"]["path"]
    runs = [step.get("run", "") for step in steps]
    test_index = next(i for i, run in enumerate(runs) if run.strip() == "make test")
    review_index = next(i for i, run in enumerate(runs) if "tpu-rl plan-review" in run)
    assert test_index < review_index


def test_terraform_plan_runs_only_with_wif_variables_and_never_takes_the_state_lock():
    job = _workflow()["jobs"]["terraform-plan"]
    assert "vars.WIF_PROVIDER != ''" in job["if"] and "vars.WIF_SERVICE_ACCOUNT != ''" in job["if"]
    auth = next(step for step in job["steps"] if step.get("uses", "").startswith("google-github-actions/auth@"))
    assert auth["with"] == {"workload_identity_provider": "${{ vars.WIF_PROVIDER }}",
                            "service_account": "${{ vars.WIF_SERVICE_ACCOUNT }}"}
    plan = next(step["run"] for step in job["steps"] if "terraform" in step.get("run", "") and "plan" in step["run"])
    assert "-lock=false" in plan and "apply" not in plan


def test_one_comment_is_found_by_its_marker_and_updated():
    job = _workflow()["jobs"]["comment"]
    script = next(step["with"]["script"] for step in job["steps"] if "github-script" in step.get("uses", ""))
    assert "<!-- tpu-rl plan-review -->" in script
    assert "updateComment" in script and "createComment" in script
    assert "always()" in job["if"]  # still comments when the terraform job is skipped
