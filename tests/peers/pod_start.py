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
  pkg/scheduler/framework/types.go), which the pod's PodScheduled condition carries too.
Read at the tags docs/provenance.md#a-driver-pod-that-does-not-start names.
"""

from __future__ import annotations

import uuid

from peers import kueue
from peers.jobset_life import pull_error, waiting_state

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
    """Leave `pod` as `how` says it is stuck (a mount kind of mount_error, "unschedulable" or
    "image"); the Events about it."""
    container = pod["spec"]["containers"][0]
    if how == "unschedulable":
        pod["status"] = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_ROOM,
             "lastProbeTime": None, "lastTransitionTime": kueue.now()}]}
        return [scheduler_event(pod, NO_ROOM)]
    pod["spec"]["nodeName"] = NODE
    scheduled = [{"type": "PodScheduled", "status": "True"},
                 {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                  "message": f"containers with unready status: [{container['name']}]"}]
    if how == "image":
        state = waiting_state("ErrImagePull", container["image"], container["name"], pod["metadata"]["name"])
        said = f'Failed to pull image "{container["image"]}": {pull_error(container["image"], "not found")}'
        event = kubelet_event(pod, "Failed", said)  # image_manager.go, events.FailedToPullImage
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
        event = kubelet_event(pod, "FailedMount", mount_error(how, bucket, account))
    pod["status"] = {"phase": "Pending", "conditions": scheduled, "containerStatuses": [
        {"name": container["name"], "image": container["image"], "ready": False, "restartCount": 0,
         "started": False, "state": state}]}
    return [event]
