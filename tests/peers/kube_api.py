"""A small, honest Kubernetes API server: stores JobSets, Secrets and pods, and moves JobSets through
their life one step per GET, following a per-JobSet plan that a test scripts (succeed, OOM, eviction...).

Shapes follow the real API: JobSet status from the v0.12.0 CRD (conditions, terminalState,
replicatedJobsStatus, restarts), pods with PodScheduled/Ready/DisruptionTarget conditions and container
states, Status objects for errors, APIResourceList for discovery. Every request it answers is recorded in
`calls` with who made it (`actor`, which a test sets), and request_info reads it as the API server's
authorizer does (the driver's Role is checked against them). Here: the stores and the HTTP routes;
the JobSet's life is peers/jobset_life.py, Kueue's and GKE's part peers/admission.py, and the test's
script of it peers/jobset_plan.py (Plan).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from peers import kueue
from peers.admission import Admission
from peers.deletion import JOBSET_UID_LABEL, Deletion
from peers.http import PeerServer, Reply
from peers.job_life import JOBS, JobLife
from peers.jobset_life import JobSetLife
from peers.jobset_plan import Plan
from peers.kube_status import status

GROUP_PATH = "/apis/jobset.x-k8s.io/v1alpha2"
_JOBSETS = re.compile(rf"^{GROUP_PATH}/namespaces/(?P<ns>[^/]+)/jobsets(?:/(?P<name>[^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")
_WORKLOADS = re.compile(r"^/apis/kueue.x-k8s.io/v1beta2/namespaces/(?P<ns>[^/]+)/workloads$")
_REQUESTS = re.compile(r"^/apis/autoscaling.x-k8s.io/v1/namespaces/(?P<ns>[^/]+)/provisioningrequests$")
_SECRETS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets(?:/(?P<name>[^/]+))?$")
_CONFIGMAPS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?$")
_NODES = "/api/v1/nodes"
_EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
_JOBS = re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs$")

# -- what a request asks, as the API server's authorizer sees it ------------------------------------
# kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go, NewRequestInfo
# (read at db8b216c, a 1.3x commit with AuthorizeWithSelectors; the verb rules below are unchanged since
# 1.x): paths under the API prefixes /api (no group) and /apis are resource requests, the rest (and
# /apis/<group>/<version> itself, discovery) non-resource ones; the HTTP method gives the verb; a GET
# without a name is list, or watch with watch=<anything but false or 0>; a DELETE without a name is
# deletecollection; a list's fieldSelector metadata.name=<name> names the object.
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
_PATH_VERBS = ("proxy", "watch")  # the deprecated verb-in-path form, /api/v1/watch/...
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class RequestInfo:
    verb: str
    api_group: str = ""
    resource: str = ""  # empty: a non-resource request, of `path`
    subresource: str = ""
    namespace: str = ""  # empty: cluster-scoped
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    def __str__(self) -> str:
        if not self.is_resource:
            return f"{self.verb} {self.path} (non-resource)"
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-scoped"
        return f"{self.verb} {resource} of group '{self.api_group}' {where}"


def request_info(method: str, path: str, query: dict) -> RequestInfo:
    """What a request asks, as the API server's RequestInfo (see above) has it."""
    parts = [part for part in path.strip("/").split("/") if part] if path.strip("/") else []
    plain = RequestInfo(method.lower(), path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    group = ""
    if parts[0] == "apis":
        if len(parts) < 4:  # /apis/<group>/<version>: discovery
            return plain
        group, parts = parts[1], parts[3:]
    else:
        parts = parts[2:]
    if parts and parts[0] in _PATH_VERBS and len(parts) > 1:
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if parts and parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource, name, subresource = (parts + ["", "", ""])[:3]
    if verb == "proxy":
        subresource = ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch", "false").lower() not in ("false", "0") else "list"
        for term in query.get("fieldSelector", "").split(","):
            key, equals, value = term.replace("==", "=").partition("=")
            if equals and key == "metadata.name":  # not !=
                name = name or value
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, group, resource, subresource, namespace, name, path)


