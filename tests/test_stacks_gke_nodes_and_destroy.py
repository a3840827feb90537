"""Where the GKE stacks' pods may run and how the stacks come down (issue 25, section 4), read from the
synthesized Terraform JSON and the manifests jobs/ renders.

- The CPU pool is tainted, and exactly the pods placed on it tolerate the taint: a kube-system replica
  without a PodDisruptionBudget on a scaled-up cpu-np node keeps the autoscaler from removing it
  (kubernetes/autoscaler cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from removing a
  node?"). The controllers and the webhook probe are pinned to the system pool.
- `cdktf destroy` does not wait on Kueue's finalizers (infra/cluster_addons.py, docs/stacks.md).
"""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import resources

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.jobs.evaluate import eval_jobset
from tpu_rl.recipes import all_recipes, example_settings

GKE = ["qwen3-v6e32", "gemma4-v6e64"]
SETTINGS = example_settings()
NODE_POOL = "cloud.google.com/gke-nodepool"
# The node pool effects of the GKE API as Kubernetes writes them on the node (hashicorp/google 6.50.0
# node_config taint.effect; https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
KUBERNETES_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def pools(stack) -> dict[str, dict]:
    return {pool["name"]: pool for pool in resources(stack, "google_container_node_pool").values()}


def node_taints(pool: dict) -> list[dict]:
    """The taints a node of this pool carries, as the scheduler sees them."""
    return [{**taint, "effect": KUBERNETES_EFFECT[taint["effect"]]} for taint in pool["node_config"].get("taint", [])]


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule (k8s.io/api core/v1 toleration.go, ToleratesTaint): same key (or none with
    Exists), same effect (or none), and Exists or the same value."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def schedulable(pod: dict, pool: dict) -> bool:
    """The pod tolerates every NoSchedule/NoExecute taint of the pool's nodes."""
    return all(any(tolerates(t, taint) for t in pod.get("tolerations", []))
               for taint in node_taints(pool) if taint["effect"] in ("NoSchedule", "NoExecute"))


def pod_specs(name: str) -> dict[str, dict]:
    """Every pod template the pipeline submits for a recipe: its three steps and an eval, by step/job."""
    recipe = all_recipes()[name]
    sets = {**jobs.render_manifests(spec_of(recipe), SETTINGS), "eval": eval_jobset(spec_of(recipe), SETTINGS, 10)}
    return {f"{step}/{rjob['name']}": rjob["template"]["spec"]["template"]["spec"]
            for step, jobset in sets.items() for rjob in jobset["spec"]["replicatedJobs"]}


def releases(stack) -> dict[str, dict]:
    return {release["name"]: release for release in resources(stack, "helm_release").values()}


def release_ids(stack) -> dict[str, str]:
    return {release["name"]: f"helm_release.{key}" for key, release in resources(stack, "helm_release").items()}


@pytest.mark.parametrize("stack", GKE)
def test_the_cpu_pool_carries_a_no_schedule_taint_of_ours(stacks_json, stack):
    cpu = pools(stacks_json[stack])["cpu-np"]
    assert cpu["node_config"]["taint"] == [{"key": "tpu-rl/dedicated", "value": "cpu-np", "effect": "NO_SCHEDULE"}]
    assert pools(stacks_json[stack])["system-np"]["node_config"].get("taint") is None  # the controllers' pool


@pytest.mark.parametrize("stack", GKE)
def test_every_pod_placed_on_the_cpu_pool_tolerates_it_and_the_tpu_workers_do_not(stacks_json, stack):
    cpu = pools(stacks_json[stack])["cpu-np"]
    specs = pod_specs(stack)
    on_cpu = sorted(key for key, spec in specs.items() if spec.get("nodeSelector", {}).get(NODE_POOL) == "cpu-np")
    assert on_cpu == ["convert/main", "eval/pathways-head", "export/main", "train/pathways-head"]
    assert [key for key in on_cpu if not schedulable(specs[key], cpu)] == []
    # Tolerated exactly: no pod tolerates every taint, and the TPU workers stay off the CPU pool.
    assert all(t.get("key") for spec in specs.values() for t in spec.get("tolerations", []))
    workers = [key for key in specs if key.endswith("/worker")]
    assert workers and [key for key in workers if schedulable(specs[key], cpu)] == []


@pytest.mark.parametrize("stack", GKE)
def test_kueue_gives_the_cpu_flavor_only_to_pods_that_tolerate_the_pools_taint(stacks_json, stack):
    """kueue v0.17.1 pkg/scheduler/flavorassigner/flavorassigner.go: a flavor's nodeTaints must be tolerated
    by the pod set (FindMatchingUntoleratedTaint), so a CPU pod without the toleration is refused at
    admission rather than admitted and left Pending."""
    (values,) = releases(stacks_json[stack])["tpu-rl-queues"]["values"]
    (flavor,) = [m for m in yaml.safe_load(values)["manifests"]
                 if m["kind"] == "ResourceFlavor" and m["metadata"]["name"] == "cpu"]
    assert flavor["spec"]["nodeTaints"] == node_taints(pools(stacks_json[stack])["cpu-np"])


