"""Bad input to the CLI: one line on stderr, exit 2, no traceback, nothing created or submitted."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from peers.fixtures import CONTEXT, TOKEN, put_step_output, _free_port
from peers.cluster_access import write_kubeconfig
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def rejected(args: list[str], cloud=None, input: str | None = None) -> str:
    """Run the CLI, check it refused cleanly and did nothing; return its one error line."""
    result = runner.invoke(app, args, input=input)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    if cloud is not None:
        assert cloud["kube"].created == [] and cloud["kube"].secrets == {}
        assert [m for m, *_ in cloud["kube"].requests if m in ("POST", "PUT", "DELETE")] == []
    return lines[0]


@pytest.mark.parametrize("command", [["run"], ["preflight"], ["status"], ["logs", "", "train"], ["render", "", "--out", "x"]])
def test_unknown_recipe_is_rejected_by_every_command(cloud, command):
    args = [command[0], "qwen3-v6e31", *command[2:]] if len(command) > 1 else [command[0], "qwen3-v6e31"]
    line = rejected(args, cloud)
    assert "unknown recipe 'qwen3-v6e31'" in line and "tpu-rl recipes" in line


def test_missing_settings_name_the_variables_to_export(cloud, monkeypatch):
    for key in ("PROJECT", "REGION", "ZONE", "CLUSTER_NAME", "GCS_BUCKET", "RESERVATION", "AUTHORIZED_CIDR"):
        monkeypatch.delenv(key)
    line = rejected(["run", RECIPE], cloud)
    assert line.startswith("error: PROJECT, REGION, ZONE, CLUSTER_NAME and GCS_BUCKET are not set: export PROJECT=<")


def test_one_missing_setting_is_named(cloud, monkeypatch):
    monkeypatch.delenv("GCS_BUCKET")
    assert "GCS_BUCKET is not set" in rejected(["run", RECIPE], cloud)


@pytest.mark.parametrize("command", [["run", RECIPE], ["preflight", RECIPE], ["status", RECIPE],
                                     ["logs", RECIPE, "train"], ["secret", "set"]])
def test_example_settings_never_reach_a_cloud(cloud, monkeypatch, command):
    from tpu_rl.recipes.settings.specs import EXAMPLE

    for field, value in EXAMPLE.items():
        monkeypatch.setenv(field.upper(), value)
    line = rejected(command, cloud, input="hf_x")
    assert "embedded example" in line
    assert cloud["google"].requests == []


def test_unknown_step_in_steps_is_rejected(cloud):
    line = rejected(["run", RECIPE, "--steps", "convert,tune"], cloud)
    assert "--steps 'convert,tune' names tune" in line


def test_unknown_step_for_logs_is_rejected(cloud):
    assert "unknown step 'eval'" in rejected(["logs", RECIPE, "eval"], cloud)


def test_no_kubeconfig_says_how_to_get_credentials(cloud, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    line = rejected(["run", RECIPE], cloud)
    assert "no kubeconfig" in line and "gcloud container clusters get-credentials rl-test --region us-east5" in line


def test_a_kubeconfig_for_another_cluster_is_not_used(cloud, monkeypatch, tmp_path):
    other = tmp_path / "other"
    write_kubeconfig(other, cloud["kube"].url, "gke_tpu-rl-test_us-east5_someone-else")
    monkeypatch.setenv("KUBECONFIG", str(other))
    line = rejected(["run", RECIPE], cloud)
    assert "no context for cluster 'rl-test'" in line
    assert cloud["kube"].requests == []


# Contexts that gcloud would write for clusters that are not the settings' (project tpu-rl-test, region
# us-east5, cluster rl-test): a name that merely ends with CLUSTER_NAME, another project, another region.
DECOY_CONTEXTS = [
    "gke_other-project_us-central1_prod-rl-test",
    "gke_other-project_us-east5_rl-test",
    "gke_tpu-rl-test_us-central1_rl-test",
    "gke_tpu-rl-test_us-east5_old-rl-test",
]


@pytest.mark.parametrize("decoy", DECOY_CONTEXTS)
@pytest.mark.parametrize("command", [["run", RECIPE], ["status", RECIPE], ["logs", RECIPE, "train"]])
def test_the_current_context_of_another_cluster_is_never_contacted(cloud, monkeypatch, tmp_path, decoy, command):
    """The token Secret must never be written into someone else's cluster: a current context whose
    cluster only resembles the settings' is refused before any request reaches it."""
    from peers.kube_api import KubeApi

    decoy_server = KubeApi().start()
    try:
        config = tmp_path / "decoy-kubeconfig"
        write_kubeconfig(config, decoy_server.url, decoy)
        monkeypatch.setenv("KUBECONFIG", str(config))
        line = rejected(command, cloud)
        assert decoy_server.requests == [], decoy_server.requests
        assert cloud["kube"].requests == []
        assert f"the current context is '{decoy}'" in line
        assert "looked for 'gke_tpu-rl-test_us-east5_rl-test'" in line
        assert "gcloud container clusters get-credentials rl-test --region us-east5 --project tpu-rl-test" in line
    finally:
        decoy_server.stop()


