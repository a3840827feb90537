"""A sweep's drivers on the system pool: how many fit, read from the cluster, and what the nodes its
autoscaler adds for the others cost while they run (docs/experiments.md#a-sweeps-drivers).

A sweep starts every run's driver at once, each requesting the driver's and its GCS FUSE sidecar's
requests (jobs/driver_runtime.py). What fits is read, not assumed: each system-pool node's allocatable
less the requests of the pods on it; a node the autoscaler adds has its allocatable less its DaemonSets'
pods, which every node runs. The drivers that do not fit make the autoscaler add nodes, up to the pool's
maximum; any beyond wait Pending and start as earlier runs end. A driver ends with its run, and Kueue
trains the runs one after another, so while run j of n trains, n - j drivers are left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from tpu_rl.jobs.driver_runtime import DRIVER_RESOURCES, GCSFUSE_ANNOTATIONS
from tpu_rl.recipes import conventions
from tpu_rl.recipes.costs.prices import load_prices, usd
from tpu_rl.scripts.cloud.cluster import raw_json
from tpu_rl.scripts.cloud.retry import call, failed
from tpu_rl.scripts.pipeline.session import Session
from tpu_rl.scripts.words import counted

POOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE labels each node with its pool
RESOURCES = ("cpu", "memory")


def driver_requests() -> dict[str, float]:
    """One driver pod's requests: its container's and the FUSE sidecar's the webhook injects."""
    return {name: float(parse_quantity(DRIVER_RESOURCES["requests"][name])
                        + parse_quantity(GCSFUSE_ANNOTATIONS[f"gke-gcsfuse/{name}-request"])) for name in RESOURCES}


def _requests(pod: dict) -> dict[str, float]:
    """The scheduler's view of a pod's requests: its containers' summed, and no less than any init
    container's (native sidecars counted as containers)."""
    spec = pod.get("spec") or {}

    def of(container: dict, name: str) -> float:
        return float(parse_quantity(((container.get("resources") or {}).get("requests") or {}).get(name, "0")))

    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    return {name: max(sum(of(c, name) for c in (spec.get("containers") or []) + sidecars),
                      max((of(c, name) for c in inits), default=0.0)) for name in RESOURCES}


def _fits(room: dict[str, float], each: dict[str, float]) -> int:
    return max(0, min(math.floor(room[name] / each[name]) for name in RESOURCES))


@dataclass(frozen=True)
class SystemRoom:
    """The drivers the system pool's nodes hold now, a new node's, its nodes and their maximum."""

    free: int
    per_new_node: int
    nodes: int
    max_nodes: int = conventions.SYSTEM_POOL_MAX_NODES

    def added_nodes(self, drivers: int) -> int:
        """The nodes the autoscaler adds for `drivers` drivers at once (at most up to the pool's maximum)."""
        beyond = drivers - self.free
        if beyond <= 0 or self.per_new_node <= 0:
            return 0
        return min(math.ceil(beyond / self.per_new_node), self.max_nodes - self.nodes)

    def waiting(self, drivers: int) -> int:
        """Drivers that find no room even at the pool's maximum: they wait Pending for an earlier run's end."""
        return max(0, drivers - self.free - self.added_nodes(drivers) * self.per_new_node)


def read_room(session: Session) -> SystemRoom:
    """The system pool's room for drivers, from its nodes and the pods on them."""
    cluster, each = session.cluster, driver_requests()
    nodes = [n for n in cluster.list_nodes() if (n["metadata"].get("labels") or {}).get(POOL_LABEL)
             == conventions.SYSTEM_POOL_NAME]
    free, new_node = 0, 0
    for node in nodes:
        allocatable = {name: float(parse_quantity(node["status"]["allocatable"][name])) for name in RESOURCES}
        pods = _pods_on(session, node["metadata"]["name"])
        used = [_requests(pod) for pod in pods]
        free += _fits({name: allocatable[name] - sum(u[name] for u in used) for name in RESOURCES}, each)
        daemons = [_requests(pod) for pod in pods if any(ref.get("kind") == "DaemonSet" for ref in
                                                         pod["metadata"].get("ownerReferences") or [])]
        new_node = max(new_node, _fits({name: allocatable[name] - sum(d[name] for d in daemons)
                                        for name in RESOURCES}, each))
    return SystemRoom(free, new_node, len(nodes))


def _pods_on(session: Session, node: str) -> list[dict]:
    """The pods that hold requests on a node: every namespace's, not yet finished (the scheduler's count)."""
    cluster = session.cluster
    selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
    try:
        response = call(cluster.policy, f"listing the pods on node {node}", lambda: cluster.core.list_pod_for_all_namespaces(
            field_selector=selector, _request_timeout=cluster._timeout, _preload_content=False))
    except ApiException as error:
        raise failed(f"listing the pods on node {node}", error, ": your account needs to list pods in every "
                     "namespace (roles/container.viewer)") from None
    return raw_json(response).get("items", [])


def sweep_nodes(room: SystemRoom, minutes: list[int]) -> tuple[float, str]:
    """What the added system nodes cost over a sweep whose runs last `minutes` each, one after another, and
    the line that says it."""
    drivers, pool = len(minutes), conventions.SYSTEM_POOL_NAME
    if not room.nodes:
        return 0.0, f"system nodes: no node of {pool} found, so the nodes the sweep's drivers add are not priced"
    hourly = load_prices().machine(conventions.SYSTEM_POOL_MACHINE_TYPE).usd_per_hour
    node_hours = sum(room.added_nodes(drivers - j) * run / 60 for j, run in enumerate(minutes))
    cost = node_hours * hourly
    fit = f"{room.free} more fit on {pool}'s {counted(room.nodes, 'node')} now"
    if not room.added_nodes(drivers):
        return 0.0, f"system nodes: the sweep's {drivers} drivers add none ({fit})"
    added = counted(room.added_nodes(drivers), f"{pool} node")
    line = (f"system nodes: the sweep's {drivers} drivers add up to {added} "
            f"({fit}, {room.per_new_node} on each new one): {usd(cost)} more, {node_hours:.1f} node-hours as "
            "the runs end")
    waiting = room.waiting(drivers)
    if waiting:
        line += (f"; {waiting} wait Pending at the pool's {room.max_nodes} nodes and start as earlier runs end "
                 "(`tpu-rl status` shows them waiting)")
    return cost, line
