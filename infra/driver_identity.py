"""The run's driver's identity in the cluster: its Kubernetes service account, mapped to the workload
Google SA by Workload Identity (the bucket, nothing else), and a namespaced Role with the rules of
recipes/driver/access.py, bound to it. Installed by tpu_rl.infra.cluster_addons with the queue objects."""

from __future__ import annotations

from typing import Any

from tpu_rl.recipes.driver.access import DRIVER_RULES, AccessRule

RBAC_API = "rbac.authorization.k8s.io/v1"


def role_rules(rules: tuple[AccessRule, ...] = DRIVER_RULES) -> list[dict[str, list[str]]]:
    """The rules as an RBAC Role's `rules` (k8s.io/api rbac/v1 PolicyRule): one per resource."""
    return [{"apiGroups": [rule.api_group], "resources": [rule.resource], "verbs": list(rule.verbs)}
            for rule in rules]


def driver_role_manifests(namespace: str, name: str) -> list[dict[str, Any]]:
    """The driver's Role and the RoleBinding that gives it to the service account `name`; both named
    after it, in `namespace`, so the driver may do nothing outside it."""
    return [
        {"apiVersion": RBAC_API, "kind": "Role", "metadata": {"name": name, "namespace": namespace},
         "rules": role_rules()},
        {"apiVersion": RBAC_API, "kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
         "roleRef": {"apiGroup": RBAC_API.split("/")[0], "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]
