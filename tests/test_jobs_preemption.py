"""The train JobSet on preemptible capacity (spot, flex-start): a bounded failurePolicy that the vendored
JobSet v0.12.0 CRD and Kubernetes accept, and none on a reservation (seed 000's maxRestarts 0); on a
flex-start slice, workers that do not wait for the head."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.k8s_schema import KUBERNETES_VERSION, jobs_as_batch_v1, list_uniqueness, load_jobset_schema, strict
from seed_differences import XPK_DIFFERENCES
from tpu_rl.recipes import all_recipes, example_settings

SETTINGS = example_settings()
# JobSet v0.12.0 pkg/webhooks/jobset_webhook.go: a rule's name must match ruleNameFmt and be 1-128 characters;
# onJobFailureReasons must be Job failure reasons (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy, ...).
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy", "MaxFailedIndexesExceeded",
                       "FailedIndexes"}


def train(recipe_name: str, capacity: tuple[str, ...]) -> dict:
    recipe = all_recipes()[recipe_name].with_capacity(capacity, "CAPACITY")
    return jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]


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
        manifests = jobs.render_manifests(spec_of(recipe), SETTINGS)
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


# --- the start order on a flex-start slice ---------------------------------------------------------------
# JobSet v0.12.0 api/jobset/v1alpha2/jobset_types.go, StartupPolicy: "InOrder means to start them as they are
# listed in the JobSet. A ReplicatedJob is started only when all the jobs of the previous one are ready."
# On flex-start the slice is provisioned before Kueue admits the JobSet and booked for it for 10 minutes only
# (kubernetes/autoscaler cluster-autoscaler/FAQ.md, BookingExpired); Kueue v0.17.1 ignores the expiry once the
# workload is admitted (site/content/en/docs/concepts/admission_check/provisioning_request.md).
FLEX_START = [("flex-start",), ("reservation", "flex-start"), ("flex-start", "spot")]
WITHOUT_FLEX_START = [("reservation",), ("spot",), ("on-demand", "spot")]
XPK_TEMPLATE = Path(__file__).parent / "contracts" / "vendor" / "xpk" / "pathways_workload_create.yaml.j2"


def xpk_startup_order() -> str:
    """The startupPolicyOrder of xpk v1.13.1's Pathways JobSet, read off the vendored template."""
    (order,) = re.findall(r"\n  startupPolicy:\n    startupPolicyOrder: (\w+)\n", XPK_TEMPLATE.read_text())
    return order


def worker_job(manifest: dict) -> dict:
    return next(rj for rj in manifest["spec"]["replicatedJobs"] if rj["name"] == "worker")["template"]["spec"]


def workers_wait_for_the_head(manifest: dict) -> bool:
    """Whether JobSet starts the workers only once the head's Job is ready (the InOrder rule above)."""
    names = [rj["name"] for rj in manifest["spec"]["replicatedJobs"]]
    in_order = manifest["spec"]["startupPolicy"]["startupPolicyOrder"] == "InOrder"
    depends = any(rj.get("dependsOn") for rj in manifest["spec"]["replicatedJobs"])
    return depends or (in_order and names.index("pathways-head") < names.index("worker"))


@pytest.mark.parametrize("recipe_name", ["qwen3-v6e32", "gemma4-v6e64"])
@pytest.mark.parametrize("capacity", FLEX_START, ids=",".join)
def test_on_a_flex_start_slice_the_workers_start_with_the_head_inside_the_booking(jobset_schema, recipe_name,
                                                                                   capacity):
    manifest = train(recipe_name, capacity)
    assert not workers_wait_for_the_head(manifest)
    assert manifest["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert [e.message for e in jsonschema.Draft7Validator(jobset_schema).iter_errors(manifest)] == []
    # A worker up before the head can be reached may fail and restart until it is; a Job counts each of its
    # pods' container restarts (restartPolicy OnFailure) against backoffLimit. apple/axlearn, whose Pathways
    # JobSets set no start order, allows 32 per host (axlearn/cloud/gcp/pathways_utils.py
    # _PATHWAYS_BACK_OFF_LIMIT = 32, @34aed43c), not xpk's 4.
    worker = worker_job(manifest)
    assert worker["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert worker["backoffLimit"] == 32 * worker["parallelism"]


@pytest.mark.parametrize("capacity", WITHOUT_FLEX_START, ids=",".join)
def test_without_flex_start_the_workers_wait_for_the_head_as_in_xpk(capacity):
    manifest = train("qwen3-v6e32", capacity)
    assert xpk_startup_order() == "InOrder"
    assert manifest["spec"]["startupPolicy"] == {"startupPolicyOrder": xpk_startup_order()}
    assert workers_wait_for_the_head(manifest)
    worker = worker_job(manifest)  # xpk v1.13.1 src/xpk/commands/workload.py: vms_per_slice * 4
    assert worker["backoffLimit"] == 4 * worker["parallelism"]


def test_the_listed_start_order_difference_from_xpk_holds():
    (difference,) = [d for d in XPK_DIFFERENCES if d.key == "startupPolicyOrder"]
    assert difference.xpk == xpk_startup_order()
    ours = train("qwen3-v6e32", ("flex-start",))["spec"]["startupPolicy"]["startupPolicyOrder"]
    assert ours != difference.xpk and ours in difference.ours
