"""The run's driver Job and its request ConfigMap (jobs/driver.py) against Kubernetes' schemas
(kubernetes-validate --strict, as the JobSets' pod templates in test_jobs_k8s_contract.py), and the rules
the design sets: one pod at a time, disruptions not counted, an outcome never retried, a deadline, the
always-on system pool and the driver's own service account, and no secret anywhere."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from contracts.k8s_schema import KUBERNETES_VERSION
from peers.settings import spec_of
from tpu_rl.jobs.driver import (REQUEST_DIR, REQUEST_FILE, RETRY_EXIT_CODE, driver_job,
                                exit_code_values, request_configmap, request_digest, run_request, settings_env)
from tpu_rl.jobs.driver_runtime import DriverRuntime
from tpu_rl.jobs.k8s import recipe_selector
from tpu_rl.recipes import STEPS, all_recipes, example_settings
from tpu_rl.recipes.conventions import DRIVER_KSA
from tpu_rl.recipes.outcome import DRIVER_BACKOFF_LIMIT

SETTINGS = example_settings()
GKE = [name for name, recipe in all_recipes().items() if recipe.platform == "gke"]
RUNTIME = DriverRuntime(image="registry.example/driver@sha256:" + "0" * 64, version="9.9.9", bucket="b",
                        requirements="runtimes/9.9.9/requirements.txt", requirements_sha256="0" * 64)


def rendered(name: str):
    spec = spec_of(all_recipes()[name])
    request = run_request(spec, STEPS, replace=False, follow_logs=False, version=RUNTIME.version)
    return spec, request, driver_job(spec, SETTINGS, RUNTIME, request, DIGEST)


DIGEST = "ab" * 32


@pytest.mark.parametrize("name", GKE)
def test_the_driver_job_and_its_request_pass_kubernetes_validate_strict(name):
    spec, request, job = rendered(name)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    kubernetes_validate.validate(request_configmap(spec, request, DIGEST), KUBERNETES_VERSION, strict=True)
    owned = request_configmap(spec, request, DIGEST, {"metadata": {"name": job["metadata"]["name"], "uid": "u-1"}})
    kubernetes_validate.validate(owned, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validate_strict_rejects_an_unknown_job_field():
    _, _, job = rendered(GKE[0])
    job["spec"]["podReplacementPolicyy"] = "Failed"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", GKE)
def test_one_driver_pod_at_a_time_on_the_system_pool_as_the_driver_with_no_deadline(name):
    spec, _, job = rendered(name)
    recipe = spec.recipe
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == f"tpu-rl-driver-{recipe.name}-{job['metadata']['labels']['tpu-rl/run'][-7:]}"
    assert spec["podReplacementPolicy"] == "Failed"  # never two drivers of one run at once
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == DRIVER_KSA
    # the always-on e2-standard-4 of the system pool, on the lock's architecture; never cpu-np, whose big
    # node a 250m pod would keep up through a capacity wait (so no toleration of its taint)
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system-np", "kubernetes.io/arch": "amd64"}
    assert "tolerations" not in pod
    # what `down` and `runs` select the recipe's objects by finds the driver's Job and its pod
    key, value = recipe_selector(recipe).split("=")
    assert job["metadata"]["labels"][key] == value == job["spec"]["template"]["metadata"]["labels"][key]
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    # the run's own endings (recipes/outcome.py RUN_DECIDED: a failed step, bad input, a missing output, an
    # API's answer that will not change, an interrupt that was no SIGTERM) end the Job; what `drive` exits
    # for anything else matches no rule
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"] == {
        "containerName": "driver", "operator": "In", "values": [1, 2, 3, 4, 130]}
    assert RETRY_EXIT_CODE not in rules[1]["onExitCodes"]["values"]
    assert spec["backoffLimit"] == DRIVER_BACKOFF_LIMIT  # a run's whole budget: the test below
    # no deadline: it would count a sweep's queue and end the driver with its JobSets running
    assert "activeDeadlineSeconds" not in spec
    assert pod["terminationGracePeriodSeconds"] <= 15  # the driver ends on SIGTERM


def _backoff_seconds(failures: int) -> int:
    """The Job's wait before the pod after `failures` failed ones: 10 s doubling, capped at 10 min
    (kubernetes/kubernetes pkg/controller/job/job_controller.go DefaultJobPodFailureBackOff and
    MaxJobPodFailureBackOff; the docs' "six minutes" is older), never reset by time (backoff_utils.go: only a
    pod that succeeds resets it)."""
    return min(10 * 2 ** (failures - 1), 10 * 60)


def test_the_drivers_retries_last_a_days_long_run_and_a_failure_for_good_still_ends_its_job():
    """The Job counts every failed pod of its life (the docs: its retries are its pods with
    .status.phase=Failed), so its backoffLimit is the whole run's budget, not one outage's."""
    # an API away for 20 min (a control plane's repair) from a cold start, when the waits are shortest
    per_outage = next(n for n in range(1, 100) if sum(map(_backoff_seconds, range(1, n + 1))) >= 20 * 60)
    assert DRIVER_BACKOFF_LIMIT >= 8 * per_outage  # eight of them over the run's days
    # a failure taken for transient that comes back at once: given up the same day, within 10 h of waits
    assert sum(map(_backoff_seconds, range(1, DRIVER_BACKOFF_LIMIT + 1))) <= 10 * 3600


def test_the_exit_codes_the_job_fails_on_go_sorted_and_once_whatever_order_they_are_declared_in():
    """The API server refuses onExitCodes values out of order or repeated ("The list of values must be ordered
    and must not contain duplicates", batch/v1 PodFailurePolicyOnExitCodesRequirement): a code declared after a
    larger one, or twice, leaves the Job valid."""
    from enum import IntEnum

    class Later(IntEnum):  # as recipes/outcome.py's ExitCode would be with a code added after INTERRUPTED
        INTERRUPTED = 130
        STALLED = 6

    assert exit_code_values([*Later, 1, 6]) == (1, 6, 130)


def test_the_request_is_mounted_from_its_configmap_and_carries_the_run_and_its_files():
    spec, request, job = rendered("qwen3-v6e32")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["drive", "--request", f"{REQUEST_DIR}/{REQUEST_FILE}"]
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == REQUEST_DIR]
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    configmap = request_configmap(spec, request, DIGEST)
    assert volume["configMap"]["name"] == configmap["metadata"]["name"] and mount["readOnly"]
    assert configmap["metadata"]["name"].endswith(f"-request-{DIGEST[:12]}")  # its own: never another run's
    assert json.loads(configmap["data"][REQUEST_FILE]) == {
        "recipe": "qwen3-v6e32", "steps": list(STEPS), "sets": [], "run": None, "sweep": None, "replace": False,
        "follow_logs": False, "user_files": [], "fit": None, "version": "9.9.9"}


def test_the_settings_go_as_the_env_vars_a_user_sets_and_nothing_secret_does():
    _, _, job = rendered("qwen3-v6e32")
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PROJECT"] == SETTINGS.project and env["GCS_BUCKET"] == SETTINGS.gcs_bucket
    assert env["ZONE"] == ",".join(SETTINGS.zones) and env["CLUSTER_NAME"] == SETTINGS.cluster_name
    assert set(settings_env(SETTINGS)) <= set(env)
    assert len(env) == len(job["spec"]["template"]["spec"]["containers"][0]["env"])  # each name once
    assert "HF_TOKEN" not in env and not any("secretKeyRef" in str(item) for item in env.values())
    assert "AUTHORIZED_CIDR" not in env and "TF_STATE_BUCKET" not in env


def test_a_request_differs_by_what_the_run_does_not_by_how_run_meets_it():
    spec = spec_of(all_recipes()["qwen3-v6e32"])
    request = run_request(spec, STEPS, replace=False, follow_logs=False, version="1")
    same = run_request(spec, STEPS, replace=True, follow_logs=True, version="2")
    of_a_sweep = run_request(spec.with_sweep("lr"), STEPS, replace=False, follow_logs=False, version="1")
    other = run_request(spec, ("convert",), replace=False, follow_logs=False, version="1")
    env = settings_env(SETTINGS)
    assert of_a_sweep["sweep"] == "lr" and request_digest(of_a_sweep, {}, env) == request_digest(request, {}, env)
    assert request_digest(request, {}, env) == request_digest({**same, "command": ["tpu-rl", "run"]}, {}, env)
    assert request_digest(request, {}, env) != request_digest(other, {}, env)
    assert request_digest(request, {}, env) != request_digest(request, {"r.py": "x"}, env)
    # another CAPACITY is another request: a second `run` with it does not attach silently
    assert request_digest(request, {}, env) != request_digest(request, {}, {**env, "CAPACITY": "spot"})


def test_a_setting_nobody_set_is_left_out_and_any_other_error_is_not_swallowed(monkeypatch):
    """settings_env skips exactly a setting the command did not need and nobody set (MissingSettings); a
    field that is no setting is a bug, raised, not a missing env var in the driver's pod."""
    from tpu_rl import jobs
    from tpu_rl.recipes import load_settings

    settings = load_settings({"PROJECT": "my-project-1", "GCS_BUCKET": "my-bucket-1"}, needs=("project", "gcs_bucket"))
    env = settings_env(settings)
    assert env["PROJECT"] == "my-project-1" and env["GCS_BUCKET"] == "my-bucket-1"
    assert not {"REGION", "ZONE", "CLUSTER_NAME"} & set(env)
    monkeypatch.setattr(jobs.driver, "DRIVER_SETTINGS", (*jobs.driver.DRIVER_SETTINGS, "no_such_setting"))
    with pytest.raises(AttributeError):
        settings_env(SETTINGS)
