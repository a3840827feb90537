"""The cluster's API as `tpu-rl` calls it: keep the token Secret and the ConfigMaps, submit, list and delete
JobSets, list what Kueue, the autoscaler and the nodes say, read pods and their logs. Objects are plain dicts
in the API's own JSON shape; what they say is read in jobsets.py and kueue.py, and the driver's Job is
driver_job.py's."""

from __future__ import annotations

import base64
import copy
import itertools
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeGuard, cast

import urllib3

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from tpu_rl.recipes import Settings, UserError
from tpu_rl.recipes.conventions import DRIVER_KSA, JOBSET_VERSION, NAMESPACE
from tpu_rl.recipes.outcome import ApiError, ClusterCredentialsRefused, RetryPolicy
from tpu_rl.scripts.cloud import deletion
from tpu_rl.scripts.cloud.foreign import describe
from tpu_rl.scripts.cloud.kubeconfig import get_credentials_command
from tpu_rl.scripts.cloud.reach import Unreachable, reaching
from tpu_rl.scripts.cloud.retry import RetriesExhausted, call, failed, is_transient, rejected_for_good

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
# Kueue v0.17.1 stores v1beta2 (config/components/crd/bases/kueue.x-k8s.io_workloads.yaml: storage: true);
# the ProvisioningRequest API it files requests with is autoscaling.x-k8s.io/v1 (its go.mod's autoscaler apis).
KUEUE_GROUP, KUEUE_API_VERSION = "kueue.x-k8s.io", "v1beta2"
PROVREQ_GROUP, PROVREQ_VERSION = "autoscaling.x-k8s.io", "v1"
SUBMISSION_ANNOTATION = "tpu-rl/submission"
FOLLOW_IDLE_SECONDS = 3600.0  # a followed log with no line for this long is reopened by the caller
# The run's driver cannot reach its own cluster's API server. Authorized networks do not restrict the cluster's
# own nodes and pods (cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks), and the pod is given
# no tuning setting, so neither is the fix: the control plane itself is away, which its Job retries.
IN_CLUSTER_UNREACHABLE = ("from the driver's pod, its control plane may be away (an upgrade or a repair); if this "
                          "repeats, check the cluster's state and operations in the Google Cloud console")
JOBSET_INSTALL = f"https://github.com/kubernetes-sigs/jobset/releases/download/{JOBSET_VERSION}/manifests.yaml"


def raw_json(response: object) -> Any:
    """The JSON of an answer asked for with _preload_content=False: the client then returns urllib3's raw
    response, whatever model its annotations name."""
    return json.loads(cast(urllib3.BaseHTTPResponse, response).data)


def custom_object(found: object) -> dict:
    """What the custom objects API answers, which its annotations call an object: the JSON object it read."""
    if not isinstance(found, dict):
        raise ApiError(f"the Kubernetes API answered {type(found).__name__} where it sends a JSON object")
    return found


class JobSetExists(ApiError):
    """A create answered 409: a JobSet of that name was created by someone else meanwhile (`existing`,
    None when it was deleted again since)."""

    def __init__(self, name: str, existing: dict | None) -> None:
        super().__init__(f"JobSet {name} already exists (created by someone else meanwhile): run `tpu-rl status` "
                         "and decide", transient=False)  # asking again meets the same JobSet
        self.existing = existing


