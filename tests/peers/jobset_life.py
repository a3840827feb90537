"""The life of a JobSet in the fake Kubernetes API: its pods, their conditions and container states, and
the JobSet's status, one step per GET, as the test's Plan (peers/jobset_plan.py) scripts it. Mixed into
peers.kube_api.KubeApi, whose stores it works on."""

from __future__ import annotations

import uuid

from peers import kueue
from peers.jobset_plan import Plan

# kube-scheduler's NodeAffinity filter reason (kubernetes pkg/scheduler/framework/plugins/nodeaffinity
# ErrReasonPod), as a pod's Unschedulable condition sums it up.
UNSCHEDULABLE = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def _now() -> str:
    """The time of the drill: the clock the fake Kueue and `run` share (kueue.use_clock), so the ages of
    JobSets, pods and conditions agree with `run`'s virtual time."""
    return kueue.now()


def sidecars_running(pod: dict) -> dict:
    """The initContainerStatuses of a pod's native sidecars (the Pathways head's proxy and resource
    manager) once they run: started and, without a readiness probe, ready (core/v1 ContainerStatus)."""
    sidecars = (pod["spec"].get("initContainers") or [])
    return {"initContainerStatuses": [{"name": c["name"], "image": c["image"], "ready": True, "restartCount": 0,
                                       "started": True, "state": {"running": {"startedAt": _now()}}}
                                      for c in sidecars]} if sidecars else {}


# The kubelet's words for a container that cannot start (kubernetes/kubernetes pkg/kubelet/images/types.go
# @64c0164c, the reasons; image_manager.go @cfce511e, the messages: "Back-off pulling image %q", and for
# InvalidImageName "Failed to apply default image tag %q: %v" with pkg/util/parsers' "couldn't parse image
# name %q: %v"). An ErrImagePull's message is the runtime's error as gRPC renders it: containerd's CRI
# PullImage wraps the resolver's not-found error (internal/cri/server/images/image_pull.go "failed to pull
# and unpack image %q: %w"; core/remotes/docker/resolver.go "failed to resolve reference %q: %w", "%s: %w"
# with errdefs.ErrNotFound, which errgrpc maps to code NotFound). CrashLoopBackOff's message is
# kuberuntime_manager.go's "back-off %s restarting failed container=%s pod=%s". Other pull errors carry
# containerd's code Unknown: a registry's 403 (core/remotes/docker/authorizer.go "failed to authorize: %w",
# auth/fetch.go "failed to fetch oauth token: %w", "unexpected status from %s request to %s: %s") and a
# connection that times out (resolver.go "failed to do request: %w" around Go's net/http error).
# RegistryUnavailable and SignatureValidationFailed are the reasons evalCRIPullErr (image_manager.go
# @cfce511e) gives a runtime error that starts with k8s.io/cri-api's ErrRegistryUnavailable or
# ErrSignatureValidationFailed (staging/src/k8s.io/cri-api/pkg/errors/errors.go), as CRI-O returns them
# (server/image_pull.go, PullImage: "%w: %w" for a refused connection; storage.WrapSignatureCRIErrorIfNeeded),
# with the message "image pull failed for %s because the registry is unavailable%s" (or "...the signature
# validation failed%s"), the rest of the runtime's error after the reason's name; containers/image's words
# for the cause (docker/docker_client.go "pinging container registry %s: %w"; copy "Source image rejected: %w"
# around signature/policy_eval_signedby.go's "A signature was required, but no signature exists").
CRI_PULL_FAILURES = {
    "RegistryUnavailable": ("the registry is unavailable",
                            'pinging container registry {host}: Get "https://{host}/v2/": dial tcp 142.250.1.82:443: '
                            "connect: connection refused"),
    "SignatureValidationFailed": ("the signature validation failed",
                                  "Source image rejected: A signature was required, but no signature exists"),
}
PULL_FAILURES = ("ErrImagePull", *CRI_PULL_FAILURES)  # each alternates with ImagePullBackOff as the kubelet retries