def _selected(labels: dict, query: dict) -> bool:
    """Whether labels match the request's labelSelector (equality terms key=value, comma-separated)."""
    wanted = dict(part.split("=", 1) for part in query.get("labelSelector", "").split(",") if part)
    return all(labels.get(key) == value for key, value in wanted.items())


@dataclass
class KubeApi(Deletion, JobLife, JobSetLife, Admission, PeerServer):
    jobsets: dict = field(default_factory=dict)
    pods: dict = field(default_factory=dict)
    secrets: dict = field(default_factory=dict)
    configmaps: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    crd_installed: bool = True
    created: list = field(default_factory=list)  # names, in creation order (duplicates show up here)
    deleted: list = field(default_factory=list)
    workloads: dict = field(default_factory=dict)  # by JobSet name: the Workload Kueue made for it
    provreqs: dict = field(default_factory=dict)  # ProvisioningRequests by name
    nodes: dict = field(default_factory=dict)  # by name: v1 Node objects (put_node)
    jobs: dict = field(default_factory=dict)  # by name: batch/v1 Job objects (put_job), e.g. a run's driver
    # A JobSet of the same name but a new UID takes the place of the one a DELETE names, just before the
    # DELETE arrives (a concurrent `run --replace`), once.
    replaced_before_delete: bool = False
    # Every request answered, as (actor, method, path, query); `actor` is whoever the test says is calling.
    calls: list = field(default_factory=list)
    actor: str = "client"
    # How many TPU workloads the ClusterQueue's quota admits at once (one slice: 1); None: no quota is
    # short, each is admitted as its plan says. The others wait, in Kueue's order (Admission._quota_free).
    slice_quota: int | None = None
    # With slice_quota, each TPU flavor's quota: the ClusterQueue's modes in order. Kueue's flavor assigner
    # admits an unpinned workload to the first flavor with unused quota (flavorassigner.go
    # findFlavorForPodSetResource; nothing preempts within our ClusterQueue). None: the plan's mode.
    flavor_order: tuple[str, ...] | None = None
    jobs: dict = field(default_factory=dict)  # batch/v1 Jobs by name (peers/job_life.py)
    pod_logs: dict = field(default_factory=dict)  # what the containers of Job pods wrote, by pod name
    pod_log_stamps: dict = field(default_factory=dict)  # when each of their lines was written, by pod name
    job_calls: list = field(default_factory=list)  # ("create" | "delete", Job name), in order
    kubelet: object = None  # runs a Job pod's container (peers/kubelet.py); None: its pods stay Pending
    pod_stop_passes: int = 2  # requests a pod the garbage collector deleted takes to go (peers/deletion.py)
    # A Job's pods never start, stuck as peers/pod_start.py never_starts says ("forbidden", "no bucket",
    # "no identity", "unschedulable", "image"); the Events about them in `events` (core/v1).
    driver_stuck: str | None = None
    events: list = field(default_factory=list)
    # The plan of every JobSet created from now on, from its manifest (the sandbox's, peers/sandbox.py: any
    # run a user types has a simulated outcome); None: the plans a test scripts, else Plan()'s defaults.
    unscripted: object = None

    # Bearer tokens the API server no longer accepts: one bound to a ServiceAccount or pod since deleted
    # (kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin, "Bound service account
    # tokens"), or a kubeconfig's whose login expired.
    refused_tokens: set = field(default_factory=set)
    version: str = "v1.33.5-gke.1080000"  # the control plane's gitVersion, as GKE reports it on /version

    def __post_init__(self) -> None:
        PeerServer.__init__(self)
        kueue.use_clock(None)  # each test starts on the real clock (use_clock for a drill's own)
        self._ticks: dict[str, int] = {}
        self._terminating: set[str] = set()  # JobSets whose earlier attempt's pods are still going away
        self._filed: dict[str, int] = {}  # requests Kueue filed for the JobSet's Workload, by JobSet name
        self._assigned: dict[str, str] = {}  # the mode the flavor assigner chose (flavor_order), by JobSet
        self._stopping: dict[str, int] = {}  # pods the garbage collector deleted: passes until they are gone
        self._orphaned: set[str] = set()  # UIDs of JobSets deleted with propagation Orphan

    # -- what tests use ---------------------------------------------------------------------------
    def plan(self, name: str, **kwargs) -> Plan:
        self.plans[name] = Plan(**kwargs)
        return self.plans[name]

    def put_jobset(self, manifest: dict, phase: str = "running") -> dict:
        """A JobSet left over from an earlier run, in a given phase (running, succeeded, failed)."""
        obj = self._store(json.loads(json.dumps(manifest)))
        if phase == "succeeded":
            self._finish(obj["metadata"]["name"], "succeed")
        elif phase == "failed":
            self._finish(obj["metadata"]["name"], "fail")
        else:
            self._ticks[obj["metadata"]["name"]] = 2
            self._advance(obj["metadata"]["name"], tick_only=True)
        return obj

    def put_node(self, pool: str, index: int, labels: dict | None = None, allocatable: dict | None = None) -> dict:
        """A node of a GKE node pool: GKE labels it with its pool (cloud.google.com/gke-nodepool), and the
        stack's TPU pools add their capacity mode (tpu-rl/capacity) through node_config.labels."""
        name = f"gke-rl-test-{pool}-{index:04d}"
        self.nodes[name] = {"kind": "Node", "apiVersion": "v1",
                            "metadata": {"name": name, "uid": str(uuid.uuid4()),
                                         "labels": {"cloud.google.com/gke-nodepool": pool,
                                                    "kubernetes.io/hostname": name, **(labels or {})}},
                            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                                   **({"allocatable": allocatable} if allocatable else {})}}
        return self.nodes[name]

    def put_job(self, name: str, labels: dict, finished: str | None = None) -> dict:
        """A batch/v1 Job (a run's driver): running, or `finished` "Complete" or "Failed", with the
        condition the Job controller sets then (k8s.io/api batch/v1 JobConditionType)."""
        status = {"active": 1} if finished is None else {
            "conditions": [{"type": finished, "status": "True", "reason": finished}]}
        self.jobs[name] = {"kind": "Job", "apiVersion": "batch/v1",
                           "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                                        "labels": labels},
                           "spec": {"template": {"spec": {"containers": []}}}, "status": status}
        return self.jobs[name]

    # -- HTTP -------------------------------------------------------------------------------------
    def authorized(self, headers) -> bool:
        """Like GKE: no bearer token, or one of refused_tokens, no answer (401). The scheme in any case, as the
        API server reads it (kubernetes/kubernetes 2af2c553 staging/src/k8s.io/apiserver/pkg/authentication/
        request/bearertoken/bearertoken.go): the Python client in a pod sends "bearer"."""
        scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
        return scheme.lower() == "bearer" and bool(token) and token not in self.refused_tokens

    def error_body(self, status_code: int) -> object:
        return status(status_code, {401: "Unauthorized", 409: "AlreadyExists", 429: "TooManyRequests"}.get(status_code, "InternalError"),
                      f"injected {status_code}").body

    def calls_of(self, actor: str) -> list[RequestInfo]:
        """What `actor`'s answered requests asked, in order."""
        return [request_info(method, path, query) for who, method, path, query in self.calls if who == actor]

    def route(self, method: str, path: str, query: dict, body: bytes) -> Reply:
        self.calls.append((self.actor, method, path, dict(query)))
        self._collect()
        if path in ("/version", "/version/"):  # the Python client asks for /version/
            major, minor = self.version.lstrip("v").split(".")[:2]
            return Reply(200, {"major": major, "minor": minor, "gitVersion": self.version,
                               "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-10-01T00:00:00Z",
                               "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64"})
        if path == GROUP_PATH:
            if not self.crd_installed:
                return status(404, "NotFound", "the server could not find the requested resource")
            return Reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "jobset.x-k8s.io/v1alpha2",
                               "resources": [{"name": "jobsets", "singularName": "jobset", "namespaced": True,
                                              "kind": "JobSet", "verbs": ["create", "delete", "get", "list", "watch"]}]})
        if match := _JOBSETS.match(path):
            return self._jobsets(method, match["name"], body, query)
        if match := JOBS.match(path):
            return self._jobs(method, match["name"], body, query, Reply, status, _selected)
        if _EVENTS.match(path) and method == "GET":  # by involvedObject.<field>=<value> terms
            terms = dict(term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if term)
            return Reply(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": [
                event for event in self.events if all(event["involvedObject"].get(key.split(".", 1)[1]) == value
                                                      for key, value in terms.items())]})
        if path == "/api/v1/pods" and method == "GET":  # every namespace's, by spec.nodeName and status.phase
            return Reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
                pod for pod in self.pods.values() if _fields_match(pod, query.get("fieldSelector", ""))]})
        if match := _PODS.match(path):
            return self._pods(method, match["name"], bool(match["log"]), query)
        if _WORKLOADS.match(path) and method == "GET":
            return Reply(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {},
                               "items": [wl for wl in self.workloads.values()
                                         if _selected(wl["metadata"].get("labels") or {}, query)]})
        if _REQUESTS.match(path) and method == "GET":
            return Reply(200, {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequestList",
                               "metadata": {}, "items": list(self.provreqs.values())})
        if path == _NODES and method == "GET":
            return Reply(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                               "items": [node for node in self.nodes.values()
                                         if _selected(node["metadata"]["labels"], query)]})
        if _JOBS.match(path) and method == "GET":
            return Reply(200, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {},
                               "items": [job for job in self.jobs.values()
                                         if _selected(job["metadata"].get("labels") or {}, query)]})
        if match := _SECRETS.match(path):
            return self._secrets(method, match["name"], body)
        if match := _CONFIGMAPS.match(path):
            return self._configmaps(method, match["name"], body)
        return status(404, "NotFound", f"no route {method} {path}")

    def _jobsets(self, method: str, name: str | None, body: bytes, query: dict) -> Reply:
        if not self.crd_installed:
            return status(404, "NotFound", "the server could not find the requested resource")
        if method == "GET" and name is None:  # a list, by label selector as kubectl's -l (key=value,...)
            return Reply(200, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSetList", "metadata": {},
                               "items": [obj for obj in self.jobsets.values()
                                         if _selected(obj["metadata"].get("labels") or {}, query)]})
        if method == "POST":
            obj = json.loads(body)
            name = obj["metadata"]["name"]
            if name in self.jobsets:
                return status(409, "AlreadyExists", f'jobsets.jobset.x-k8s.io "{name}" already exists')
            if name in self.deleted and self.plans.get(name) and self.plans[name].resubmitted:
                self.plans[name] = self.plans[name].resubmitted
            if self.unscripted is not None:
                self.plans[name] = self.unscripted(obj)
            self.created.append(name)
            return Reply(201, self._store(obj))
        if name not in self.jobsets:
            return status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{name}" not found')
        if method == "GET":
            if not self.jobsets[name]["metadata"].get("deletionTimestamp"):  # its controllers stop then
                self._advance(name)
            return Reply(200, self.jobsets[name])
        if method == "DELETE":
            if self.replaced_before_delete:  # another client replaced it between our GET and our DELETE
                self.replaced_before_delete = False
                new = self.jobsets[name]["metadata"]["uid"] = str(uuid.uuid4())
                for pod in self._pods_of(name, uid=False):
                    pod["metadata"]["labels"][JOBSET_UID_LABEL] = new
            return self._delete_jobset(name, body, query)
        return status(405, "MethodNotAllowed", method)

    def _pods(self, method: str, name: str | None, log: bool, query: dict) -> Reply:
        if name is None:
            items = [pod for pod in self.pods.values() if _selected(pod["metadata"]["labels"], query)]
            return Reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        pod = self.pods.get(name)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        if not log:
            return Reply(200, pod)
        if query.get("sinceSeconds") and int(query["sinceSeconds"]) < 1:  # ValidatePodLogOptions (pod/rest/log.go)
            why = f"sinceSeconds: Invalid value: {query['sinceSeconds']}: must be greater than 0"
            return status(422, "Invalid", f'PodLogOptions "{name}" is invalid: {why}')
        # A Job's pod (the driver): what its container wrote so far, each line at the real time it came (the
        # driver runs in real time, whatever clock a test gives the JobSets); a JobSet's pod: its plan's lines.
        now = datetime.now(timezone.utc) if name in self.pod_logs else kueue.moment()
        if name in self.pod_logs:
            stamps = self.pod_log_stamps.get(name, [])
            lines = [(stamps[i] if i < len(stamps) else now, line)
                     for i, line in enumerate(self.pod_logs[name].splitlines(keepends=True))]
        else:
            lines = self._jobset_pod_log(pod, query)
        # the kubelet's since (sinceSeconds before its now, or sinceTime) skips earlier lines, a follow's as a read's
        # (kubernetes 159d4b83 cri-client/pkg/logs/logs.go ReadLogs); a follow here is a read that then drops.
        cutoff = datetime.fromisoformat(query["sinceTime"]) if query.get("sinceTime") else \
            now - timedelta(seconds=int(query["sinceSeconds"])) if query.get("sinceSeconds") else None
        if cutoff is not None:
            lines = [(stamp, line) for stamp, line in lines if stamp >= cutoff]
        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]):]
        if query.get("timestamps") == "true":
            return Reply(200, "".join(f"{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}" for stamp, line in lines))
        return Reply(200, "".join(line for _, line in lines))

    def _jobset_pod_log(self, pod: dict, query: dict) -> list:
        # Every line was written when the pod started, a microsecond apart; the stream then ends, as a
        # dropped follow would. sinceSeconds, sinceTime and timestamps behave as the kubelet's.
        jobset = pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
        started = datetime.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        plan = self.plans.get(jobset, Plan())
        attempt = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt", "0")
        text = plan.logs if attempt == "0" else plan.logs_after_restart
        if attempt == "0" and plan.log_reads:
            text = plan.log_reads.pop(0) if len(plan.log_reads) > 1 else plan.log_reads[0]
        if isinstance(text, list):  # (seconds after the start, line): each line written at its own time
            lines = [(started + timedelta(seconds=at), f"{line}\n") for at, line in text]
        else:
            lines = [(started + timedelta(microseconds=i), line) for i, line in enumerate(text.splitlines(keepends=True))]
        return lines

    def _configmaps(self, method: str, name: str | None, body: bytes) -> Reply:
        return self._objects(self.configmaps, "configmaps", method, name, body)

    def _secrets(self, method: str, name: str | None, body: bytes) -> Reply:
        return self._objects(self.secrets, "secrets", method, name, body)

    @staticmethod
    def _objects(store: dict, plural: str, method: str, name: str | None, body: bytes) -> Reply:
        """Create (409 when it exists), replace, read and delete core objects kept whole (Secrets, ConfigMaps)."""
        if method == "POST":
            obj = json.loads(body)
            if obj["metadata"]["name"] in store:
                return status(409, "AlreadyExists", f'{plural} "{obj["metadata"]["name"]}" already exists')
            store[obj["metadata"]["name"]] = obj
            return Reply(201, obj)
        if method == "PUT":
            store[name] = json.loads(body)
            return Reply(200, store[name])
        if name not in store:
            return status(404, "NotFound", f'{plural} "{name}" not found')
        if method == "DELETE":
            del store[name]
            return Reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return Reply(200, store[name])


def _fields_match(pod: dict, selector: str) -> bool:
    """A pod field selector's terms, path=value or path!=value (the fields kubectl describe node uses)."""
    for term in filter(None, selector.split(",")):
        negated = "!=" in term
        path, value = term.split("!=" if negated else "=", 1)
        found: object = pod
        for part in path.split("."):
            found = (found or {}).get(part) if isinstance(found, dict) else None
        if (found == value) == negated:
            return False
    return True

