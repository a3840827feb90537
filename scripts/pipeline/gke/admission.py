"""What a step's JobSet really waits for, read from the Workload Kueue owns for it and, on flex-start, the
ProvisioningRequest Kueue filed for its slice; and the end of that wait: a deactivated workload at once,
or the capacity mode's CAPACITY_WAIT (recipes/capacity/modes.py) without a node for all TPU workers
(or CAPACITY_WAIT's cpu without one for the Pathways head).

Kueue v0.17.1 (docs/capacity.md has the sources): a suspended JobSet is a Workload that is queued for
quota, or has quota and waits for its admission check (the ProvisioningRequest), or was evicted and is
requeued, or is inactive: deactivated after its request failed its retries or its capacity was revoked.
An inactive one is never admitted again, so the wait stops there with the check's own message."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Sequence

from tpu_rl.jobs.k8s import pin_capacity
from tpu_rl.recipes import conventions
from tpu_rl.recipes.capacity.modes import CPU, describe_waits
from tpu_rl.recipes.capacity.placement import Place, tpu_places
from tpu_rl.recipes.conventions import CAPACITY_NODE_LABEL, ZONE_NODE_LABEL
from tpu_rl.recipes.outcome import StepFailed
from tpu_rl.scripts.cloud.jobsets import JobSetState, capacity_of, has_had_node, pod_counts, tpu_pods, zone_of
from tpu_rl.scripts.cloud.kueue import (WORKLOAD_JOB_UID_LABEL, RequestState, WorkloadState, latest_request,
                                        workload_of, workload_state)
from tpu_rl.scripts.pipeline.gke.queue import QueuePlace, behind_our_own
from tpu_rl.scripts.pipeline.gke.steps import StepJob, parse_time
from tpu_rl.scripts.pipeline.session import Session, hms

if TYPE_CHECKING:
    from tpu_rl.scripts.pipeline.phases import Phases


@dataclass(frozen=True)
class Admission:
    workload: WorkloadState
    request: RequestState | None = None  # the newest ProvisioningRequest the workload owns, if any
    queue: QueuePlace | None = None  # a queued one's place behind our own workloads (queue.py), else None


def read_admission(session: Session, jobset: dict | None) -> Admission:
    """The JobSet's Workload and the newest ProvisioningRequest it owns. The request is read whether or
    not the workload still lists the flex-start check: once Kueue releases a deactivated workload's
    quota, it keeps only the checks that apply to every flavor (kubernetes-sigs/kueue v0.17.1, 6fcc132c,
    pkg/workload/workload.go AdmissionChecksForWorkload; workload_controller.go
    syncAdmissionCheckConditions), so ours, on the flex-start flavor only, is gone; the newest request
    stays, as Kueue deletes only the superseded ones (admissionchecks/provisioning/controller.go
    Reconcile -> deleteUnusedProvisioningRequests)."""
    uid = ((jobset or {}).get("metadata") or {}).get("uid")
    if not uid:
        return Admission(WorkloadState("absent"))
    cluster = session.cluster
    found = workload_of(cluster.list_workloads(f"{WORKLOAD_JOB_UID_LABEL}={uid}"), jobset)
    workload = workload_state(found)
    request = latest_request(cluster.list_provisioning_requests(), workload.uid) if workload.uid else None
    queue = behind_our_own(found, cluster.list_workloads(), session.now()) \
        if workload.phase in ("queued", "evicted") else None
    return Admission(workload, request, queue)


def places_of(session: Session) -> tuple[Place, ...]:
    """Where the step's TPU slice may come from, in fallback order: each mode of the recipe in each zone of
    ZONE (recipes/capacity/placement.py), as the stack built its pools and Kueue flavors."""
    return tpu_places(session.recipe.capacity, session.settings.zones)


def place_of_flavor(flavor: str, places: tuple[Place, ...]) -> Place | None:
    """The place of a TPU ResourceFlavor (Place.flavor), None for another flavor."""
    return next((place for place in places if place.flavor == flavor), None)


def pinned_place(manifest: dict) -> tuple[str, str | None] | None:
    """The capacity mode and zone a JobSet's TPU pods select (tpu_rl.jobs.k8s.pin_capacity), None when Kueue
    chooses."""
    for rj in manifest.get("spec", {}).get("replicatedJobs") or []:
        selector = rj["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
        if CAPACITY_NODE_LABEL in selector:
            return selector[CAPACITY_NODE_LABEL], selector.get(ZONE_NODE_LABEL)
    return None


def find_place(places: tuple[Place, ...], mode: str, zone: str | None) -> Place | None:
    """The place of a pinned mode and zone; a mode pinned without a zone is in the first zone."""
    return next((place for place in places if place.mode == mode and (zone is None or place.zone == zone)), None)


def pinned_job(job: StepJob, place: Place | tuple[str, str | None] | None) -> StepJob:
    """The step's JobSet with its TPU pods on one place (None: as rendered, Kueue picks by quota order).
    The zone is pinned only when ZONE lists several: a single-zone submission stays as it always was."""
    if place is None:
        return job
    mode, zone = (place.mode, place.zone if place.zoned else None) if isinstance(place, Place) else place
    return StepJob(job.step, job.name, pin_capacity(job.manifest, mode, zone), job.selector, job.expected_pods)


def sweep_train(session: Session, job: StepJob) -> StepJob:
    """A sweep's train pinned to the first place of CAPACITY and ZONE, so that its runs queue for that
    slice: each TPU flavor has one slice's quota and nothing preempts within our ClusterQueue, so an
    unpinned run would be admitted at once on the next, dearer, flavor while another holds the first
    (kueue v0.17.1 flavorassigner.go assignFlavors, findFlavorForPodSetResource). A later place is used
    only on failover (capacity.py), which pins the next one."""
    places = places_of(session)
    return pinned_job(job, places[0]) if session.spec.sweep and len(places) > 1 else job


def like_existing(job: StepJob, existing: dict | None) -> StepJob:
    """The step's JobSet pinned as the one on the cluster is, so that reattaching to a JobSet `run`
    pinned to a later mode or zone compares it with the same spec."""
    return pinned_job(job, pinned_place(existing or {}))


def jobset_uid(jobset: dict | None) -> str:
    """The JobSet's UID, which `run` deletes it by (capacity.py): that JobSet only."""
    return ((jobset or {}).get("metadata") or {}).get("uid", "")


