"""The workflow's `terraform plan` step (scripts/plan_review/terraform_plan.py), run with the real Terraform
CLI and its real GCS backend against the local GCS emulator, on stacks of built-in `terraform_data`
resources (no provider download).

The fixtures follow Terraform's own rules, not a sample: the GCS backend keeps a workspace's state at
`<prefix>/default.tfstate` and, finding none, writes one during `init` (hashicorp/terraform v1.9.8 @e044e569c5bc
internal/backend/remote-state/gcs/backend_state.go, StateMgr, stateFile, lockFile); the first test shows the
installed Terraform doing exactly that, so the others test the step against the behaviour it avoids.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from terraform_cli import terraform, terraform_env

from tpu_rl.scripts.plan_review import terraform_plan as tp

STATE_BUCKET = "tpu-rl-state"
PREFIX = "tpu-rl"  # tpu_rl.stacks.base.STATE_PREFIX: each stack's state under tpu-rl/<stack>


@pytest.fixture
def state_bucket(gcs_server):
    from peers.fixtures import storage_client

    server, url = gcs_server
    server.wipe()
    client = storage_client("my-rl-project", url)
    client.create_bucket(STATE_BUCKET)
    return client, url


def _stack(root: Path, name: str, url: str, resources: dict, outputs: dict) -> Path:
    """A synthesized stack as cdktf lays it out (cdktf.out/stacks/<name>/cdk.tf.json), its backend the
    emulator (storage_custom_endpoint and a dummy token are the only additions to what tpu_rl.stacks.base
    writes: bucket and prefix)."""
    directory = root / "stacks" / name
    directory.mkdir(parents=True)
    config = {
        "terraform": {"backend": {"gcs": {
            "bucket": STATE_BUCKET, "prefix": f"{PREFIX}/{name}",
            "storage_custom_endpoint": f"{url}/storage/v1/", "access_token": "emulator",
        }}},
        "resource": {"terraform_data": resources},
    }
    if outputs:
        config["output"] = outputs
    (directory / "cdk.tf.json").write_text(json.dumps(config))
    return directory


def _objects(client) -> set[str]:
    return {blob.name for blob in client.list_blobs(STATE_BUCKET)}


def _exists(client):
    return lambda bucket, name: client.bucket(bucket).blob(name).exists()


def _apply(directory: Path, env: dict[str, str]) -> None:
    for command in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false"]):
        subprocess.run([terraform(), *command], cwd=directory, env=env, check=True, capture_output=True)
    shutil.rmtree(directory / ".terraform", ignore_errors=True)
    (directory / ".terraform.lock.hcl").unlink(missing_ok=True)


def test_terraforms_gcs_backend_writes_a_state_on_init_when_there_is_none(state_bucket, tmp_path):
    """The fact the step is built around: init alone, with no -lock anywhere, writes to the bucket."""
    terraform()
    client, url = state_bucket
    directory = _stack(tmp_path / "cdktf.out", "new-recipe", url, {"a": {"input": "x"}}, {})
    subprocess.run([terraform(), "init", "-input=false"], cwd=directory, env=terraform_env(tmp_path), check=True,
                   capture_output=True)
    assert _objects(client) == {f"{PREFIX}/new-recipe/default.tfstate"}


def test_a_stack_never_deployed_is_planned_locally_without_writing_to_the_bucket(state_bucket, tmp_path):
    terraform()
    client, url = state_bucket
    directory = _stack(tmp_path / "cdktf.out", "new-recipe", url, {"a": {"input": "x"}, "b": {"input": "y"}},
                       {"o": {"value": "z"}})
    result = tp.plan_stack("new-recipe", directory, tmp_path / "logs", _exists(client), env=terraform_env(tmp_path))
    assert result.line.startswith("- `new-recipe`: not deployed: 2 to add (")
    assert _objects(client) == set()  # nothing written: no state, no lock
    log = (tmp_path / "logs" / "new-recipe.log").read_text()
    assert "tpu-rl/new-recipe/default.tfstate does not exist" in log
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in log  # Terraform's own count agrees


def test_a_deployed_stack_is_planned_against_its_state_without_a_lock_or_a_write(state_bucket, tmp_path):
    terraform()
    client, url = state_bucket
    env = terraform_env(tmp_path)
    root = tmp_path / "cdktf.out"
    directory = _stack(root, "qwen3", url, {"kept": {"input": "1"}, "replaced": {"triggers_replace": "old"},
                                            "updated": {"input": "old"}, "dropped": {"input": "2"}}, {})
    _apply(directory, env)
    before = {blob.name: blob.generation for blob in client.list_blobs(STATE_BUCKET)}
    assert set(before) == {f"{PREFIX}/qwen3/default.tfstate"}
    # The pull request: one resource added, one replaced (terraform_data replaces when triggers_replace
    # changes, and updates in place when only input does), one updated, one gone.
    shutil.rmtree(directory.parent)
    directory = _stack(root, "qwen3", url, {"kept": {"input": "1"}, "replaced": {"triggers_replace": "new"},
                                            "updated": {"input": "new"}, "added": {"input": "3"}}, {})
    # A lock object where the backend keeps it, <prefix>/default.tflock (backend_state.go lockFile): a
    # plan that took the lock would write it (the emulator does not enforce the backend's
    # does-not-exist precondition, so the write goes through) and delete it on unlock.
    lock = f"{PREFIX}/qwen3/default.tflock"
    client.bucket(STATE_BUCKET).blob(lock).upload_from_string('{"ID": "someone-else"}')
    before[lock] = client.bucket(STATE_BUCKET).get_blob(lock).generation
    result = tp.plan_stack("qwen3", directory, tmp_path / "logs", _exists(client), env=env)
    assert result.line == "- `qwen3`: 2 to add, 1 to change, 2 to destroy"
    log = result.log.read_text()
    assert "Plan: 2 to add, 1 to change, 2 to destroy." in log  # the same numbers as Terraform's own line
    assert {blob.name: blob.generation for blob in client.list_blobs(STATE_BUCKET)} == before
    # The control: a plan that does take the lock leaves the bucket otherwise (its lock object gone).
    subprocess.run([terraform(), "plan", "-input=false", "-no-color"], cwd=directory, env=env, check=True,
                   capture_output=True)
    assert {blob.name: blob.generation for blob in client.list_blobs(STATE_BUCKET)} != before


def test_a_change_to_outputs_only_is_counted_though_terraform_prints_no_plan_line(state_bucket, tmp_path):
    terraform()
    client, url = state_bucket
    env = terraform_env(tmp_path)
    root = tmp_path / "cdktf.out"
    directory = _stack(root, "vm", url, {"a": {"input": "x"}}, {"ssh_command": {"value": "gcloud old"}})
    _apply(directory, env)
    shutil.rmtree(directory.parent)
    directory = _stack(root, "vm", url, {"a": {"input": "x"}}, {"ssh_command": {"value": "gcloud new"}})
    result = tp.plan_stack("vm", directory, tmp_path / "logs", _exists(client), env=env)
    assert result.line == "- `vm`: 0 to add, 0 to change, 0 to destroy; 1 output changed"
    log = result.log.read_text()
    assert not re.search(r"^Plan:", log, re.MULTILINE) and "Changes to Outputs:" in log


def test_a_failing_plan_is_one_line_with_terraforms_error_and_the_log_keeps_the_rest(state_bucket, tmp_path):
    terraform()
    client, url = state_bucket
    directory = _stack(tmp_path / "cdktf.out", "broken", url, {"a": {"input": "${var.missing}"}}, {})
    result = tp.plan_stack("broken", directory, tmp_path / "logs", _exists(client), env=terraform_env(tmp_path))
    assert re.fullmatch(r"- `broken`: plan failed: Error: Reference to undeclared input variable.*", result.line), \
        result.line
    assert "var.missing" in result.log.read_text()


def test_a_state_bucket_that_cannot_be_read_is_reported_and_nothing_runs(tmp_path):
    def refuse(bucket, name):
        raise PermissionError("403 caller does not have storage.objects.get access")

    directory = tmp_path / "stacks" / "s"
    directory.mkdir(parents=True)
    (directory / "cdk.tf.json").write_text(json.dumps(
        {"terraform": {"backend": {"gcs": {"bucket": STATE_BUCKET, "prefix": "tpu-rl/s"}}}}))
    result = tp.plan_stack("s", directory, tmp_path / "logs", refuse, terraform="/nonexistent/terraform")
    assert result.line == ("- `s`: plan failed: could not read gs://tpu-rl-state/tpu-rl/s/default.tfstate "
                           "(403 caller does not have storage.objects.get access)")


def test_main_writes_one_line_per_stack_and_the_logs_hint(state_bucket, tmp_path, monkeypatch):
    terraform()
    client, url = state_bucket
    root = tmp_path / "cdktf.out"
    _stack(root, "one", url, {"a": {"input": "x"}}, {})
    _stack(root, "two", url, {"a": {"input": "x"}}, {})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)  # google-cloud-storage's own switch
    monkeypatch.setenv("PROJECT", "my-rl-project")
    for key, value in terraform_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "terraform-plan.md"
    assert tp.main(["--outdir", str(root), "--out", str(out), "--logs", str(tmp_path / "logs"),
                    "--logs-hint", "Logs: the terraform-plan artifact.", "one", "two"]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "### Terraform plan (read-only, -lock=false)"
    assert [line.split(":")[0] for line in lines if line.startswith("- ")] == ["- `one`", "- `two`"]
    assert all("not deployed: 1 to add" in line for line in lines if line.startswith("- "))
    assert "Logs: the terraform-plan artifact." in lines
    assert sorted(path.name for path in (tmp_path / "logs").iterdir()) == ["one.log", "two.log"]
    assert _objects(client) == set()
