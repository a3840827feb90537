"""DELETE as the API server handles it, and the garbage collector after it, in the fake Kubernetes API.
Mixed into peers.kube_api.KubeApi (JobSets; peers/job_life.py uses the same rules for Jobs).

Read from kubernetes/apiserver, kubernetes/apimachinery and kubernetes/kubernetes (the tags and functions
are in docs/provenance.md#foreground-deletion-and-its-wait):
- DeleteOptions come from the request's body when it has one, else from its query (DeleteResource);
  a policy other than Foreground, Background or Orphan, or one beside orphanDependents, is 422 Invalid
  (ValidateDeleteOptions).
- preconditions.uid naming another object is 409 Conflict, before anything changes (rest.BeforeDelete).
- The policy is the options', else the object's finalizers', else the resource's default
  (shouldDeleteDependents, shouldOrphanDependents): none for a custom resource, which is background;
  Orphan for batch/v1 Jobs (jobStrategy.DefaultGarbageCollectionPolicy).
- Foreground: the object stays, with its deletionTimestamp and the foregroundDeletion finalizer
  (markAsDeleting), until the garbage collector has deleted its dependents and seen them gone
  (attemptToDeleteItem, processDeletingDependentsItem). Orphan: the orphan finalizer, until the
  collector has taken the owner out of its dependents. Background: the object goes at once, and the
  collector deletes its dependents later, as their owner is gone.
Time is the fake's requests: each is one pass of the collector, and a pod it deletes stays, with its
deletionTimestamp, for `pod_stop_passes` passes (its grace period, as the kubelet stops it). A JobSet's
dependents are its pods (by JobSet's jobset-uid label; the Jobs between them are not modelled) and its
Kueue Workload with the ProvisioningRequests that the Workload owns.
"""

from __future__ import annotations

import json

from peers import kueue
from peers.http import Reply
from peers.kube_status import status, success

FOREGROUND_FINALIZER, ORPHAN_FINALIZER = "foregroundDeletion", "orphan"  # metav1 FinalizerDeleteDependents, ...
POLICIES = ("Foreground", "Background", "Orphan")
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"  # JobSet v0.12.0 labelAndAnnotateObject, on Jobs and pods


def delete_options(body: bytes, query: dict) -> dict:
    """The request's DeleteOptions: its body when it has one (the query is then not read), else its query
    parameters (as the parameter codec decodes them)."""
    if body:
        return json.loads(body)
    options: dict = {}
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        options["orphanDependents"] = query["orphanDependents"] == "true"
    return options


def refused(options: dict) -> Reply | None:
    """ValidateDeleteOptions' answer (422, NewInvalid's Status), None for valid options."""
    policy = options.get("propagationPolicy")
    if policy is not None and options.get("orphanDependents") is not None:
        why = (f'propagationPolicy: Invalid value: "{policy}": orphanDependents and deletionPropagation cannot '
               "be both set")
    elif policy is not None and policy not in POLICIES:
        why = (f'propagationPolicy: Unsupported value: "{policy}": supported values: "Foreground", "Background", '
               '"Orphan", "nil"')
    else:
        return None
    return status(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {why}',
                  {"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": [
                      {"reason": "FieldValueInvalid" if "Invalid value" in why else "FieldValueNotSupported",
                       "message": why.split(": ", 1)[1], "field": "propagationPolicy"}]})


def precondition_failed(kind: str, group: str, name: str, wanted: str, actual: str) -> Reply:
    """BeforeDelete's 409 for preconditions.uid of another object (NewConflict of the object's kind)."""
    return status(409, "Conflict", f'Operation cannot be fulfilled on {kind}.{group} "{name}": the UID in the '
                                   f"precondition ({wanted}) does not match the UID in record ({actual}). The "
                                   "object might have been deleted and then recreated",
                  {"name": name, "group": group, "kind": kind})


def propagation(options: dict, finalizers: list[str], default: str) -> str:
    """Foreground, Background or Orphan: the options', else the finalizers', else the resource's default."""
    if options.get("orphanDependents") is not None:
        return "Orphan" if options["orphanDependents"] else "Background"
    if options.get("propagationPolicy"):
        return options["propagationPolicy"]
    if FOREGROUND_FINALIZER in finalizers:
        return "Foreground"
    return "Orphan" if ORPHAN_FINALIZER in finalizers else default