@pytest.mark.parametrize("stack", GKE)
def test_the_controllers_and_the_webhook_probe_run_on_the_system_pool(stacks_json, stack):
    by_name = releases(stacks_json[stack])
    values = {name: yaml.safe_load(release["values"][0]) for name, release in by_name.items()}
    # The charts' own keys: controller.nodeSelector (kubernetes-sigs/jobset v0.12.0 charts/jobset/values.yaml)
    # and controllerManager.nodeSelector (kubernetes-sigs/kueue v0.17.1 charts/kueue/values.yaml).
    assert values["jobset"] == {"controller": {"nodeSelector": {NODE_POOL: "system-np"}}}
    assert values["kueue"] == {"controllerManager": {"nodeSelector": {NODE_POOL: "system-np"}}}
    (probe,) = [m for m in values["tpu-rl-queues"]["manifests"] if m["kind"] == "Pod"]
    assert probe["spec"]["nodeSelector"] == {NODE_POOL: "system-np"}


@pytest.mark.parametrize("stack", GKE)
def test_destroy_does_not_wait_on_kueues_finalizers_and_removes_queues_then_kueue_then_jobset(stacks_json, stack):
    """hashicorp/terraform-provider-helm v3.1.1 helm/resource_helm_release.go, Delete: the uninstall waits
    when the release's `wait` is true (its default), until every object is gone or `timeout` (300 s) runs
    out; Kueue's finalizers keep its queue objects and Workloads (and so its CRDs) while a run is admitted."""
    by_name, ids = releases(stacks_json[stack]), release_ids(stacks_json[stack])
    assert {name: release["wait"] for name, release in by_name.items()} == {
        "jobset": True, "kueue": False, "tpu-rl-queues": False}
    # Terraform destroys a resource before what it depends on: the queues first, JobSet last.
    assert by_name["tpu-rl-queues"]["depends_on"] == [ids["kueue"]]
    assert ids["jobset"] in by_name["kueue"]["depends_on"]
    # ...and every release before the cluster's system pool, where the controllers run.
    system_pool = next(f"google_container_node_pool.{key}" for key, pool in
                       resources(stacks_json[stack], "google_container_node_pool").items() if pool["name"] == "system-np")
    assert system_pool in by_name["jobset"]["depends_on"] and system_pool in by_name["kueue"]["depends_on"]


@pytest.mark.parametrize("stack", GKE)
def test_the_queue_release_waits_for_its_hook_longer_than_the_probe_can_take(stacks_json, stack):
    """Helm waits for a hook up to the release's timeout; the probe, which now also covers Kueue's start,
    must give up with its own message before that."""
    queues = releases(stacks_json[stack])["tpu-rl-queues"]
    (probe,) = [m for m in yaml.safe_load(queues["values"][0])["manifests"] if m["kind"] == "Pod"]
    script = probe["spec"]["containers"][0]["command"][2]
    tries = int(re.search(r'-lt (\d+) \]', script).group(1))
    connect = int(re.search(r"nc -z -w (\d+) ", script).group(1))
    pause = int(re.search(r"sleep (\d+)", script).group(1))
    assert tries * (connect + pause) < queues["timeout"]
    assert tries * pause >= 4 * 60  # at least four minutes for Kueue to pull, start and serve


@pytest.mark.parametrize("stack", GKE)
def test_the_webhook_probe_image_is_pinned_by_digest(stacks_json, stack):
    (values,) = releases(stacks_json[stack])["tpu-rl-queues"]["values"]
    (probe,) = [m for m in yaml.safe_load(values)["manifests"] if m["kind"] == "Pod"]
    # docker-library/repo-info@01a7054230d50b3dccaf8d579f161c522be8c9f0 repos/busybox/remote/1.37.0.md
    assert probe["spec"]["containers"][0]["image"] == (
        "docker.io/library/busybox:1.37.0@sha256:9db7b59979c38555a39def84a31fb98b5296952f9e3afd4f6f11f05b07adfab0")


@pytest.mark.parametrize("stack", GKE)
def test_a_kueue_version_change_upgrades_the_queue_release_so_its_hook_probes_the_new_kueue(stacks_json, stack):
    """Kueue's release does not wait; before, a Kueue bump left the queue release unchanged, so Helm ran no
    pre-upgrade hook and deploy returned before the new Kueue's webhook served. The hook pod carries the Kueue
    chart version, so the queue release's values change with it and the provider upgrades the release."""
    by_name = releases(stacks_json[stack])
    (probe,) = [m for m in yaml.safe_load(by_name["tpu-rl-queues"]["values"][0])["manifests"] if m["kind"] == "Pod"]
    assert probe["metadata"]["annotations"]["tpu-rl/kueue-chart-version"] == by_name["kueue"]["version"]
    assert "pre-upgrade" in probe["metadata"]["annotations"]["helm.sh/hook"].split(",")
