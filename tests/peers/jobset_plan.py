"""The script of a JobSet's life in the fake Kubernetes API (peers/kube_api.py): what a test says happens
to it after it is created (succeed, OOM, eviction, a spot reclaim, a stockout, flex-start provisioning)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Plan:
    """What happens to a JobSet after it is created: `ticks` GETs of running, then `outcome`.

    outcome: succeed | oom | evicted | preempted | fail | hang. `on_success` runs when it succeeds (the
    test writes the step's output to the GCS emulator there, as the container would).

    `reclaimed_after` scripts a spot reclaim that the JobSet survives: after that many GETs of running,
    the node of one TPU worker shuts down (the pod fails with the kubelet's node-shutdown status and a
    DisruptionTarget condition); at the next GET the JobSet restarts (status.restarts += 1, the old pods
    terminating, as BlockingRecreate leaves them until they are gone); at the next, the new attempt's pods
    start, labelled with it, and the plan's `ticks` then `outcome` run again. Their log is
    `logs_after_restart`. `log_reads` makes the first attempt's log grow while it runs: each read of it
    returns the next of these texts (the last one stays), instead of `logs`; an entry may instead be a list
    of (seconds after the pod started, line): the kubelet's time of each line. `capacity` is the mode of the ResourceFlavor Kueue admitted the TPU pods to: it
    copies the flavor's nodeLabels into their nodeSelector.
    """

    outcome: str = "succeed"
    ticks: int = 2
    admitted_after: int = 0  # GETs during which Kueue has not admitted it yet (spec.suspend, no pods run)
    logs: str = ""
    on_success: Callable[[], None] | None = None
    reclaimed_after: int | None = None
    logs_after_restart: str = ""
    capacity: str | None = None
    log_reads: list = field(default_factory=list)
    # Kueue and GKE (peers/kueue.py). `provisioning`: the outcome of each ProvisioningRequest Kueue files
    # for a flex-start workload, in turn (Provisioned, Failed, CapacityRevoked, or Pending: GKE keeps it
    # queued); the last one repeats. `stockout`: modes whose zone has no stock: Kueue admits the workload,
    # but its TPU pods stay unschedulable; "cpu": the CPU pool's machine type has none, so every pod of a
    # CPU step stays unschedulable. A TPU pod template that selects a mode (tpu-rl/capacity) is
    # admitted to that mode's flavor, as Kueue's flavor assigner does; otherwise to `capacity`.
    provisioning: list = field(default_factory=list)
    stockout: tuple = ()
    # The zone Kueue admits an unpinned JobSet to: the first of ZONE, whose flavors have no zone letter in
    # their names (recipes/capacity/placement.py). With it, the TPU flavors carry the zone label GKE sets on nodes,
    # which Kueue copies into the pods' nodeSelector; a pod template that selects a zone
    # (topology.kubernetes.io/zone) is admitted to that zone's flavor. A `stockout` entry "<mode>@<zone>"
    # is a mode out of stock in one zone only; for flex-start, GKE then keeps the request queued.
    zone: str | None = None
    # GETs after admission during which every pod has its node and its containers still wait with reason
    # ContainerCreating, the kubelet's reason while it pulls the images (kubelet_pods.go).
    pulling_ticks: int = 0
    # With `reclaimed_after`: whether the nodes come back for the next attempt (a spot pool scales up
    # again; a queued-provisioning flex-start pool gets nodes only through a new request, so they do
    # not), and whether GKE marks the request CapacityRevoked, which makes Kueue deactivate the workload.
    nodes_return: bool = True
    revoked: bool = False
    resubmitted: "Plan | None" = None  # the plan of the next JobSet created under the same name
    # `finishing`: GETs after `ticks` in which the head's main container has exited 0 but its native
    # sidecars still stop, so its pod is Running and not Ready (ContainersNotReady) before the JobSet
    # completes. `container_restart_at`: the tick at which one TPU worker's container has restarted
    # (exit 137, restartCount 1) and is not ready again yet; ready at the next tick.
    finishing: int = 0
    container_restart_at: int | None = None
    # (container, reason): once every pod has its node, that container cannot start in each pod that has
    # it, for as long as the plan runs (peers/jobset_life.py start_failure): ErrImagePull (a tag that does
    # not exist), InvalidImageName, or CrashLoopBackOff.
    start_fails: tuple[str, str] | None = None
    start_fails_until: int | None = None  # the tick from which it starts after all (None: never)
    pull_error: str = "not found"  # why ErrImagePull: not found (the tag), forbidden (403), timeout
