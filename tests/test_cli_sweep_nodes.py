"""A sweep starts every run's driver at once: the system-pool nodes the autoscaler adds for the drivers
that do not fit are read from the cluster and priced before any run starts, and held to --max-cost with
the rest (scripts/pipeline/gke/system_room.py)."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from cli_helpers import error_line
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.prices import usd
from tpu_rl.recipes.costs.run import pipeline_run_estimate
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
GRID = ["--grid", "learning_rate=1e-6,2e-6,3e-6,4e-6", "--grid", "rl.grpo_beta=0.04,0.06,0.08"]  # 12 runs
NODE_USD_PER_HOUR = 0.1340  # recipes/costs/prices.toml [machine.e2-standard-4]
runner = CliRunner()


def _system_node(kube) -> None:
    """One system-pool node with the controllers on it. A driver pod requests 300m and 1088Mi (250m and
    1Gi, its FUSE sidecar's 50m and 64Mi: jobs/driver_runtime.py). The controllers request their charts'
    defaults (Kueue v0.17.1 500m and 512Mi, JobSet v0.12.0 500m and 128Mi), a DaemonSet's pod 100m and
    100Mi: 9 more drivers fit by cpu ((3920 - 1100) // 300), 12 on a new node ((3920 - 100) // 300)."""
    node = kube.put_node("system-np", 0, allocatable={"cpu": "3920m", "memory": "13621Mi", "pods": "110"})
    name = node["metadata"]["name"]
    for pod, owner, cpu, memory in (("kueue-controller-manager-7d9f", "ReplicaSet", "500m", "512Mi"),
                                    ("jobset-controller-manager-5c4b", "ReplicaSet", "500m", "128Mi"),
                                    ("fluentbit-gke-x2k4p", "DaemonSet", "100m", "100Mi")):
        kube.pods[pod] = {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": pod, "namespace": "kube-system", "labels": {},
                                       "ownerReferences": [{"kind": owner, "name": pod.rsplit("-", 1)[0]}]},
                          "spec": {"nodeName": name, "containers": [
                              {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
                          "status": {"phase": "Running"}}


def _plan_usd_and_added_node_hours() -> tuple[float, float]:
    """The sweep's own price, and the hours one added node is up: 12, 11 then 10 drivers are left while the
    first three runs train (the shared convert before the first), more than the 9 that fit."""
    specs = [RunSpec.requested(get_recipe(RECIPE), (f"learning_rate={lr}", f"rl.grpo_beta={beta}"))
             for lr in ("1e-6", "2e-6", "3e-6", "4e-6") for beta in ("0.04", "0.06", "0.08")]
    estimates = [pipeline_run_estimate(spec) for spec in specs]
    own = [sum(e.step(step).minutes for step in ("train", "export")) for e in estimates]
    total = estimates[0].step("convert").usd + sum(e.step("train").usd + e.step("export").usd for e in estimates)
    return total, (estimates[0].step("convert").minutes + sum(own[:3])) / 60


def test_a_sweep_past_the_system_nodes_room_prices_the_added_node_and_holds_it_to_max_cost(cloud, monkeypatch):
    kube = cloud["kube"]
    _system_node(kube)
    total, hours = _plan_usd_and_added_node_hours()
    extra = hours * NODE_USD_PER_HOUR
    cap = (total + total + extra) / 2  # above the runs' own price, below it with the added node
    result = runner.invoke(app, ["sweep", RECIPE, *GRID, "--max-cost", f"{cap:.2f}"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (f"system nodes: the sweep's 12 drivers add up to 1 system-np node (9 more fit on system-np's 1 "
            f"node now, 12 on each new one): {usd(extra)} more, {hours:.1f} node-hours as the runs end") in said
    assert re.fullmatch(rf"error: sweep \S+ is estimated at {re.escape(usd(total + extra))} for 12 runs with the "
                        rf"system nodes its drivers add, over --max-cost {re.escape(usd(cap))}: drop values from "
                        r"the grid or raise --max-cost; nothing was started", error_line(result))
    assert kube.jobs == {} and kube.job_calls == []


def test_the_dry_run_says_the_system_nodes_are_priced_when_the_sweep_starts(settings_env):
    result = runner.invoke(app, ["sweep", RECIPE, *GRID, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert ("system nodes: the room for the sweep's drivers is read from the cluster when it starts, and the "
            "nodes they add priced then (a dry run reads no cluster)") in " ".join(result.output.split())


def test_drivers_beyond_the_pools_maximum_wait_and_the_rest_add_nodes_up_to_it():
    from tpu_rl.scripts.pipeline.gke.system_room import SystemRoom

    room = SystemRoom(free=9, per_new_node=12, nodes=1, max_nodes=3)
    assert [room.added_nodes(n) for n in (9, 10, 21, 22, 40)] == [0, 1, 1, 2, 2]
    assert [room.waiting(n) for n in (33, 34, 40)] == [0, 1, 7]
