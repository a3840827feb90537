"""Kubernetes contracts without a cluster: the JobSet CRD schema (strict) and kubernetes-validate.

The CRD's openAPIV3Schema is checked with jsonschema after making it strict the way the API server is
with `kubectl apply` (field validation Strict): an object schema with `properties` rejects unknown fields.
The x-kubernetes-* extensions are honoured explicitly, not ignored:
- x-kubernetes-list-type map/set: list items must be unique by their keys (checked here);
- x-kubernetes-int-or-string: the schema's anyOf already allows both;
- x-kubernetes-validations (CEL): each rule must be one we know; "self == oldSelf" only applies to
  updates, the other two are re-stated in Python below. A new rule in a newer CRD fails the test.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any, Iterator

import yaml

# The CRD is vendored (unmodified upstream data; SOURCE.toml beside it names the release, commit, path
# and licence), so the contract tests run in any clone, a fork's CI included.
JOBSET_VENDOR = Path(__file__).resolve().parent / "vendor" / "jobset"
JOBSET_CRD = JOBSET_VENDOR / "jobset.x-k8s.io_jobsets.yaml"
# GKE's REGULAR channel offers 1.34 to 1.36 (release notes, autumn 2026); 1.36 is the newest it runs
# that kubernetes-validate ships schemas for.
KUBERNETES_VERSION = "1.36.0"

TRANSITION_RULE = "self == oldSelf"
STARTUP_VS_DEPENDS = "StartupPolicy and DependsOn APIs are mutually exclusive"
CLAIM_NAMESPACE = "namespace cannot be set for VolumeClaimPolicies templates"


def jobset_source() -> dict[str, str]:
    """Where the vendored CRD comes from: repository, tag, commit, path, license, sha256."""
    return tomllib.loads((JOBSET_VENDOR / "SOURCE.toml").read_text())


def load_jobset_schema() -> dict[str, Any]:
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    return version["schema"]["openAPIV3Schema"]


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy that rejects unknown fields wherever the schema lists properties."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def cel_rules(schema: Any) -> Iterator[dict[str, str]]:
    if isinstance(schema, dict):
        yield from schema.get("x-kubernetes-validations", [])
        for value in schema.values():
            yield from cel_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from cel_rules(value)


def cel_equivalents(jobset: dict[str, Any]) -> list[str]:
    """The CRD's create-time CEL rules, re-stated in Python."""
    problems = []
    spec = jobset["spec"]
    in_order = spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder"
    if in_order and any("dependsOn" in job for job in spec["replicatedJobs"]):
        problems.append(STARTUP_VS_DEPENDS)
    for policy in spec.get("volumeClaimPolicies", []):
        if any(t.get("metadata", {}).get("namespace") for t in policy.get("templates", [])):
            problems.append(CLAIM_NAMESPACE)
    return problems


def list_uniqueness(schema: dict[str, Any], instance: Any, path: str = "") -> list[str]:
    """x-kubernetes-list-type map/set: no two items with the same keys (e.g. two containers named alike)."""
    problems: list[str] = []
    if isinstance(instance, list) and isinstance(schema, dict):
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = [tuple(item.get(k) for k in keys) for item in instance]
            if len(seen) != len(set(seen)):
                problems.append(f"{path}: duplicate {keys} in a list-type map")
        elif kind == "set" and len(instance) != len({repr(item) for item in instance}):
            problems.append(f"{path}: duplicate items in a list-type set")
        for index, item in enumerate(instance):
            problems += list_uniqueness(schema.get("items", {}), item, f"{path}[{index}]")
    elif isinstance(instance, dict) and isinstance(schema, dict):
        properties = schema.get("properties", {})
        for key, value in instance.items():
            sub = properties.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                problems += list_uniqueness(sub, value, f"{path}.{key}")
    return problems


def jobs_as_batch_v1(jobset: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each replicated job's template as a batch/v1 Job, so its pod template meets the core schemas."""
    for replicated in jobset["spec"]["replicatedJobs"]:
        template = replicated["template"]
        yield replicated["name"], {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{jobset['metadata']['name']}-{replicated['name']}",
                         **template.get("metadata", {})},
            "spec": template["spec"],
        }