def mark_deleting(meta: dict, policy: str) -> bool:
    """Set the finalizers the policy asks for and, with any, the deletionTimestamp (store.go
    deletionFinalizersForGarbageCollection, markAsDeleting); whether the object stays for now."""
    kept = [f for f in meta.get("finalizers") or [] if f not in (FOREGROUND_FINALIZER, ORPHAN_FINALIZER)]
    kept += {"Foreground": [FOREGROUND_FINALIZER], "Orphan": [ORPHAN_FINALIZER]}.get(policy, [])
    if not kept:
        return False
    meta["finalizers"] = kept
    meta.setdefault("deletionTimestamp", kueue.now())
    meta["deletionGracePeriodSeconds"] = 0
    return True


class Deletion:
    """Needs KubeApi's jobsets, pods, workloads, provreqs, deleted, pod_stop_passes and _assigned."""

    def _delete_jobset(self, name: str, body: bytes, query: dict) -> Reply:
        obj = self.jobsets[name]
        meta = obj["metadata"]
        options = delete_options(body, query)
        if (answer := refused(options)) is not None:
            return answer
        wanted = (options.get("preconditions") or {}).get("uid")
        if wanted and wanted != meta["uid"]:
            return precondition_failed("JobSet", "jobset.x-k8s.io", name, wanted, meta["uid"])
        self.deleted.append(name)
        if mark_deleting(meta, propagation(options, meta.get("finalizers") or [], "Background")):
            return Reply(200, obj)
        del self.jobsets[name]
        return success(name, "jobset.x-k8s.io", "jobsets", meta["uid"])

    def _collect(self) -> None:
        """One pass of the garbage collector over the JobSets' dependents, then over the JobSets."""
        live = {obj["metadata"]["uid"]: obj for obj in self.jobsets.values()}
        waiting = {uid for uid, obj in live.items() if FOREGROUND_FINALIZER in (obj["metadata"].get("finalizers") or [])}

        def collected(owner: str | None) -> bool:
            return owner is not None and owner not in self._orphaned and (owner not in live or owner in waiting)

        for pod in list(self.pods.values()):
            if collected((pod["metadata"].get("labels") or {}).get(JOBSET_UID_LABEL)):
                self._stop_pod(pod)
        for key, workload in list(self.workloads.items()):
            if collected(workload["metadata"]["ownerReferences"][0]["uid"]):
                for request in self.requests_of(key):  # owned by the Workload
                    del self.provreqs[request["metadata"]["name"]]
                del self.workloads[key]
                self._assigned.pop(key, None)
        for name, obj in list(self.jobsets.items()):
            meta = obj["metadata"]
            finalizers = meta.get("finalizers") or []
            if ORPHAN_FINALIZER in finalizers:  # its dependents are left as they are
                self._orphaned.add(meta["uid"])
                finalizers.remove(ORPHAN_FINALIZER)
            if FOREGROUND_FINALIZER in finalizers and not self._dependents(meta["uid"]):
                finalizers.remove(FOREGROUND_FINALIZER)
            if meta.get("deletionTimestamp") and not finalizers:
                del self.jobsets[name]

    def _dependents(self, uid: str) -> list[dict]:
        pods = [p for p in self.pods.values() if (p["metadata"].get("labels") or {}).get(JOBSET_UID_LABEL) == uid]
        return pods + [w for w in self.workloads.values() if w["metadata"]["ownerReferences"][0]["uid"] == uid]

    def _stop_pod(self, pod: dict) -> None:
        """The collector deleted the pod: it terminates for `pod_stop_passes` passes, then is gone."""
        meta, name = pod["metadata"], pod["metadata"]["name"]
        if name not in self._stopping:
            meta.setdefault("deletionTimestamp", kueue.now())
            meta["deletionGracePeriodSeconds"] = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            self._stopping[name] = self.pod_stop_passes
        elif self._stopping[name] <= 0:
            del self.pods[name], self._stopping[name]
        else:
            self._stopping[name] -= 1
