"""The fake Kubernetes API's error answers: Status objects as the API server writes them
(k8s.io/apimachinery pkg/apis/meta/v1 Status, StatusDetails)."""

from __future__ import annotations

from peers.http import Reply


def status(code: int, reason: str, message: str, details: dict | None = None) -> Reply:
    return Reply(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": message, "reason": reason, **({"details": details} if details else {}),
                        "code": code})


def success(name: str, group: str, resource: str, uid: str) -> Reply:
    """The answer to a DELETE that removed the object at once: the store's finalizeDelete Status, whose
    details name the resource in `kind` (kubernetes/apiserver registry/generic/registry/store.go)."""
    return Reply(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                       "details": {"name": name, "group": group, "kind": resource, "uid": uid}})
