"""The train JobSet on preemptible capacity (spot, flex-start): a bounded failurePolicy that the vendored
JobSet v0.12.0 CRD and Kubernetes accept, and none on a reservation (seed 000's maxRestarts 0)."""

from __future__ import annotations

import re

import jsonschema
import kubernetes_validate
import pytest

import jobs
from contracts.k8s_schema import KUBERNETES_VERSION, jobs_as_batch_v1, list_uniqueness, load_jobset_schema, strict
from recipes import all_recipes, example_settings

SETTINGS = example_settings()
# JobSet v0.12.0 pkg/webhooks/jobset_webhook.go: a rule's name must match ruleNameFmt and be 1-128 characters;
# onJobFailureReasons must be Job failure reasons (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy, ...).
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy", "MaxFailedIndexesExceeded",
                       "FailedIndexes"}


def train(recipe_name: str, capacity: tuple[str, ...]) -> dict:
    recipe = all_recipes()[recipe_name].with_capacity(capacity, "CAPACITY")
    return jobs.render_manifests(recipe, SETTINGS)["train"]


def head_job(manifest: dict) -> dict:
    return next(rj for rj in manifest["spec"]["replicatedJobs"] if rj["name"] == "pathways-head")["template"]["spec"]


PREEMPTIBLE = [("spot",), ("flex-start",), ("reservation", "spot"), ("reservation", "flex-start"),
               ("flex-start", "spot"), ("on-demand", "spot")]
NOT_PREEMPTIBLE = [("reservation",), ("on-demand",), ("reservation", "on-demand")]


POLICY = {
    "maxRestarts": 3,
    "restartStrategy": "BlockingRecreate",
    "rules": [{"name": "headCheckFailed", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
               "targetReplicatedJobs": ["pathways-head"]}],
}
SEED_000 = {"maxRestarts": 0, "restartStrategy": "Recreate"}


@pytest.mark.parametrize("recipe_name", ["qwen3-v6e32", "gemma4-v6e64"])
def test_only_train_on_preemptible_capacity_restarts_and_at_most_three_times(recipe_name):
    for capacity in PREEMPTIBLE:
        assert train(recipe_name, capacity)["spec"]["failurePolicy"] == POLICY, capacity
        recipe = all_recipes()[recipe_name].with_capacity(capacity, "CAPACITY")
        manifests = jobs.render_manifests(recipe, SETTINGS)
        assert manifests["convert"]["spec"]["failurePolicy"] == manifests["export"]["spec"]["failurePolicy"] == SEED_000
    for capacity in NOT_PREEMPTIBLE:  # a failure there is a real one
        manifest = train(recipe_name, capacity)
        assert manifest["spec"]["failurePolicy"] == SEED_000, capacity
        assert "podFailurePolicy" not in head_job(manifest)


def test_a_refused_head_check_fails_the_job_through_its_pod_failure_policy():
    manifest = train("qwen3-v6e32", ("spot",))
    head = head_job(manifest)
    assert head["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onExitCodes": {
        "containerName": "workload-container", "operator": "In", "values": [78]}}]}
    assert head["template"]["spec"]["restartPolicy"] == "Never"  # the API server requires it for podFailurePolicy
    script = head["template"]["spec"]["containers"][0]["command"][2]
    check = script.split("tpu-rl check failed: ")[1]
    assert "\n  exit 78\nfi" in check  # the JAX/Pathways pairing check exits with that code


@pytest.fixture(scope="module")
def jobset_schema():
    return strict(load_jobset_schema())


@pytest.mark.parametrize("recipe_name", ["qwen3-v6e32", "gemma4-v6e64"])
@pytest.mark.parametrize("capacity", [("spot",), ("reservation", "flex-start")], ids=",".join)
def test_the_restartable_train_jobset_meets_the_crd_and_the_webhook(jobset_schema, recipe_name, capacity):
    manifest = train(recipe_name, capacity)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(jobset_schema).iter_errors(manifest)]
    assert errors == [] and list_uniqueness(jobset_schema, manifest) == []
    names = {rj["name"] for rj in manifest["spec"]["replicatedJobs"]}
    for rule in manifest["spec"]["failurePolicy"]["rules"]:
        assert RULE_NAME.match(rule["name"]) and len(rule["name"]) <= 128
        assert set(rule["targetReplicatedJobs"]) <= names
        assert set(rule["onJobFailureReasons"]) <= JOB_FAILURE_REASONS
    for _, job in jobs_as_batch_v1(manifest):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_the_crd_rejects_a_restart_strategy_it_does_not_know(jobset_schema):
    bad = train("qwen3-v6e32", ("spot",))
    bad["spec"]["failurePolicy"]["restartStrategy"] = "RecreateLater"
    assert any("RecreateLater" in e.message for e in jsonschema.Draft7Validator(jobset_schema).iter_errors(bad))