def pull_error(image: str, kind: str) -> str:
    host, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    code, why = {
        "not found": ("NotFound", f"{image}: not found"),
        "forbidden": ("Unknown", "failed to authorize: failed to fetch oauth token: unexpected status from GET "
                                 f"request to https://{host}/v2/token?scope=repository%3A{repository}%3Apull&"
                                 f"service={host}: 403 Forbidden"),
        "timeout": ("Unknown", f'failed to do request: Head "https://{host}/v2/{repository}/manifests/{tag}": '
                               "dial tcp 142.250.1.82:443: i/o timeout"),
    }[kind]
    said = f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {why}'
    # The kubelet's CRI client drops gRPC's "rpc error: code = Unknown desc = " and keeps any other code
    # (kubernetes/kubernetes@d223343c staging/src/k8s.io/cri-client/pkg/remote_image.go, pullImageV1).
    return said if code == "Unknown" else f"rpc error: code = {code} desc = {said}"


def waiting_state(reason: str, image: str, container: str, pod: str, pull: str = "not found") -> dict:
    message = {
        "ErrImagePull": pull_error(image, pull),
        "ImagePullBackOff": f'Back-off pulling image "{image}"',
        "InvalidImageName": f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": '
                            "invalid reference format",
        **{reason: f"image pull failed for {image} because {what}: {cause.format(host=image.partition('/')[0])}"
           for reason, (what, cause) in CRI_PULL_FAILURES.items()},
        "CrashLoopBackOff": f"back-off 5m0s restarting failed container={container} pod={pod}_default",
        "PodInitializing": "",
    }[reason]
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def start_failure(pods: list[dict], failure: tuple[str, str], tick: int, pull: str = "not found") -> None:
    """Every pod is on its node; container `failure[0]` cannot start in each pod that has it (the others
    run and are Ready): ErrImagePull and ImagePullBackOff in turn as the kubelet retries the pull,
    InvalidImageName for ever, or CrashLoopBackOff (exit 1, restartCount one more at each tick), running
    and Ready for a moment at every other tick as a crash-looping container is between its back-offs.
    A failing init container (a sidecar) holds back those after it and the main containers
    (PodInitializing), as the kubelet starts init containers in order."""
    name, reason = failure
    for pod in pods:
        spec = pod["spec"]
        inits, mains = spec.get("initContainers") or [], spec["containers"]
        if not any(c["name"] == name for c in inits + mains):
            pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                                {"type": "Ready", "status": "True"}],
                             "containerStatuses": [{"name": c["name"], "image": c["image"], "ready": True,
                                                    "restartCount": 0, "state": {"running": {"startedAt": _now()}}}
                                                   for c in mains], **sidecars_running(pod)}
            continue
        crash = reason == "CrashLoopBackOff"
        up = crash and tick % 2 == 0  # between two back-offs, the container runs
        shown = (reason if tick % 2 else "ImagePullBackOff") if reason in PULL_FAILURES else reason
        held, statuses = False, {}
        for c in inits + mains:
            status = {"name": c["name"], "image": c["image"], "ready": not held, "restartCount": 0,
                      "state": {"running": {"startedAt": _now()}}}
            if held:
                status["state"] = waiting_state("PodInitializing", c["image"], c["name"], pod["metadata"]["name"])
            elif c["name"] == name:
                status["restartCount"] = tick if crash else 0
                if crash:
                    status["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
                if not up:
                    status.update(ready=False, state=waiting_state(shown, c["image"], name, pod["metadata"]["name"],
                                                                   pull))
                    held = c in inits
            statuses[c["name"]] = status
        ready = all(statuses[c["name"]]["ready"] for c in inits + mains)
        pod["status"] = {
            "phase": "Running" if crash else "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"},
                           {"type": "Ready", "status": "True" if ready else "False",
                            **({} if ready else {"reason": "ContainersNotReady"})}],
            "containerStatuses": [statuses[c["name"]] for c in mains],
            **({"initContainerStatuses": [statuses[c["name"]] for c in inits]} if inits else {})}


