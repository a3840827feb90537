"""Kueue's and GKE's part in the fake Kubernetes API: the flavor, mode and zone a JobSet's TPU pods are
admitted to, flex-start ProvisioningRequests and their outcomes, stockouts and revoked capacity, on the
Workloads of peers/kueue.py. Mixed into peers.kube_api.KubeApi."""

from __future__ import annotations

from peers import kueue
from peers.jobset_plan import Plan


class Admission:
    """One step of Kueue (and GKE's provisioning) per GET of a JobSet."""

    def _selected(self, name: str, label: str, default: str | None) -> str | None:
        """What the TPU pod template selects for `label` (a pinned submission), else Kueue's choice."""
        for rj in self.jobsets[name]["spec"]["replicatedJobs"]:
            selector = rj["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
            if label in selector:
                return selector[label]
        return default

    def capacity_of(self, name: str) -> str | None:
        """The mode Kueue admits the TPU pods to: the one their template selects, else the plan's."""
        return self._selected(name, "tpu-rl/capacity", self._assigned.get(name) or self.plans.get(name, Plan()).capacity)

    def _pinned(self, name: str) -> bool:
        return self._selected(name, "tpu-rl/capacity", None) is not None

    def _assign_flavor(self, name: str) -> None:
        """With flavor_order, an unpinned TPU workload without quota gets the first flavor where it fits."""
        if not self.flavor_order or self._pinned(name) or not kueue.tpu_chips(self.workloads[name]):
            return
        for mode in self.flavor_order:
            self._assigned[name] = mode
            if self._quota_free(name):
                return
        self._assigned[name] = self.flavor_order[0]

    def zone_of(self, name: str) -> str | None:
        """The zone Kueue admits the TPU pods to: the one their template selects, else the plan's."""
        return self._selected(name, "topology.kubernetes.io/zone", self.plans.get(name, Plan()).zone)

    def flavor_of(self, name: str) -> str:
        """The admitted ResourceFlavor's name (tpu_rl.recipes.conventions.tpu_flavor_name)."""
        capacity, zone = self.capacity_of(name), self.zone_of(name)
        if capacity in (None, "reservation"):
            return "tpu"
        first = self.plans.get(name, Plan()).zone
        return f"tpu-{capacity}" if zone in (None, first) else f"tpu-{capacity}-{zone.rsplit('-', 1)[1]}"

    def out_of_stock(self, name: str, plan: Plan) -> bool:
        capacity = self.capacity_of(name)
        return capacity in plan.stockout or f"{capacity}@{self.zone_of(name)}" in plan.stockout

    def requests_of(self, name: str) -> list[dict]:
        uid = self.workloads[name]["metadata"]["uid"]
        return [r for r in self.provreqs.values() if r["metadata"]["ownerReferences"][0]["uid"] == uid]

    def _admitted(self, name: str, plan: Plan) -> bool:
        """One step of Kueue for the JobSet's Workload; whether it is admitted (the JobSet may run)."""
        wl = self.workloads[name]
        if wl["spec"]["active"] is False:
            return False
        if any(c["state"] == "Rejected" for c in wl["status"].get("admissionChecks") or []):
            kueue.deactivate(wl, kueue.CHECK)  # a Rejected check deactivates even an admitted workload
            return False
        if any(c["type"] == "Admitted" and c["status"] == "True" for c in wl["status"]["conditions"]):
            return True
        if kueue.backing_off(wl):
            return False  # evicted after a failed request, out of the queue until status.requeueState.requeueAt
        self._assign_flavor(name)
        capacity = self.capacity_of(name)
        flavor = self.flavor_of(name)
        if not self._quota_free(name):
            kueue.pending(wl, flavor, kueue.tpu_chips(wl))
            return False
        if plan.admitted_after > 0:
            plan.admitted_after -= 1
            kueue.pending(wl, flavor, 32)
            return False
        if capacity != "flex-start":
            kueue.reserve(wl, flavor, checked=False)
            kueue.admit(wl)
            return True
        kueue.reserve(wl, flavor, checked=True)
        requests = sorted(self.requests_of(name), key=lambda r: int(r["metadata"]["name"].rsplit("-", 1)[1]))
        failed = bool(requests) and any(c["type"] == "Failed" and c["status"] == "True"
                                        for c in requests[-1]["status"]["conditions"])
        if not requests or failed:  # requeued after its backoff: the next attempt (controller.go 263-268)
            for superseded in requests:  # Kueue deletes all but the newest (provisioning/controller.go 208-228)
                del self.provreqs[superseded["metadata"]["name"]]
            request = kueue.request_for(wl, self._filed.get(name, 0) + 1)
            self._filed[name] = self._filed.get(name, 0) + 1
            self.provreqs[request["metadata"]["name"]] = request
            kueue.set_check(wl, "Pending", "the test's waiting message")
            if kueue.evicted(wl):  # SetQuotaReservation resets only a True Evicted (kueue v0.17.1
                # pkg/workload/workload.go 864, resetActiveCondition 879-890): never evicted, none is written
                kueue.set_condition(wl, kueue.condition("Evicted", False, "QuotaReserved", "Previously: evicted"))
            return False
        outcomes = plan.provisioning or ["Provisioned"]
        outcome = outcomes[min(self._filed[name], len(outcomes)) - 1]
        if self.out_of_stock(name, plan):
            outcome = "Pending"  # GKE keeps the request queued while the zone has no flex-start stock
        if outcome == "Pending":
            return False
        message = f"the test's {outcome} message"
        kueue.conclude_request(requests[-1], outcome, message)
        if outcome == "Provisioned":
            kueue.set_check(wl, "Ready", message)
            kueue.admit(wl)
            return True
        if outcome == "Failed" and self._filed[name] <= kueue.BACKOFF_LIMIT_COUNT:
            kueue.retry(wl, message)
            return False
        kueue.set_check(wl, "Rejected", message)
        return False

    def _quota_free(self, name: str) -> bool:
        """With `slice_quota`, whether Kueue gives this TPU workload its flavor's quota now: fewer than
        slice_quota TPU workloads hold that flavor's, and none waits for it before this one in Kueue's order
        (kueue.queue_order)."""
        if self.slice_quota is None or not kueue.tpu_chips(self.workloads[name]):
            return True
        flavor = self.flavor_of(name)
        tpu = {other: wl for other, wl in self.workloads.items()
               if kueue.tpu_chips(wl) and other in self.jobsets and self.flavor_of(other) == flavor}
        held = [other for other, wl in tpu.items() if other != name and kueue.holds_quota(wl)]
        waiting = kueue.queue_order([wl for wl in tpu.values() if not kueue.holds_quota(wl)
                                     and not kueue.finished(wl) and wl["spec"]["active"]])
        return len(held) < self.slice_quota and (not waiting or waiting[0] is self.workloads[name])

    def _revoke(self, name: str) -> None:
        """GKE marks the slice's request CapacityRevoked: Kueue rejects the check (deactivating next)."""
        wl = self.workloads[name]
        request = sorted(self.requests_of(name), key=lambda r: r["metadata"]["name"])[-1]
        kueue.conclude_request(request, "CapacityRevoked", "the test's CapacityRevoked message")
        kueue.set_check(wl, "Rejected", "the test's CapacityRevoked message")  # deactivated at the next step

    def _unschedulable(self, name: str, plan: Plan) -> bool:
        """The TPU pods find no node: the mode is out of stock, or the slice is gone for good."""
        lost = plan.reclaimed_after is not None and not plan.nodes_return and self.jobsets[name]["status"]["restarts"]
        return self.out_of_stock(name, plan) or bool(lost) or "cpu" in plan.stockout