def _unschedulable(pods: list[dict]) -> str:
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return condition.get("message", "")
    return ""


def slice_gone(state: JobSetState, admission: Admission) -> bool:
    """Whether no node will come for a flex-start step's unschedulable TPU pods, though this `run` never
    saw the slice (it reattached): the JobSet restarted, so an attempt had run on the slice; its Workload
    is still admitted, and its newest request is no longer provisioning. Then nothing brings a node:
    Kueue v0.17.1 (6fcc132c) files no request for a check that is Ready ("Skip syncing of the ProvReq
    for admission check which is Ready", pkg/controller/admissionchecks/provisioning/controller.go
    syncOwnedProvisionRequest; a BookingExpired one is not retried while admitted, the same function), a JobSet restart does not evict the
    Workload, and the cluster autoscaler ignores an unschedulable pod that consumes a request (the
    autoscaling.x-k8s.io/consume-provisioning-request annotation Kueue puts on the pods, controller.go
    podSetUpdates): "Unschedulable pod didn't trigger scale-up, because it's consuming
    ProvisioningRequest" (kubernetes/autoscaler cluster-autoscaler/processors/provreq/pods_filter.go)."""
    request = admission.request
    return (state.restarts > 0 and admission.workload.phase == "admitted"
            and (request is None or request.state not in ("Pending", "Accepted")))


@dataclass
class CapacityShortfall(StepFailed):
    """The step's TPU capacity did not come, or went away: `run` moves on (capacity.py) or stops."""

    mode: str
    waited: float
    why: str
    trained: bool  # the slice had been up in this attempt: it was lost, not never had
    deactivated: bool  # Kueue deactivated the workload (not merely the wait's end)
    place: Place | None = None  # the mode's zone too: where the next try starts from
    uid: str = ""  # of the JobSet that fell short, which `run` deletes (capacity.py)

    def __post_init__(self) -> None:
        StepFailed.__init__(self, f"train: {self.why}")