def test_a_renamed_context_of_the_right_cluster_is_used(cloud, monkeypatch, tmp_path):
    """kubectx-style renames keep the cluster entry gcloud wrote; that exact entry is what counts."""
    config = tmp_path / "renamed"
    write_kubeconfig(config, cloud["kube"].url, "my-training-cluster", cluster=CONTEXT)
    monkeypatch.setenv("KUBECONFIG", str(config))
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == ExitCode.OK, result.output
    assert cloud["kube"].requests != []


def test_an_unreachable_cluster_is_one_line(settings_env, gcs, google, monkeypatch, tmp_path):
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, f"http://127.0.0.1:{_free_port()}", CONTEXT)  # nothing listens there
    monkeypatch.setenv("KUBECONFIG", str(config))
    result = runner.invoke(app, ["run", RECIPE])
    assert result.exit_code == ExitCode.API_ERROR, result.output  # not bad input: a cloud that did not answer
    [line] = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert "cannot reach cluster 'rl-test'" in line and "AUTHORIZED_CIDR" in line


def test_a_cluster_without_the_jobset_crd_is_rejected(cloud):
    cloud["kube"].crd_installed = False
    line = rejected(["run", RECIPE], cloud)
    assert "JobSet CRD" in line and "not installed" in line and "kubectl apply --server-side" in line


def test_a_token_secret_without_versions_is_rejected_before_submitting(cloud):
    cloud["google"].secrets["hf-token"] = []
    line = rejected(["run", RECIPE], cloud)
    assert "secret 'hf-token' has no enabled version" in line and "tpu-rl secret set" in line


def test_a_disabled_latest_token_version_is_rejected(cloud):
    cloud["google"].secrets["hf-token"][0]["state"] = "DISABLED"
    assert "is disabled" in rejected(["run", RECIPE], cloud)


def test_a_missing_token_secret_points_to_the_artifacts_stack(cloud):
    del cloud["google"].secrets["hf-token"]
    assert "deploy the artifacts stack" in rejected(["run", RECIPE], cloud)


def test_a_step_whose_input_is_missing_is_not_started(cloud):
    line = rejected(["run", RECIPE, "--steps", "train"], cloud)
    assert "train needs the output of convert, which is missing" in line
    assert re.search(r"gs://rl-test-artifacts/qwen3-30b-a3b/max-text-format/0\.2\.4-scan-[0-9a-f]{7}/0/items/", line)


def test_export_alone_needs_the_trained_checkpoint(cloud):
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    line = rejected(["run", RECIPE, "--steps", "export"], cloud)
    assert "export needs the output of train" in line and "checkpoints/actor/<step>/commit_success.txt (no checkpoint step" in line


def test_empty_stdin_for_secret_set_adds_nothing(cloud):
    assert "no token on stdin" in rejected(["secret", "set"], cloud, input="")
    assert len(cloud["google"].secrets["hf-token"]) == 1


def test_no_google_credentials_says_how_to_log_in(settings_env, monkeypatch, tmp_path):
    for name in ("TPU_RL_SECRETMANAGER_ENDPOINT", "STORAGE_EMULATOR_HOST"):  # the real endpoints, unreached
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    line = rejected(["secret", "set"], input=TOKEN)  # a token of the right shape: the credentials are what is missing
    assert "no Google credentials" in line and "gcloud auth application-default login" in line


def test_a_negative_tail_is_refused_before_reading_logs(cloud):
    result = runner.invoke(app, ["logs", RECIPE, "train", "--tail", "-5"])
    assert result.exit_code == ExitCode.BAD_INPUT and "--tail" in result.output
    assert cloud["kube"].requests == []


def test_logs_of_a_step_that_never_ran(cloud):
    assert "no pod for step convert" in rejected(["logs", RECIPE, "convert"], cloud)


def test_a_kubeconfig_whose_credential_plugin_is_missing_is_one_line(cloud, monkeypatch, tmp_path):
    import json

    config = tmp_path / "exec-kubeconfig"
    write_kubeconfig(config, cloud["kube"].url, CONTEXT)
    data = json.loads(config.read_text())
    data["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                         "command": str(tmp_path / "gke-gcloud-auth-plugin"),
                                         "interactiveMode": "Never"}}
    config.write_text(json.dumps(data))
    monkeypatch.setenv("KUBECONFIG", str(config))
    line = rejected(["run", RECIPE], cloud)
    assert "gke-gcloud-auth-plugin" in line


def test_a_cluster_refusing_access_names_the_role(cloud):
    from peers.http import Fault

    cloud["kube"].faults.append(Fault("GET", "/apis/jobset.x-k8s.io/v1alpha2", 403))
    assert "roles/container.developer" in rejected(["run", RECIPE], cloud)
