"""The JobSets against the JobSet v0.12.0 CRD schema (strict) and their pod templates against Kubernetes.

Pod templates are wrapped as batch/v1 Jobs (their job spec included) and validated with
kubernetes-validate in strict mode, for the newest Kubernetes version that GKE's REGULAR channel runs.
"""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.k8s_schema import (
    CLAIM_NAMESPACE,
    KUBERNETES_VERSION,
    STARTUP_VS_DEPENDS,
    TRANSITION_RULE,
    cel_equivalents,
    cel_rules,
    jobs_as_batch_v1,
    list_uniqueness,
    load_jobset_schema,
    strict,
)
from tpu_rl.recipes import all_recipes, example_settings

SETTINGS = example_settings()
RENDERED = {
    (name, step): manifest
    for name, recipe in all_recipes().items() if recipe.platform == "gke"
    for step, manifest in jobs.render_manifests(spec_of(recipe), SETTINGS).items()
}
CASES = list(RENDERED)
IDS = [f"{name}-{step}" for name, step in CASES]


@pytest.fixture(scope="module")
def jobset_schema():
    return strict(load_jobset_schema())  # the vendored CRD (tests/contracts/vendor/jobset/)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jobset_matches_the_jobset_crd_schema_strictly(jobset_schema, case):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(jobset_schema).iter_errors(RENDERED[case])]
    assert errors == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jobset_lists_keep_the_crd_uniqueness_rules(jobset_schema, case):
    assert list_uniqueness(jobset_schema, RENDERED[case]) == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jobset_passes_the_crd_cel_rules(jobset_schema, case):
    assert cel_equivalents(RENDERED[case]) == []


def test_every_cel_rule_of_the_crd_is_understood(jobset_schema):
    known = {TRANSITION_RULE, STARTUP_VS_DEPENDS, CLAIM_NAMESPACE}
    unknown = [rule for rule in cel_rules(jobset_schema)
               if rule["rule"] != TRANSITION_RULE and rule["message"] not in known]
    assert unknown == [], "a new CEL rule in the CRD: re-state it in contracts/k8s_schema.cel_equivalents"


def test_strict_schema_rejects_an_unknown_field(jobset_schema):
    bad = jobs.render_manifests(spec_of(all_recipes()["qwen3-v6e32"]), SETTINGS)["train"]
    bad["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"
    messages = [e.message for e in jsonschema.Draft7Validator(jobset_schema).iter_errors(bad)]
    assert any("imagePullPolicyy" in message for message in messages)


def test_duplicate_container_names_are_caught(jobset_schema):
    bad = jobs.render_manifests(spec_of(all_recipes()["qwen3-v6e32"]), SETTINGS)["convert"]
    spec = bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    spec["containers"].append(dict(spec["containers"][0]))
    assert list_uniqueness(jobset_schema, bad) != []


def test_startup_policy_with_depends_on_is_caught():
    bad = jobs.render_manifests(spec_of(all_recipes()["qwen3-v6e32"]), SETTINGS)["train"]
    bad["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "pathways-head", "status": "Ready"}]
    assert cel_equivalents(bad) == [STARTUP_VS_DEPENDS]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pod_templates_pass_kubernetes_validate_strict(case):
    for _, job in jobs_as_batch_v1(RENDERED[case]):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validate_strict_rejects_an_unknown_pod_field():
    _, job = next(jobs_as_batch_v1(RENDERED[CASES[0]]))
    job["spec"]["template"]["spec"]["nodeSelectr"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def _with_rewards(tmp_path):
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.recipes.runs.user_files import read_user_file

    path = tmp_path / "my_rewards.py"
    path.write_text("def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0] * len(completions)\n")
    recipe = all_recipes()["qwen3-v6e32"]
    return RunSpec.of_catalog(recipe).with_user_files((read_user_file(recipe, "rewards", path, ("short",)),))


def test_the_user_files_configmap_passes_kubernetes_validate_strict_and_is_what_train_mounts(tmp_path):
    recipe = _with_rewards(tmp_path)
    configmap = jobs.user_files_configmap(jobs.ArtifactPaths(spec_of(recipe), SETTINGS))
    kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)
    train = jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]
    volumes = [volume for job in train["spec"]["replicatedJobs"]
               for volume in job["template"]["spec"]["template"]["spec"].get("volumes", []) if "configMap" in volume]
    assert [volume["configMap"]["name"] for volume in volumes] == [configmap["metadata"]["name"]]
    assert configmap["metadata"]["namespace"] == train["metadata"]["namespace"]
    bad = {**configmap, "datta": configmap["data"]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_a_run_without_user_files_has_no_configmap():
    assert jobs.user_files_configmap(jobs.ArtifactPaths(spec_of(all_recipes()["qwen3-v6e32"]), SETTINGS)) is None
