"""The run's driver (jobs/driver.py), a batch/v1 Job in the recipe's namespace: created once, read, and
deleted with its pod before anything else of the run is (`cancel`). Objects are plain dicts in the API's
JSON shape, as in scripts/cloud/cluster.py, whose Cluster this works through."""

from __future__ import annotations

import time

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud import deletion
from tpu_rl.scripts.cloud.cluster import Cluster, raw_json
from tpu_rl.scripts.cloud.retry import call, failed

# The label the Job controller puts on its pods (kubernetes pkg/apis/batch/types.go JobNameLabel, 1.27+).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
GONE_POLL_SECONDS = 0.5  # how often the wait for a deleted Job's pod looks (deletion.Gone bounds it)


class JobExists(ApiError):
    """A create answered 409: a Job of that name exists (another `run` created it meanwhile)."""


class Jobs:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.batch = k8s.BatchV1Api(cluster.api)

    @property
    def _timeout(self) -> tuple[float, float]:
        return self.cluster._timeout

    def get(self, name: str) -> dict | None:
        try:
            response = call(self.cluster.policy, f"reading Job {name}", lambda: self.batch.read_namespaced_job(
                name, self.cluster.namespace, _request_timeout=self._timeout, _preload_content=False))
        except ApiException as error:
            if error.status == 404:
                return None
            raise failed(f"reading Job {name}", error) from None
        return raw_json(response)

    def create(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        try:
            response = call(self.cluster.policy, f"creating Job {name}", lambda: self.batch.create_namespaced_job(
                self.cluster.namespace, _request_timeout=self._timeout, _preload_content=False,
                body=body))  # type: ignore[arg-type]  # a dict body is sent as it is
        except ApiException as error:
            if error.status == 409:
                raise JobExists(f"Job {name} already exists") from None
            raise failed(f"creating Job {name}", error) from None
        return raw_json(response)

    def pods(self, name: str) -> list[dict]:
        """The Job's pods, oldest first: creationTimestamp has whole seconds, so a pod replaced within the
        second ties with its successor; its start (status.startTime, None before) breaks the tie."""
        pods = self.cluster.list_pods(f"{JOB_NAME_LABEL}={name}")
        return sorted(pods, key=lambda pod: (pod["metadata"].get("creationTimestamp") or "",
                                             (pod.get("status") or {}).get("startTime") or "~"))

    def events(self, pod: str) -> list[dict]:
        """The core/v1 Events about a pod (involvedObject.name is a field the API selects Events by); none
        when RBAC does not let the user list them (why a pod waits is then its status alone)."""
        try:
            response = call(self.cluster.policy, f"listing events of pod {pod}", lambda: (
                self.cluster.core.list_namespaced_event(
                    self.cluster.namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
                    _request_timeout=self._timeout, _preload_content=False)))
        except ApiException as error:
            if error.status == 403:
                return []
            raise failed(f"listing events of pod {pod}", error) from None
        return raw_json(response).get("items", [])

    def delete(self, name: str) -> bool:
        """Delete the Job in the foreground and wait until it and its pod are gone (deletion.Gone: its pod's
        grace period, then the garbage collector); False when there was none. The options go in the body:
        without them batch/v1 orphans the pod (jobStrategy.DefaultGarbageCollectionPolicy)."""
        try:
            response = call(self.cluster.policy, f"deleting Job {name}", lambda: self.batch.delete_namespaced_job(
                name, self.cluster.namespace, _request_timeout=self._timeout, _preload_content=False,
                body=deletion.foreground()))  # type: ignore[arg-type]  # a dict body is sent as it is
        except ApiException as error:
            if error.status == 404:
                return False
            raise failed(f"deleting Job {name}", error) from None
        self._wait_gone(name, raw_json(response))
        return True

    def wait_deleted(self, name: str) -> None:
        """Wait until a Job being deleted (deletionTimestamp set: its pods terminate) is gone; at once when
        there is none or it is not being deleted."""
        job = self.get(name)
        if job is not None and job["metadata"].get("deletionTimestamp"):
            self._wait_gone(name, job)

    def _wait_gone(self, name: str, job: dict) -> None:
        """Until the Job and its pods are gone, within the bound its pod's grace period gives."""
        gone = deletion.Gone(f"Job {name}", deletion.pod_grace_seconds(deletion.job_pod_specs(job)), self.cluster.say)
        gone.wait(lambda: self.get(name) is None and not self.pods(name), lambda _: time.sleep(GONE_POLL_SECONDS))