# The kubelet's graceful node shutdown (kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go,
# nodeShutdownMessage)
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


def node_shut_down(pod: dict) -> dict:
    """The pod once its node shut down (a spot VM reclaimed): the kubelet's graceful node shutdown fails it
    with reason Terminated and its message, and adds DisruptionTarget with reason TerminationByKubelet
    (nodeshutdown_manager_linux.go nodeShutdownReason; k8s.io/api core/v1 PodReasonTerminationByKubelet)."""
    message = NODE_SHUTDOWN_MESSAGE
    # The pod ran on that node: it stays scheduled there (PodScheduled True, as the API keeps it).
    pod["status"] = {"phase": "Failed", "reason": "Terminated", "message": message, "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message},
        {"type": "Ready", "status": "False", "reason": "PodFailed"}],
        "containerStatuses": [{"name": pod["spec"]["containers"][0]["name"],
                               "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}
    return pod


class JobSetLife:
    """The state machine of KubeApi's JobSets (needs its jobsets, pods, plans, workloads and tick stores)."""

    def _store(self, obj: dict) -> dict:
        meta = obj["metadata"]
        name = meta["name"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion="1", namespace="default")
        obj["status"] = {"replicatedJobsStatus": [], "restarts": 0}
        self.jobsets[name] = obj
        self._ticks[name] = 0
        self._filed[name] = 0
        self.workloads[name] = kueue.workload_for(obj)
        self._create_pods(name)
        return obj

    def _create_pods(self, name: str) -> None:
        """The pods of the JobSet's current attempt, labelled with it as JobSet does."""
        obj = self.jobsets[name]
        capacity = self.capacity_of(name)
        for rj in obj["spec"]["replicatedJobs"]:
            spec = rj["template"]["spec"]
            pod_spec = spec["template"]["spec"]
            selector = dict(pod_spec.get("nodeSelector") or {})
            if capacity and any("google.com/tpu" in (c.get("resources") or {}).get("limits", {})
                                for c in pod_spec["containers"]):
                selector["tpu-rl/capacity"] = capacity  # Kueue: the admitted flavor's nodeLabels
                if self.zone_of(name):
                    selector["topology.kubernetes.io/zone"] = self.zone_of(name)
            for replica in range(int(rj.get("replicas", 1))):
                for index in range(int(spec.get("parallelism", 1))):
                    pod = f"{name}-{rj['name']}-{replica}-{index}-{uuid.uuid4().hex[:5]}"
                    self.pods[pod] = {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod, "namespace": "default", "creationTimestamp": _now(),
                                     "labels": {"jobset.sigs.k8s.io/jobset-name": name,
                                                "jobset.sigs.k8s.io/jobset-uid": obj["metadata"]["uid"],
                                                "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                                                "jobset.sigs.k8s.io/restart-attempt": str(obj["status"]["restarts"])}},
                        "spec": {"containers": [{"name": c["name"], "image": c.get("image", "")}
                                                for c in pod_spec["containers"]],
                                 **({"initContainers": [{"name": c["name"], "image": c.get("image", "")}
                                                        for c in pod_spec["initContainers"]]}
                                    if pod_spec.get("initContainers") else {}),
                                 **({"nodeSelector": selector} if selector else {})},
                        "status": {"phase": "Pending"},
                    }

    def _pods_of(self, name: str, rj: str | None = None, uid: bool = True) -> list[dict]:
        """The JobSet's pods (with `uid`, only those of the JobSet of the name that exists now)."""
        current = (self.jobsets.get(name) or {}).get("metadata", {}).get("uid") if uid else None
        return [pod for pod in self.pods.values()
                if pod["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == name
                and (current is None or pod["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-uid") == current)
                and (rj is None or pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == rj)]

    def _main_rj(self, name: str) -> str:
        spec = self.jobsets[name]["spec"]
        targets = (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []
        return targets[0] if targets else spec["replicatedJobs"][0]["name"]

    def _advance(self, name: str, tick_only: bool = False) -> None:
        obj = self.jobsets[name]
        if obj["status"].get("terminalState"):
            return
        plan = self.plans.get(name, Plan())
        if not self._admitted(name, plan):
            obj["spec"]["suspend"] = True
            obj["status"]["conditions"] = [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
                                            "message": "jobset is suspended", "lastTransitionTime": _now()}]
            return
        obj["spec"].pop("suspend", None)
        self._startup_conditions(name)
        if name in self._terminating:  # the earlier attempt's pods are gone: the next attempt starts
            self._terminating.discard(name)
            for pod in self._pods_of(name):
                del self.pods[pod["metadata"]["name"]]
            self._create_pods(name)
            self._ticks[name] = 0
        tick = self._ticks[name] = self._ticks[name] + 1
        if plan.reclaimed_after is not None and not obj["status"]["restarts"] and not tick_only:
            if tick == plan.reclaimed_after + 1:
                self._reclaim_node(name)
                if plan.revoked:
                    self._revoke(name)
                return
            if tick == plan.reclaimed_after + 2:
                obj["status"]["restarts"] += 1
                for pod in self._pods_of(name):
                    pod["metadata"]["deletionTimestamp"] = _now()
                self._terminating.add(name)
                return
        if self._unschedulable(name, plan):
            for pod in self._pods_of(name):
                if "cpu" in plan.stockout or \
                        pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != self._main_rj(name):
                    pod["status"] = {"phase": "Pending", "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": UNSCHEDULABLE}]}
            return
        if tick <= plan.pulling_ticks and not obj["status"]["restarts"]:
            for pod in self._pods_of(name):
                pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                                 "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0,
                                                        "state": {"waiting": {"reason": "ContainerCreating"}}}
                                                       for c in pod["spec"]["containers"]]}
            return
        if plan.start_fails and not obj["status"]["restarts"] and tick < (plan.start_fails_until or tick + 1):
            start_failure(self._pods_of(name), plan.start_fails, tick, plan.pull_error)
            return
        for pod in self._pods_of(name):
            conditions = [{"type": "PodScheduled", "status": "True"}]
            if tick >= 2:
                conditions.append({"type": "Ready", "status": "True"})
            pod["status"] = {"phase": "Running", "conditions": conditions, "containerStatuses": [
                {"name": c["name"], "image": c["image"], "ready": tick >= 2, "restartCount": 0,
                 "state": {"running": {"startedAt": _now()}}} for c in pod["spec"]["containers"]],
                **sidecars_running(pod)}
        if tick == plan.container_restart_at and not obj["status"]["restarts"]:
            worker = [p for p in self._pods_of(name) if p["metadata"]["labels"][
                "jobset.sigs.k8s.io/replicatedjob-name"] != self._main_rj(name)][0]
            worker["status"]["conditions"][-1] = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            worker["status"]["containerStatuses"][0].update(ready=False, restartCount=1, lastState={
                "terminated": {"exitCode": 137, "reason": "Error"}})
        if plan.ticks < tick <= plan.ticks + plan.finishing and not tick_only:
            for head in self._pods_of(name, self._main_rj(name)):
                head["status"]["conditions"][-1] = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                head["status"]["containerStatuses"][0].update(ready=False, state={
                    "terminated": {"exitCode": 0, "reason": "Completed"}})
        obj["status"]["replicatedJobsStatus"] = [
            {"name": rj["name"], "ready": len(self._pods_of(name, rj["name"])) if tick >= 2 else 0,
             "active": 1, "succeeded": 0, "failed": 0, "suspended": 0} for rj in obj["spec"]["replicatedJobs"]]
        awaiting_reclaim = plan.reclaimed_after is not None and not obj["status"]["restarts"]
        if not tick_only and tick > plan.ticks + plan.finishing and plan.outcome != "hang" and not awaiting_reclaim:
            self._finish(name, plan.outcome)

    def _startup_conditions(self, name: str) -> None:
        """The conditions of an admitted JobSet as JobSet v0.12.0 (f22e565a) sets them. Under startupPolicy
        InOrder the Suspended condition stays True (SuspendedJobs, "jobset is suspended") beside
        StartupPolicyInProgress until every replicated job is ready; then Suspended turns False (ResumeJobs,
        "jobset is resumed") and StartupPolicyCompleted replaces InProgress (pkg/controllers/
        jobset_controller.go resumeJobsIfNecessary 577-633, exclusiveConditions 1363; pkg/constants
        constants.go 101-106, InOrderStartupPolicy* reasons and messages; startup_policy.go)."""
        obj = self.jobsets[name]
        order = ((obj["spec"].get("startupPolicy") or {}).get("startupPolicyOrder"))
        if order != "InOrder":
            obj["status"]["conditions"] = []
            return
        statuses = {s["name"]: s for s in obj["status"].get("replicatedJobsStatus") or []}
        ready = all(int((statuses.get(rj["name"]) or {}).get("ready", 0)) >= int(rj.get("replicas", 1))
                    for rj in obj["spec"]["replicatedJobs"])
        # Only suspending sets Suspended True again: once resumed, a restart's attempt leaves it False.
        resumed = any(c["type"] == "Suspended" and c["status"] == "False" for c in obj["status"].get("conditions") or [])
        now = _now()
        suspended = ({"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed"}
                     if ready or resumed else
                     {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended"})
        startup = ({"type": "StartupPolicyCompleted", "status": "True", "reason": "InOrderStartupPolicyCompleted",
                    "message": "in order startup policy has completed"} if ready else
                   {"type": "StartupPolicyInProgress", "status": "True", "reason": "InOrderStartupPolicyInProgress",
                    "message": "in order startup policy is in progress"})
        obj["status"]["conditions"] = [{**suspended, "lastTransitionTime": now}, {**startup, "lastTransitionTime": now}]

    def _reclaim_node(self, name: str) -> None:
        """A TPU worker's node shuts down, as when Compute Engine reclaims a spot VM (node_shut_down)."""
        main = self._main_rj(name)
        node_shut_down([pod for pod in self._pods_of(name)
                        if pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != main][-1])

    def _finish(self, name: str, outcome: str) -> None:
        obj = self.jobsets[name]
        plan = self.plans.get(name, Plan())
        pods = self._pods_of(name)
        main = self._pods_of(name, self._main_rj(name))
        if outcome == "succeed":
            for pod in pods:
                pod["status"] = {"phase": "Succeeded", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                                      {"type": "Ready", "status": "False"}],
                                 "containerStatuses": [{"name": c["name"], "state": {"terminated": {
                                     "exitCode": 0, "reason": "Completed"}}} for c in pod["spec"]["containers"]]}
            obj["status"].update(terminalState="Completed", conditions=[
                {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                 "message": "jobset completed successfully", "lastTransitionTime": _now()}])
            kueue.finish(self.workloads[name], True, "jobset completed successfully")
            if plan.on_success:
                plan.on_success()
            return
        victim = main[0] if outcome == "oom" else pods[-1]
        if outcome == "oom":
            victim["status"] = {"phase": "Failed", "containerStatuses": [
                {"name": victim["spec"]["containers"][0]["name"],
                 "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
        elif outcome == "evicted":
            victim["status"] = {"phase": "Failed", "reason": "Evicted",
                                "message": "The node was low on resource: memory.",
                                "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                "reason": "TerminationByKubelet",
                                                "message": "The node was low on resource: memory."}]}
        elif outcome == "preempted":
            victim["status"] = {"phase": "Failed", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "default-scheduler: preempting to accommodate a higher priority pod"}],
                "containerStatuses": [{"name": victim["spec"]["containers"][0]["name"],
                                       "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}
        else:
            victim["status"] = {"phase": "Failed", "containerStatuses": [
                {"name": victim["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
        obj["status"].update(terminalState="Failed", conditions=[
            {"type": "Failed", "status": "True", "reason": "FailedJobs",
             "message": "jobset failed due to one or more job failures", "lastTransitionTime": _now()}])
        kueue.finish(self.workloads[name], False, "jobset failed due to one or more job failures")