@dataclass
class CapacityWatch:
    """Follows one submission of a step: what it awaits, since when, and whether that is too long.

    While the JobSet is suspended (spec.suspend: Kueue has not resumed it), the clock of an attempt starts
    when its JobSet was created (so a reattaching `run` keeps counting) and again at each restart. Once it
    runs (also while an InOrder startup is in progress), only its pods that never had a node wait for
    capacity, each since its creation, a pod created anew in an attempt that had been ready too: a pod scheduled, or that has run, had its capacity,
    so a pod that is not Ready is a container restarting, its images pulling or the step finishing (the
    head's sidecars keep its pod Running but not Ready until the JobSet completes), never a shortfall,
    however old the JobSet. Any step stops on a workload someone else deactivated."""

    session: Session
    job: StepJob
    started: datetime | None = None
    trained: bool = False
    restarts: int = 0
    awaited: str = ""
    modes_tried: list[str] = field(default_factory=list)
    admission: Admission | None = None  # the last one read: whether it waits for its flex-start request
    phases: "Phases | None" = None  # scripts/pipeline/phases.py, kept across submissions of the step
    ready_attempt: int | None = None  # the attempt (JobSet restarts) that had all its pods ready
    last_place: Place | None = None  # where the workload was last seen admitted or running
    first_seen: dict[str, datetime] = field(default_factory=dict)  # pods without a creation time, by name
    head_since: datetime | None = None  # since when the head alone waits for a node (_head_waits)

    def place(self, admission: Admission | None, tpu: Sequence[dict] = ()) -> Place:
        """Where the step is: the flavor Kueue gave it, else its TPU pods' node selector, else where it was
        last seen (a deactivated workload has no flavors left), else where `run` pinned it, else the first
        place."""
        places = places_of(self.session)
        flavors = admission.workload.flavors if admission else ()
        seen = next((place for place in (place_of_flavor(flavor, places) for flavor in flavors) if place), None)
        mode = capacity_of(list(tpu))
        if seen is None and mode and "," not in mode:
            seen = find_place(places, mode, zone_of(list(tpu)))
        if seen is not None:
            self.last_place = seen
        if self.last_place is not None:
            return self.last_place
        pinned = pinned_place(self.job.manifest)
        return (find_place(places, *pinned) if pinned else None) or places[0]

    def mode(self, admission: Admission | None, tpu: Sequence[dict] = ()) -> str:
        """The place's name in messages: the mode, and its zone when ZONE lists several."""
        return self.place(admission, tpu).label

    def bound(self, mode: str) -> float:
        return dict(self.session.settings.capacity_wait).get(mode, 0.0)

    def observe(self, jobset: dict | None, state: JobSetState, pods: list[dict]) -> str | None:
        """The line to print when what is awaited changed, else None. Raises CapacityShortfall."""
        session, job = self.session, self.job
        now = session.now()
        first = self.started is None
        if first:
            self.started = parse_time(state.created or "") or now
        if state.restarts > self.restarts:  # a new attempt: its own clock, and it has not trained yet
            self.restarts, self.started, self.head_since = state.restarts, now, None  # trained stays
        counts = pod_counts(pods)
        tpu = tpu_pods(pods)
        if tpu and all(map(has_had_node, tpu)) and self.phases is not None:
            self.phases.capacity = capacity_of(tpu) or self.phases.capacity  # where the TPU hosts billed
        if state.phase == "running" and counts.ready >= job.expected_pods:
            self.trained, self.awaited, self.ready_attempt, self.started = True, "", state.restarts, now
            self.place(None, tpu)  # remembered: a later deactivation leaves no flavor to read it from
            return None
        if state.phase not in ("running", "suspended"):
            return None
        has_tpu = any(conventions.TPU_RESOURCE in str(rj) for rj in job.manifest["spec"]["replicatedJobs"])
        admission = self.admission = read_admission(session, jobset)
        self._count_from_admission(admission, now, first)
        # A CPU step (convert, export) waits for Kueue and then for a node of the CPU pool, which scales
        # from zero, bounded by CAPACITY_WAIT's `cpu` (recipes/capacity/modes.py); it has no next mode.
        place = self.place(admission, tpu) if has_tpu else None
        mode, label = (place.mode, place.label) if place else (CPU, None)
        uid = jobset_uid(jobset)
        if admission.workload.phase == "inactive":
            if not admission.workload.by_kueue:
                raise StepFailed(self.deactivated_by_someone(admission))
            # GKE revokes only a slice it had given (KEP-1136): the slice was had, though this `run`
            # (reattached) never saw it, so the step is submitted again from the first mode (capacity.py).
            revoked = admission.request is not None and admission.request.state == "CapacityRevoked"
            raise CapacityShortfall(mode, self.waited(now), self.deactivation(admission), self.trained or revoked,
                                    True, place, uid)
        # Only pods that never had a node wait for capacity; one scheduled, or that has run, had it (a
        # container restarting, images pulling, the head finishing), whatever the JobSet's age. A pod the
        # Job created anew in an attempt that had been ready (restartPolicy OnFailure, jobs/train.py: a
        # node lost) never had one, so it waits, bounded, since its creation.
        waiting = [pod for pod in pods if not has_had_node(pod)] if state.phase == "running" else []
        if state.phase == "running" and self.ready_attempt == state.restarts and not waiting:
            return None  # the attempt has its slice: a container restarting, or the step finishing
        head = [pod for pod in waiting if pod not in tpu] if has_tpu else []
        if head and not any(pod in tpu for pod in waiting):
            return self._head_waits(head, tpu, uid, now)
        self.head_since = None
        awaited = self.describe(state, admission, label, tpu if place else pods)
        waited = self.waited(now)
        if state.phase == "running":
            if not waiting:  # every pod has (had) its node: the capacity came
                return self._say(awaited, waited)
            waited = (now - min(self._since(pod, now) for pod in waiting)).total_seconds()
        if place and place.rules.queued_provisioning and state.phase == "running" and _unschedulable(tpu) and (
                self.trained or slice_gone(state, admission)):
            # The slice was had and is gone: a queued-provisioning pool gets nodes only through a new
            # request, which Kueue files only for a workload that is not admitted (see capacity.py).
            raise CapacityShortfall(mode, waited, f"{awaited}, after the {mode} slice was had", True, False, place, uid)
        if waited > self.bound(mode):
            raise CapacityShortfall(mode, waited, f"{awaited} for {hms(waited)}, longer than CAPACITY_WAIT's "
                                    f"{describe_waits({mode: self.bound(mode)}, (mode,))}", self.trained, False,
                                    place, uid)
        return self._say(awaited, waited)

    def _count_from_admission(self, admission: Admission, now: datetime, first: bool) -> None:
        """A step's capacity wait counts from when Kueue admits it, not while it waits behind another
        workload of ours for the quota (a sweep's runs on one slice, queue.py): the clock stands while it
        does. A `run` that first sees it with quota reserved and never evicted counts from that
        reservation: before it, it could only wait for quota, which only our own workloads hold."""
        if admission.queue is not None:
            self.started = now
            return
        reserved = parse_time(admission.workload.reserved_at) if admission.workload.reserved_at else None
        if first and reserved and not admission.workload.evicted_before and self.restarts == 0 and \
                self.started is not None and reserved > self.started:
            self.started = min(reserved, now)

    def _since(self, pod: dict, now: datetime) -> datetime:
        """Since when a pod that never had a node waits for one: its creation, else its first sight."""
        name = pod["metadata"]["name"]
        return parse_time(pod["metadata"].get("creationTimestamp") or "") or self.first_seen.setdefault(name, now)

    def _head_waits(self, head: list[dict], tpu: list[dict], uid: str, now: datetime) -> str | None:
        """The Pathways head waits for a node of the CPU pool while its TPU workers have theirs (AnyOrder,
        flex-start) or do not exist yet (InOrder: JobSet v0.12.0, f22e565a, resumes the workers' Job only
        once the head's is ready, pkg/controllers/jobset_controller.go resumeJobsIfNecessary, and keeps the JobSet's
        Suspended condition True meanwhile; spec.suspend is false, so the JobSet reads as running,
        jobsets.jobset_state). Bounded by CAPACITY_WAIT's `cpu`,
        counted from the head pod's creation, or from when the workers were first seen up (they bill
        meanwhile: the phase `waiting for head`, scripts/pipeline/phases.py)."""
        if self.head_since is None:
            self.head_since = now if tpu else min(self._since(pod, now) for pod in head)
        waited = (now - self.head_since).total_seconds()
        why = _unschedulable(head)
        awaited = (f"waiting for a node of the CPU pool ({self.session.recipe.cpu_machine_type}) for the Pathways "
                   f"head" + (f": {why}" if why else ""))
        if waited > self.bound(CPU):
            raise CapacityShortfall(CPU, waited, f"{awaited} for {hms(waited)}, longer than CAPACITY_WAIT's "
                                    f"{describe_waits({CPU: self.bound(CPU)}, (CPU,))}", self.trained, False,
                                    None, uid)
        return self._say(awaited, waited)

    def _say(self, awaited: str, waited: float) -> str | None:
        if awaited == self.awaited:
            return None
        self.awaited = awaited
        return f"{self.job.step}: {awaited} (waited {hms(waited)})"

    def waits_for_request(self) -> bool:
        """Whether Kueue holds the step for its flex-start ProvisioningRequest (quota reserved, check
        pending), as last read."""
        workload = self.admission.workload if self.admission else None
        return workload is not None and workload.phase == "checking"

    def deactivated_by_someone(self, admission: Admission) -> str:
        """One line for a workload deactivated by someone, not by Kueue: `run` neither deletes nor
        replaces it, since whoever stopped it may mean it."""
        workload = admission.workload
        return (f"step {self.job.step} stopped: workload {workload.name} of JobSet {self.job.name} was deactivated "
                f"by someone, not by Kueue ({workload.reason or 'spec.active false'}); set spec.active true again "
                f"to let it run, or rerun {self.session.command('run')} --replace to delete and resubmit it")

    def waited(self, now: datetime) -> float:
        return (now - self.started).total_seconds() if self.started else 0.0

    def describe(self, state: JobSetState, admission: Admission, mode: str | None, pods: list[dict]) -> str:
        """What the step really waits for, in the words of Kueue, GKE or the scheduler; `mode` None and
        all its pods for a CPU step, the place's label and its TPU pods for train."""
        workload, request, job = admission.workload, admission.request, self.job
        slice_ = f"the {self.session.recipe.shape.accelerator_type} slice"
        if state.phase == "running":
            why = _unschedulable(pods)
            if mode is None:
                pool = f"the CPU pool ({self.session.recipe.cpu_machine_type})"
                return f"waiting for a node of {pool}: {why}" if why else f"waiting for step {job.step}'s pod to start"
            return (f"waiting for nodes for {slice_} ({mode}): {why}" if why
                    else f"waiting for {slice_}'s workers to start ({mode})")
        if workload.phase == "absent":
            return f"waiting for Kueue to admit JobSet {job.name} (no Workload of it is readable yet)"
        if admission.queue is not None:
            queue = admission.queue
            return (f"queued behind our own {', '.join(queue.ahead_of) or 'workload'} (position {queue.position} of "
                    f"{queue.waiting} in Kueue's queue); its capacity wait starts when Kueue admits it")
        if workload.phase == "queued":
            return f"waiting for Kueue to admit JobSet {job.name} ({workload.message or 'no quota yet'})"
        if workload.phase == "evicted":
            when = f" at {workload.requeue_at}" if workload.requeue_at else ""  # after a retry's backoff
            return (f"Kueue evicted workload {workload.name} and requeues it{when} ({workload.reason}: "
                    f"{workload.message})")
        if request is not None:
            said = f": {request.message}" if request.message else ""
            return (f"waiting for GKE to provision {slice_} ({mode}, request {request.name} in state "
                    f"{request.state}{said})")
        if workload.phase == "checking":
            return f"waiting for GKE to provision {slice_} ({mode}, no request filed yet)"
        return f"waiting for Kueue to resume JobSet {job.name} ({workload.phase})"

    def deactivation(self, admission: Admission) -> str:
        """Why Kueue deactivated the workload: its own message, and the request's, whose message is the
        check's own (Kueue copies the request's Failed or CapacityRevoked message into the Rejected check,
        and resets the check's message on eviction, so the request keeps it)."""
        workload, request = admission.workload, admission.request
        check = workload.check(conventions.FLEX_START_ADMISSION_CHECK)
        why = f"Kueue deactivated workload {workload.name} ({workload.message or workload.reason})"
        if request is not None and request.state in ("Failed", "CapacityRevoked", "BookingExpired"):
            why += f"; admission check {check.name if check else 'of the request'}: request {request.name} " \
                   f"{request.state}: {request.message}"
        elif check is not None and check.message:
            why += f"; admission check {check.name}: {check.message}"
        return why