@dataclass
class Cluster:
    api: k8s.ApiClient
    settings: Settings
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    namespace: str = NAMESPACE
    say: Callable[[str], None] | None = None  # what a long wait waits for, shown to the user
    in_cluster: bool = False  # the run's driver in its pod, as its service account: its own fixes, not a person's

    def __post_init__(self) -> None:
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)

    @property
    def _timeout(self) -> tuple[float, float]:
        return (self.policy.request_timeout, self.policy.request_timeout)

    @property
    def _follow_timeout(self) -> tuple[float, float]:  # connect, then the longest wait for a followed log's next line
        return (self.policy.request_timeout, FOLLOW_IDLE_SECONDS)

    def _read(self, what: str, fn):
        return call(self.policy, what, fn)

    # -- readiness -------------------------------------------------------------------------------
    def check_ready(self) -> None:
        """The API answers and the JobSet CRD is installed; one UserError line otherwise, and an
        Unreachable one (exit 4) when it does not answer within the policy's reach_seconds."""
        host, reach = self.api.configuration.host, self.policy.reach_seconds
        timeout = min(self.policy.request_timeout, reach)
        what = f"cluster '{self.settings.cluster_name}'"
        try:
            with reaching(what, host, reach):
                call(self.policy, "discovery of jobset.x-k8s.io", lambda: self.custom.get_api_resources(
                    GROUP, VERSION, _request_timeout=(timeout, timeout)), within=reach)
        except ApiException as error:
            if error.status == 404:
                raise UserError(
                    f"the JobSet CRD ({GROUP}/{VERSION}) is not installed in cluster '{self.settings.cluster_name}': "
                    f"deploy the recipe stack, or `kubectl apply --server-side -f {JOBSET_INSTALL}`"
                ) from None
            if error.status == 401:
                cause = f"cluster '{self.settings.cluster_name}' did not accept your credentials (HTTP 401)"
                raise ClusterCredentialsRefused(
                    f"{cause}: check that gke-gcloud-auth-plugin is installed and `gcloud auth login` is current, "
                    f"then run `{get_credentials_command(self.settings)}`", cause=cause) from None
            if error.status == 403:
                refused = f"cluster '{self.settings.cluster_name}' refused access (HTTP 403)"
                raise UserError(f"{refused} to the driver's service account {DRIVER_KSA}: the GKE stack's Role "
                                f"in namespace {self.namespace} grants what the driver calls; deploy the GKE stack"
                                if self.in_cluster else
                                f"{refused}: your account needs roles/container.developer (or RBAC to create "
                                "JobSets and Secrets in the namespace)") from None
            raise
        except k8s_config.ConfigException as error:  # e.g. the exec credential plugin is missing or fails
            raise UserError(
                f"no credentials for cluster '{self.settings.cluster_name}' ({str(error)[:160]}): install "
                f"gke-gcloud-auth-plugin and run `{get_credentials_command(self.settings)}`"
            ) from None
        except ApiError as error:
            if self.in_cluster:  # authorized networks never restrict the cluster's own nodes and pods
                raise Unreachable(what, host, reach, str(error), IN_CLUSTER_UNREACHABLE, wait_longer=False) from None
            raise Unreachable(what, host, reach, str(error), "check that AUTHORIZED_CIDR includes your address and "
                              "the cluster exists") from None

    # -- the token Secret ------------------------------------------------------------------------
    def ensure_secret(self, name: str, key: str, value: str) -> None:
        """Create or update an Opaque Secret. The value is never logged; errors are reported without it."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {"app.kubernetes.io/managed-by": "tpu-rl"}},
            "type": "Opaque",
            "data": {key: base64.b64encode(value.encode()).decode()},
        }
        self._create_or_replace("Secret", name, body, self.core.create_namespaced_secret,
                                self.core.replace_namespaced_secret)

    def ensure_configmap(self, body: dict) -> None:
        """Create or replace a ConfigMap as rendered (jobs.user_files_configmap: the run's files)."""
        self._create_or_replace("ConfigMap", body["metadata"]["name"], body, self.core.create_namespaced_config_map,
                                self.core.replace_namespaced_config_map)

    def get_configmap(self, name: str) -> dict | None:
        try:
            return raw_json(self._read(f"reading ConfigMap {name}", lambda: self.core.read_namespaced_config_map(
                name, self.namespace, _request_timeout=self._timeout, _preload_content=False)))
        except ApiException as error:
            if error.status == 404:
                return None
            raise failed(f"reading ConfigMap {name}", error) from None

    def delete_configmap(self, name: str) -> None:
        """Delete a ConfigMap; one that is already gone is fine."""
        try:
            call(self.policy, f"deleting ConfigMap {name}", lambda: self.core.delete_namespaced_config_map(
                name, self.namespace, _request_timeout=self._timeout, _preload_content=False))
        except ApiException as error:
            if error.status != 404:
                raise failed(f"deleting ConfigMap {name}", error) from None

    def _create_or_replace(self, kind: str, name: str, body: dict, create, replace) -> None:
        """Create the object, or replace it when it exists (the same content again is idempotent, so either
        call may be retried); errors name the object, never its content."""
        try:
            call(self.policy, f"creating {kind} {name}", lambda: create(
                self.namespace, body, _request_timeout=self._timeout, _preload_content=False))
        except ApiException as error:
            if error.status != 409:
                raise failed(f"creating {kind} {name}", error) from None
            call(self.policy, f"updating {kind} {name}", lambda: replace(
                name, self.namespace, body, _request_timeout=self._timeout, _preload_content=False))

    # -- JobSets ---------------------------------------------------------------------------------
    def get_jobset(self, name: str) -> dict | None:
        try:
            return self._read(f"reading JobSet {name}", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=self._timeout))
        except ApiException as error:
            if error.status == 404:
                return None
            raise failed(f"reading JobSet {name}", error) from None

    def list_jobsets(self, selector: str) -> list[dict]:
        """The JobSets whose labels match a kubectl-style selector (e.g. tpu-rl/run=<run>)."""
        try:
            found = self._read(f"listing JobSets {selector}", lambda: self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, label_selector=selector, _request_timeout=self._timeout))
        except ApiException as error:
            raise failed(f"listing JobSets {selector}", error) from None
        return found.get("items", [])

    def create_jobset(self, body: dict) -> dict:
        """Submit once. A create that timed out may still have happened: on a retry, a 409 for an
        object carrying our submission id means the first attempt worked."""
        body = copy.deepcopy(body)
        name = body["metadata"]["name"]
        submission = uuid.uuid4().hex
        body["metadata"].setdefault("annotations", {})[SUBMISSION_ANNOTATION] = submission

        def ours(existing: dict | None) -> TypeGuard[dict]:
            annotations = (existing or {}).get("metadata", {}).get("annotations", {})
            return annotations.get(SUBMISSION_ANNOTATION) == submission

        tries = itertools.count()

        def submit() -> dict:
            retrying = next(tries) > 0
            try:
                return custom_object(self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, body, _request_timeout=self._timeout))
            except ApiException as error:
                if error.status == 409:
                    existing = self.get_jobset(name)
                    if retrying and ours(existing):
                        return existing
                    raise JobSetExists(name, existing) from None
                if not is_transient(error):
                    raise ApiError(f"creating JobSet {name} was rejected with {describe(error)}: "
                                   f"{_api_message(error)}", transient=not rejected_for_good(error)) from None
                raise

        try:
            # The submission id makes a repeated create safe: a 409 for our own object is the first success.
            return call(self.policy, f"creating JobSet {name}", submit)
        except RetriesExhausted as error:
            existing = self.get_jobset(name)  # it may exist after all; say so rather than guess
            if ours(existing):
                return existing
            raise ApiError(f"{error}; nothing was submitted", transient=error.transient) from None

    def delete_jobset(self, name: str, uid: str | None = None) -> bool:
        """Delete in the foreground and wait until it and its pods are gone, so a new one of the name starts
        on a free slice. With `uid` only that JobSet: the API server answers 409 Conflict for another of the
        name (one a concurrent `run --replace` submitted), which is left alone; then False is returned."""
        try:
            deleting = custom_object(call(self.policy, f"deleting JobSet {name}", lambda: (
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=self._timeout,
                    body=deletion.foreground(uid)))))  # type: ignore[arg-type]  # a dict body is sent as it is
        except ApiException as error:
            if error.status == 409 and uid:
                return False  # another JobSet of the name now: not ours to delete
            if error.status != 404:
                raise failed(f"deleting JobSet {name}", error) from None
            deleting = {}
        gone = deletion.Gone(f"JobSet {name}", deletion.pod_grace_seconds(deletion.jobset_pod_specs(deleting)),
                             self.say)
        gone.wait(lambda: self.get_jobset(name) is None, lambda attempt: self.policy.sleep(self.policy.delay(
            min(attempt, 3))))
        return True

    # -- what Kueue and the cluster autoscaler say about a JobSet ----------------------------------
    def _list_custom(self, group: str, version: str, plural: str, selector: str | None = None) -> list[dict]:
        """Objects of a CRD in the namespace; none when the CRD is not installed (a cluster without Kueue,
        or without the ProvisioningRequest API: GKE serves it only where queued provisioning is used) or
        RBAC does not let the user read it (the JobSet and pods still say what happens)."""
        what = f"listing {plural}" + (f" {selector}" if selector else "")
        try:
            found = self._read(what, lambda: self.custom.list_namespaced_custom_object(
                group, version, self.namespace, plural, label_selector=selector or "",
                _request_timeout=self._timeout))
        except ApiException as error:
            if error.status in (403, 404):  # not installed, or not readable: the wait goes on without it
                return []
            raise failed(f"{what}", error) from None
        return found.get("items", [])

    def list_workloads(self, selector: str | None = None) -> list[dict]:
        """Kueue's Workloads (kueue.x-k8s.io/v1beta2, the version Kueue v0.17.1 stores)."""
        return self._list_custom(KUEUE_GROUP, KUEUE_API_VERSION, "workloads", selector)

    def list_provisioning_requests(self) -> list[dict]:
        """The ProvisioningRequests (autoscaling.x-k8s.io/v1) Kueue files for flex-start slices."""
        return self._list_custom(PROVREQ_GROUP, PROVREQ_VERSION, "provisioningrequests")

    # -- what bills: the nodes of each pool, and the drivers' Jobs --------------------------------
    def list_nodes(self) -> list[dict]:
        """The cluster's nodes (cluster-scoped), each labelled with its pool by GKE."""
        return self._list("the cluster's nodes", "nodes", lambda: self.core.list_node(
            _request_timeout=self._timeout, _preload_content=False))

    def list_jobs(self, selector: str) -> list[dict]:
        """The batch/v1 Jobs in the namespace whose labels match a selector (a run's driver is one)."""
        batch = k8s.BatchV1Api(self.api)
        return self._list(f"Jobs {selector}", "jobs", lambda: batch.list_namespaced_job(
            self.namespace, label_selector=selector, _request_timeout=self._timeout, _preload_content=False))

    def _list(self, what: str, resource: str, fn) -> list[dict]:
        """The items of a list call; an error, a refusal by RBAC included, as one ApiError line."""
        try:
            return raw_json(self._read(f"listing {what}", fn)).get("items", [])
        except ApiException as error:
            needed = f": your account needs to list {resource} (roles/container.viewer)" if error.status == 403 else ""
            raise failed(f"listing {what}", error, needed) from None

    # -- pods and logs ---------------------------------------------------------------------------
    def list_pods(self, selector: str) -> list[dict]:
        response = self._read(f"listing pods {selector}", lambda: self.core.list_namespaced_pod(
            self.namespace, label_selector=selector, _request_timeout=self._timeout, _preload_content=False))
        return raw_json(response).get("items", [])

    def read_log(self, pod: str, container: str, tail_lines: int | None = None, timestamps: bool = False,
                 since_time: str | None = None) -> str:
        """A container's log (its last `tail_lines`); `timestamps`: each line starts with the kubelet's RFC
        3339 time of it and a space, as in stream_log. `since_time` (RFC 3339): the lines the kubelet stamped
        at or after it, by the log's own clock (PodLogOptions.sinceTime)."""
        try:
            response = self._read(f"reading logs of {pod}", lambda: self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, tail_lines=tail_lines, timestamps=timestamps or None,
                _request_timeout=self._timeout, _preload_content=False)
                if since_time is None else self._log_since(pod, container, since_time, timestamps=timestamps))
        except ApiException as error:
            if error.status in (400, 404):  # container not started yet, or pod gone
                return ""
            raise
        return response.data.decode(errors="replace")

    def _log_since(self, pod: str, container: str, since_time: str, *, timestamps: bool,
                   follow: bool = False) -> urllib3.BaseHTTPResponse:
        """The log read, or `follow`ed, with sinceTime, a query parameter of the API (kubectl logs --since-time)
        that the generated client's read_namespaced_pod_log does not take: the same request, built by its
        ApiClient."""
        api = self.core.api_client
        flags = [(name, True) for name, wanted in (("follow", follow), ("timestamps", timestamps)) if wanted]
        request = api.param_serialize("GET", "/api/v1/namespaces/{namespace}/pods/{name}/log",
                                      path_params={"namespace": self.namespace, "name": pod},
                                      query_params=[("container", container), ("sinceTime", since_time), *flags],
                                      header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"])
        response = api.call_api(*request, _request_timeout=self._follow_timeout if follow else self._timeout)
        if not 200 <= response.status <= 299:  # as the generated client raises (ApiClient._call_with_legacy_options)
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def stream_log(self, pod: str, container: str, since_time: str | None = None,
                   timestamps: bool = False, tail_lines: int | None = None) -> Iterator[str]:
        """Follow a container's log; ends when the container ends or the connection drops. With
        `timestamps` each line starts with its RFC 3339 time and a space (for resuming without repeats);
        `tail_lines` starts from that many last lines (the API's tailLines applies with follow too), or
        `since_time` (RFC 3339) from the lines the kubelet stamped at or after it, as read_log: the kubelet
        applies it to a followed log as to a read (kubernetes/kubernetes 159d4b83 staging/src/k8s.io/cri-client/
        pkg/logs/logs.go NewLogOptions, ReadLogs through logWriter.write)."""
        response = self._read(f"following logs of {pod}", lambda: self.core.read_namespaced_pod_log(
            pod, self.namespace, container=container, follow=True, timestamps=timestamps or None,
            tail_lines=tail_lines, _request_timeout=self._follow_timeout, _preload_content=False)
            if since_time is None else self._log_since(pod, container, since_time, timestamps=timestamps, follow=True))
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
        finally:
            response.release_conn()
        if pending:
            yield pending.decode(errors="replace")


def _api_message(error: ApiException) -> str:
    if error.body is None:
        return ""
    try:
        return json.loads(error.body).get("message", "")[:300]
    except (TypeError, ValueError, AttributeError):  # not JSON, not an object, a message that is no text
        return ""
