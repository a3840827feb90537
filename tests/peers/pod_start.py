"""A Job's pod that never starts, in the fake Kubernetes API, as the real components leave it: its status
and the core/v1 Events about it (KubeApi.events, listed by field selector as the API server does).

- The kubelet's Events come from client-go's legacy recorder (tools/record/event.go makeEvent and
  recorderImpl: firstTimestamp, lastTimestamp, count 1, source {component: kubelet, host: the node},
  reportingComponent and reportingInstance the same) with its reasons (kubernetes pkg/kubelet/events/
  event.go: FailedMount, Failed). A FailedMount's message is the operation executor's simple message,
  "%v for volume %q %v" with ": <error>" (pkg/volume/util/operationexecutor/operation_executor.go
  generateVolumeMsg, errSuffix) around the CSI driver's gRPC error, worded as the GCS FUSE CSI driver's
  own troubleshooting page shows them (GoogleCloudPlatform/gcs-fuse-csi-driver v1.24.4
  docs/troubleshooting.md; pkg/csi_driver/node.go NodePublishVolume "failed to get GCS bucket %q: %v").
- The scheduler's FailedScheduling goes through the events.k8s.io recorder (client-go tools/events
  event_recorder.go makeEvent: eventTime, action, reportingController and reportingInstance; no
  first/lastTimestamp, count or source), read here as core/v1 shows it; its message is FitError's
  ("0/%v nodes are available: %v." of the sorted reasons, then the preemption message: kubernetes
  pkg/scheduler/framework/types.go), which the pod's PodScheduled condition carries too. The Event stays
  after the pod is bound (until the API server's --event-ttl, 1 h by default).
- The GCS FUSE CSI driver's webhook injects its sidecar into a pod annotated gke-gcsfuse/volumes: on nodes
  that run native sidecars (GKE 1.29 and later) as the first init container, restartPolicy Always
  (gcs-fuse-csi-driver@01870a9d pkg/webhook/injection.go injectSidecarContainer, sidecar_spec.go
  GetNativeSidecarContainerSpec, SidecarContainerName). Once the pod's volumes are mounted the kubelet
  starts it before the main containers, so it runs while the driver's own container waits on its image.
Read at the tags docs/provenance.md#a-driver-pod-that-does-not-start names.
"""

from __future__ import annotations

import uuid

from peers import kueue
from peers.jobset_life import pull_error, sidecars_running, waiting_state

FUSE_SIDECAR = {"name": "gke-gcsfuse-sidecar", "restartPolicy": "Always",  # the webhook's, as above
                # the driver's last published sidecar image (its test/e2e/utils LastPublishedSidecarContainerImage)
                "image": "gcr.io/gke-release/gcs-fuse-csi-driver-sidecar-mounter@sha256:"
                         "c83609ecf50d05a141167b8c6cf4dfe14ff07f01cd96a9790921db6748d40902"}
FILES_VOLUME = "driver-files"  # jobs/driver_runtime.py's FUSE volume of the bucket's driver files
NODE = "gke-rl-test-system-np-0000"
# noderesources "Insufficient cpu" on the one system node, NodeAffinity's reason on the three others,
# and DefaultPreemption's words for each (framework/preemption/preemption.go).
NO_ROOM = ("0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector. "
           "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption "
           "is not helpful for scheduling.")


def mount_error(kind: str, bucket: str, account: str) -> str:
    why = {
        "forbidden": f'code = PermissionDenied desc = failed to get GCS bucket "{bucket}": googleapi: Error 403: '
                     f"{account} does not have storage.objects.list access to the Google Cloud Storage bucket. "
                     "Permission 'storage.objects.list' denied on resource (or it may not exist)., forbidden",
        "no bucket": f'code = NotFound desc = failed to get GCS bucket "{bucket}": storage: bucket doesn\'t exist',
        "no identity": "code = Unauthenticated desc = failed to prepare storage service: storage service manager "
                       "failed to setup service: timed out waiting for the condition",
    }[kind]
    return f'MountVolume.SetUp failed for volume "{FILES_VOLUME}" : rpc error: {why}'


def _event(pod: dict, reason: str, message: str, **how) -> dict:
    meta = pod["metadata"]
    return {"kind": "Event", "apiVersion": "v1",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": "default",
                         "uid": str(uuid.uuid4()), "resourceVersion": "1", "creationTimestamp": kueue.now()},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": meta["name"], "uid": meta["uid"],
                               "apiVersion": "v1", "resourceVersion": "1"},
            "reason": reason, "message": message, "type": "Warning", **how}


def kubelet_event(pod: dict, reason: str, message: str) -> dict:
    now = kueue.now()
    return _event(pod, reason, message, source={"component": "kubelet", "host": NODE}, firstTimestamp=now,
                  lastTimestamp=now, count=1, eventTime=None, reportingComponent="kubelet", reportingInstance=NODE)


def scheduler_event(pod: dict, message: str) -> dict:
    at = kueue.moment().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return _event(pod, "FailedScheduling", message, source={}, firstTimestamp=None, lastTimestamp=None,
                  eventTime=at, action="Scheduling", reportingComponent="default-scheduler",
                  reportingInstance="default-scheduler-gke-rl-test-control-plane")


def never_starts(pod: dict, how: str, bucket: str, account: str) -> list[dict]:
    """Leave `pod` as `how` says it is stuck (a mount kind of mount_error, "unschedulable", "image" for one
    the registry does not have, "unreachable image" for a registry the node cannot reach, or "pulling" on a
    node the autoscaler added after the scheduler found none); the Events about it. A container the kubelet
    has not created waits with its default reason, PodInitializing in a pod with init containers
    (kubernetes pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses, defaultWaitingState)."""
    container = pod["spec"]["containers"][0]
    pod["spec"]["initContainers"] = [dict(FUSE_SIDECAR), *(pod["spec"].get("initContainers") or [])]  # at admission
    if how == "unschedulable":
        pod["status"] = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_ROOM,
             "lastProbeTime": None, "lastTransitionTime": kueue.now()}]}
        return [scheduler_event(pod, NO_ROOM)]
    pod["spec"]["nodeName"] = NODE
    scheduled = [{"type": "PodScheduled", "status": "True"},
                 {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                  "message": f"containers with unready status: [{container['name']}]"}]
    created = {"waiting": {"reason": "PodInitializing"}}
    sidecars = sidecars_running(pod)  # past the mount the kubelet starts the sidecar first
    if how in ("image", "unreachable image"):
        reason, pull = ("ErrImagePull", "not found") if how == "image" else ("ImagePullBackOff", "timeout")
        state = waiting_state(reason, container["image"], container["name"], pod["metadata"]["name"], pull)
        said = f'Failed to pull image "{container["image"]}": {pull_error(container["image"], pull)}'
        events = [kubelet_event(pod, "Failed", said)]  # image_manager.go, events.FailedToPullImage
    elif how == "pulling":  # its FailedScheduling from before the new node; Scheduled and Pulling are Normal
        state, events = created, [scheduler_event(pod, NO_ROOM)]
    else:  # the mount failed: the kubelet starts no container
        state, events = created, [kubelet_event(pod, "FailedMount", mount_error(how, bucket, account))]
        sidecars = {"initContainerStatuses": [{"name": c["name"], "image": c["image"], "ready": False,
                                               "restartCount": 0, "started": False, "state": created}
                                              for c in pod["spec"]["initContainers"]]}
    pod["status"] = {"phase": "Pending", "conditions": scheduled, **sidecars, "containerStatuses": [
        {"name": container["name"], "image": container["image"], "ready": False, "restartCount": 0,
         "started": False, "state": state}]}
    return events
