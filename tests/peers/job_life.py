"""batch/v1 Jobs in the fake Kubernetes API (the run's driver, jobs/driver.py): create, get, list and
delete them, the Job controller's part (one pod at a time, podFailurePolicy, backoffLimit, conditions)
and the kubelet's (a pod's container runs as the test's `kubelet` says: peers/kubelet.py). Mixed into
peers.kube_api.KubeApi, whose stores and lock it works on.

Shapes follow the batch/v1 API reference (kubernetes.io/docs/reference/kubernetes-api/workload-resources/
job-v1): JobStatus active/succeeded/failed, startTime, completionTime and conditions; a pod's Job labels
batch.kubernetes.io/job-name, job-name and controller-uid; since 1.31 the controller adds the interim
condition SuccessCriteriaMet before Complete and FailureTarget before Failed, with reason
BackoffLimitExceeded or PodFailurePolicy (kubernetes.io/docs/concepts/workloads/controllers/job,
"Termination of Job pods"). The conditions' messages here are ours, not the controller's words: what
reads them (scripts/pipeline/gke/driver.py) uses the types, reasons and the pod's exit code only.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import datetime, timezone

from peers import kueue
from peers.deletion import delete_options, mark_deleting, precondition_failed, propagation, refused
from peers.kube_status import success
from peers.pod_start import never_starts
from peers.settings import SETTINGS

JOBS = re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs(?:/(?P<name>[^/]+))?$")


def _now() -> str:
    return kueue.now()


class JobLife:
    """Needs KubeApi's jobs, pods, pod_logs, kubelet and _lock."""

    def _jobs(self, method: str, name: str | None, body: bytes, query: dict, reply, status, selected):
        if method == "GET" and name is None:
            return reply(200, {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {},
                               "items": [job for job in self.jobs.values()
                                         if selected(job["metadata"].get("labels") or {}, query)]})
        if method == "POST":
            job = json.loads(body)
            name = job["metadata"]["name"]
            if name in self.jobs:
                return status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion="1",
                                   namespace="default", generation=1)
            job["status"] = {"startTime": _now(), "active": 0, "ready": 0, "terminating": 0,
                             "uncountedTerminatedPods": {}}
            self.jobs[name] = job
            self.job_calls.append(("create", name))
            self._start_pod(name)
            return reply(201, job)
        if name not in self.jobs:
            return status(404, "NotFound", f'jobs.batch "{name}" not found')
        if method == "GET":
            return reply(200, self.jobs[name])
        if method == "DELETE":  # as peers/deletion.py reads the API server; batch/v1 orphans by default
            job = self.jobs[name]
            meta, options = job["metadata"], delete_options(body, query)
            if (answer := refused(options)) is not None:
                return answer
            wanted = (options.get("preconditions") or {}).get("uid")
            if wanted and wanted != meta["uid"]:
                return precondition_failed("Job", "batch", name, wanted, meta["uid"])
            self.job_calls.append(("delete", name))
            policy = propagation(options, meta.get("finalizers") or [], "Orphan")
            if meta.get("deletionTimestamp"):  # already being deleted: its pods are on their way
                return reply(200, job)
            pods = self.pods_of_job(name)
            if policy == "Orphan":  # the collector takes the Job out of its pod's owners; the pod runs on
                for pod in pods:
                    pod["metadata"]["ownerReferences"] = [ref for ref in pod["metadata"].get("ownerReferences") or []
                                                          if ref["uid"] != meta["uid"]]
            else:
                for pod in pods:
                    pod["metadata"]["deletionTimestamp"] = _now()
                threading.Thread(target=self._terminate_job, args=(name, meta["uid"], [
                    pod["metadata"]["name"] for pod in pods]), daemon=True).start()
            if policy == "Foreground" and mark_deleting(meta, policy):
                return reply(200, job)
            del self.jobs[name]
            return success(name, "batch", "jobs", meta["uid"])
        return status(405, "MethodNotAllowed", method)

    def _terminate_job(self, name: str, uid: str, pods: list[str]) -> None:
        """The kubelet stops each pod's container within the pod's grace period (SIGTERM, then SIGKILL);
        the pods, then the Job of that UID if it waits for them (foreground), leave the store."""
        for pod_name in pods:
            pod = self.pods.get(pod_name) or {}
            # the API's default (PodSpec terminationGracePeriodSeconds: 30)
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            if self.kubelet is not None:
                self.kubelet.stop(pod_name, grace)
            with self._lock:
                self.pods.pop(pod_name, None)
                self.pod_logs.pop(pod_name, None)  # a deleted pod's log is gone with it
                self.pod_log_stamps.pop(pod_name, None)
        with self._lock:
            if (self.jobs.get(name) or {}).get("metadata", {}).get("uid") == uid:
                del self.jobs[name]

    def pods_of_job(self, name: str) -> list[dict]:
        return [pod for pod in self.pods.values()
                if (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name]

    def _start_pod(self, name: str) -> None:
        """The controller's new pod for the Job, and the kubelet's start of its container."""
        job = self.jobs[name]
        template = job["spec"]["template"]
        pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
        uid = job["metadata"]["uid"]
        labels = {**(template["metadata"].get("labels") or {}), "batch.kubernetes.io/job-name": name,
                  "job-name": name, "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
        self.pods[pod_name] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": "default", "uid": str(uuid.uuid4()),
                         "creationTimestamp": _now(), "labels": labels,
                         "annotations": dict(template["metadata"].get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": json.loads(json.dumps(template["spec"])),
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }
        self.pod_logs[pod_name] = ""
        job["status"]["active"] = 1
        if self.driver_stuck:
            self.events += never_starts(self.pods[pod_name], self.driver_stuck, SETTINGS["GCS_BUCKET"],
                                        f"{SETTINGS['CLUSTER_NAME']}-gke-wl-sa@{SETTINGS['PROJECT']}.iam."
                                        "gserviceaccount.com")  # stacks/gke.py's workload account
        elif self.kubelet is not None:
            self.kubelet.start(self, job, self.pods[pod_name])

    # -- what the kubelet calls (not under the lock) ----------------------------------------------------
    def pod_running(self, pod_name: str) -> None:
        with self._lock:
            pod = self.pods.get(pod_name)
            if pod is not None:
                container = pod["spec"]["containers"][0]
                pod["status"] = {"phase": "Running", "startTime": _now(),
                                 "conditions": [{"type": "PodScheduled", "status": "True"},
                                                {"type": "Ready", "status": "True"}],
                                 "containerStatuses": [{"name": container["name"], "image": container["image"],
                                                        "ready": True, "restartCount": 0, "started": True,
                                                        "state": {"running": {"startedAt": _now()}}}]}

    def pod_log(self, pod_name: str, text: str) -> None:
        with self._lock:
            if pod_name in self.pod_logs:
                self.pod_logs[pod_name] += text
                stamp = datetime.now(timezone.utc)  # the node's real time, as the kubelet's log
                self.pod_log_stamps.setdefault(pod_name, []).extend([stamp] * text.count("\n"))

    def rotate_log(self, pod_name: str) -> None:
        """The kubelet rotated the container's log (containerLogMaxSize): a read returns only what was
        written after it, as `kubectl logs` reads the current file only."""
        with self._lock:
            text = self.pod_logs[pod_name]
            kept = len(text) - len(text.rsplit("\n", 1)[-1]) if "\n" in text else 0
            self.pod_logs[pod_name] = text[kept:]
            self.pod_log_stamps[pod_name] = []

    def pod_ended(self, pod_name: str, exit_code: int, disrupted: bool = False) -> None:
        """The container exited (or, `disrupted`, the pod was evicted); the Job controller's answer."""
        with self._lock:
            pod = self.pods.get(pod_name)
            if pod is None:  # deleted meanwhile
                return
            name = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
            container = pod["spec"]["containers"][0]["name"]
            terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                          "finishedAt": _now()}
            pod["status"] = {"phase": "Succeeded" if exit_code == 0 else "Failed",
                             "conditions": ([{"type": "DisruptionTarget", "status": "True",
                                              "reason": "EvictionByEvictionAPI",
                                              "message": "Eviction API: evicting"}] if disrupted else []),
                             "containerStatuses": [{"name": container, "ready": False, "restartCount": 0,
                                                    "state": {"terminated": terminated}}]}
            job = self.jobs.get(name)
            ours = job is not None and job["metadata"]["uid"] == pod["metadata"]["labels"].get("controller-uid")
            if ours and not job["metadata"].get("deletionTimestamp"):  # a deleted Job starts none
                self._after_pod(job, pod, exit_code, disrupted)

    def _after_pod(self, job: dict, pod: dict, exit_code: int, disrupted: bool) -> None:
        status, spec = job["status"], job["spec"]
        status["active"] = 0
        if exit_code == 0:
            status["succeeded"] = 1
            status["completionTime"] = _now()
            status["conditions"] = [_condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number "
                                                                                           "of succeeded pods"),
                                    _condition("Complete", "CompletionsReached", "Reached expected number of "
                                                                                 "succeeded pods")]
            return
        rule = _matching_rule(spec.get("podFailurePolicy"), pod, exit_code, disrupted)
        if rule == "Ignore":
            self._start_pod(job["metadata"]["name"])
            return
        status["failed"] = status.get("failed", 0) + 1
        if rule == "FailJob":
            reason, message = "PodFailurePolicy", (f"Container {pod['spec']['containers'][0]['name']} for pod "
                                                   f"default/{pod['metadata']['name']} failed with exit code "
                                                   f"{exit_code} matching FailJob rule at index 1")
        elif status["failed"] > spec.get("backoffLimit", 6):
            reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        else:
            self._start_pod(job["metadata"]["name"])
            return
        status["conditions"] = [_condition("FailureTarget", reason, message), _condition("Failed", reason, message)]


def _condition(kind: str, reason: str, message: str) -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastProbeTime": _now(),
            "lastTransitionTime": _now()}


def _matching_rule(policy: dict | None, pod: dict, exit_code: int, disrupted: bool) -> str | None:
    """The action of the first podFailurePolicy rule that matches the failed pod (onPodConditions or
    onExitCodes with operator In/NotIn), None when none does (the failure counts)."""
    for rule in (policy or {}).get("rules") or []:
        for condition in rule.get("onPodConditions") or []:
            if condition["type"] == "DisruptionTarget" and disrupted:
                return rule["action"]
        codes = rule.get("onExitCodes")
        if codes and not disrupted:
            inside = exit_code in codes["values"]
            if inside == (codes["operator"] == "In"):
                return rule["action"]
    return None
