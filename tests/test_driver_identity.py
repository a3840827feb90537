"""The run's driver's identity as the GKE stacks install it: its Kubernetes service account on the workload
Google SA, and the namespaced Role of recipes/driver/access.py bound to it, checked against Kubernetes'
own schemas (kubernetes-validate, strict) and read from the synthesized stacks."""

from __future__ import annotations

import kubernetes_validate
import pytest
from conftest import queue_manifests

from contracts.k8s_schema import KUBERNETES_VERSION
from tpu_rl.infra.driver_identity import driver_role_manifests, role_rules
from tpu_rl.recipes import conventions
from tpu_rl.recipes.driver.access import DRIVER_RULES

GKE = ["qwen3-v6e32", "gemma4-v6e64"]
NAME = conventions.DRIVER_KSA
CORE_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def rbac_objects(stack_json) -> dict[str, dict]:
    """The chart's Kubernetes objects of core kinds (the rest are Kueue's, checked against its CRDs)."""
    return {key: obj for key, obj in queue_manifests(stack_json).items() if obj["kind"] in CORE_KINDS}


@pytest.mark.parametrize("stack", GKE)
def test_the_charts_service_accounts_role_and_binding_pass_kubernetes_validate_strict(stacks_json, stack):
    objects = rbac_objects(stacks_json[stack])
    assert {f"Role/{NAME}", f"RoleBinding/{NAME}", f"ServiceAccount/{NAME}"} <= set(objects)
    for obj in objects.values():
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validate_strict_rejects_a_role_rule_with_an_unknown_field():
    role, _ = driver_role_manifests(conventions.NAMESPACE, NAME)
    role["rules"][0]["resourceNamez"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(role, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("stack", GKE)
def test_the_driver_gets_a_namespaced_role_of_exactly_its_rules_and_no_cluster_role(stacks_json, stack):
    objects = rbac_objects(stacks_json[stack])
    assert not [key for key in objects if key.startswith("Cluster")]  # the pipeline reads nothing cluster-scoped
    role, binding = objects[f"Role/{NAME}"], objects[f"RoleBinding/{NAME}"]
    assert role["metadata"] == {"name": NAME, "namespace": conventions.NAMESPACE}
    assert role["rules"] == [{"apiGroups": [rule.api_group], "resources": [rule.resource], "verbs": list(rule.verbs)}
                             for rule in DRIVER_RULES] == role_rules()
    assert binding["metadata"] == {"name": NAME, "namespace": conventions.NAMESPACE}
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": conventions.NAMESPACE}]


def test_the_drivers_rules_never_reach_secrets_configmaps_or_rbac_and_never_use_a_wildcard():
    """The driver never reads the token (the attaching CLI fills its Secret), never writes a ConfigMap,
    and cannot grant itself more: no Secret, ConfigMap or RBAC object, no `*`, no escalate, bind or
    impersonate."""
    for rule in DRIVER_RULES:
        assert rule.resource.split("/")[0] not in ("secrets", "configmaps", "serviceaccounts"), rule
        assert rule.api_group != "rbac.authorization.k8s.io", rule
        assert "*" not in (rule.api_group, rule.resource, *rule.verbs), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule.verbs), rule
        assert rule.why and len(rule.why) <= 100, rule  # one line, saying why
    keys = [(rule.api_group, rule.resource) for rule in DRIVER_RULES]
    assert len(keys) == len(set(keys))  # one rule per resource: its verbs in one place


def test_security_md_lists_the_drivers_rules_as_the_role_has_them():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    table = text.split("| API group | resource | verbs | why |\n| --- | --- | --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    expected = [[f"`{rule.api_group}`" if rule.api_group else 'core (`""`)', f"`{rule.resource}`",
                 ", ".join(f"`{verb}`" for verb in rule.verbs), rule.why] for rule in DRIVER_RULES]
    assert rows == expected
    assert f"Kubernetes service account `{NAME}` in `{conventions.NAMESPACE}`" in " ".join(text.split())
