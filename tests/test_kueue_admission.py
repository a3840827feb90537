"""Every step goes through the stack's own Kueue queue and fits it: the JobSets rendered by jobs/ against
the ResourceFlavors, ClusterQueue and LocalQueue that stacks/gke.py synthesizes.

Kueue's flavor assignment, as far as these objects use it (kubernetes-sigs/kueue v0.17.1,
pkg/scheduler/flavorassigner/flavorassigner.go, flavorSelector and checkFlavorForPodSets): a pod set may
take a flavor of the ClusterQueue when the flavor's nodeLabels, read as a node's labels, satisfy the
pod's nodeSelector restricted to the label keys that the resource group's flavors use; it is admitted
when every resource it requests is covered and the flavor's nominal quota holds requests x pods (no
cohort here, so nothing to borrow). A resource with a limit and no request is requested at its limit.
Of the flavors a pod set may take, Kueue assigns the first in the ClusterQueue's list whose unused quota
holds it (site/content/en/docs/concepts/cluster_queue.md): the order of a capacity fallback list.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
import yaml
from conftest import data_only_recipes, resources

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.recipes import all_recipes, example_settings, get_recipe
from tpu_rl.recipes.catalog.entry import quantity_bytes

SETTINGS = example_settings()
GKE_RECIPES = [name for name, recipe in all_recipes().items() if recipe.platform == "gke"]
CASES = [(name, step) for name in GKE_RECIPES for step in ("convert", "train", "export")]
IDS = [f"{name}-{step}" for name, step in CASES]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queue_objects(stack: dict) -> dict[str, dict]:
    """The objects the stack's queue release applies, by kind."""
    release = next(r for r in resources(stack, "helm_release").values() if r["name"] == "tpu-rl-queues")
    (values,) = release["values"]
    objects: dict[str, list[dict]] = {}
    for manifest in yaml.safe_load(values)["manifests"]:
        objects.setdefault(manifest["kind"], []).append(manifest)
    return {kind: {m["metadata"]["name"]: m for m in found} for kind, found in objects.items()}


def amount(resource: str, quantity: str) -> Fraction:
    """A Kubernetes quantity as a number: cores for cpu, bytes for memory, a count otherwise."""
    if resource == "cpu":
        return Fraction(int(quantity[:-1]), 1000) if quantity.endswith("m") else Fraction(int(quantity))
    if resource == "memory":
        return Fraction(quantity_bytes(quantity))
    return Fraction(int(quantity))


def container_requests(container: dict) -> Counter:
    resources_ = container.get("resources", {})
    wanted = {**resources_.get("limits", {}), **resources_.get("requests", {})}
    return Counter({name: amount(name, quantity) for name, quantity in wanted.items()})


def pod_requests(spec: dict) -> Counter:
    """What the pod asks of the node: its containers and native sidecars together, or a plain init
    container alone if that is larger (Kubernetes' effective requests)."""
    inits = spec.get("initContainers", [])
    running = [*spec["containers"], *(c for c in inits if c.get("restartPolicy") == "Always")]
    total: Counter = sum((container_requests(c) for c in running), Counter())
    for init in (c for c in inits if c.get("restartPolicy") != "Always"):
        for name, value in container_requests(init).items():
            total[name] = max(total[name], value)
    return total


def pod_sets(jobset: dict):
    """(name, pods, pod spec) of each replicated job: a Kueue pod set each."""
    for replicated_job in jobset["spec"]["replicatedJobs"]:
        job = replicated_job["template"]["spec"]
        yield replicated_job["name"], replicated_job["replicas"] * job["parallelism"], job["template"]["spec"]


def tolerates_flavor_taints(spec: dict, flavor: dict) -> bool:
    """A flavor's NoSchedule/NoExecute nodeTaints must each be tolerated by the pod or by the flavor's own
    tolerations (kueue v0.17.1 flavorassigner.go, FindMatchingUntoleratedTaint; the rule of
    k8s.io/api core/v1 toleration.go ToleratesTaint, for the keyed tolerations used here)."""
    tolerations = [*spec.get("tolerations", []), *flavor["spec"].get("tolerations", [])]

    def tolerated(taint: dict) -> bool:
        return any(t.get("key") == taint["key"] and t.get("effect", taint["effect"]) == taint["effect"]
                   and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
                   for t in tolerations)
    return all(tolerated(taint) for taint in flavor["spec"].get("nodeTaints", [])
               if taint["effect"] in ("NoSchedule", "NoExecute"))


def matching_flavors(spec: dict, cluster_queue: dict, flavors: dict[str, dict]) -> list[str]:
    (group,) = cluster_queue["spec"]["resourceGroups"]
    names = [flavor["name"] for flavor in group["flavors"]]
    keys = {key for name in names for key in flavors[name]["spec"].get("nodeLabels", {})}
    selector = {k: v for k, v in spec.get("nodeSelector", {}).items() if k in keys}
    return [name for name in names
            if all(flavors[name]["spec"].get("nodeLabels", {}).get(k) == v for k, v in selector.items())
            and tolerates_flavor_taints(spec, flavors[name])]


def assigned_flavors(jobset: dict, objects: dict[str, dict], in_use: dict[str, Counter] | None = None) -> dict[str, str] | list[str]:
    """The flavor Kueue would assign each pod set of this JobSet through the stack's queues (the first
    matching flavor, in the ClusterQueue's order, whose unused quota holds it; `in_use` is quota other
    workloads already hold), or why it would not admit the JobSet."""
    local_queue = objects["LocalQueue"].get(jobset["metadata"]["labels"].get(QUEUE_LABEL, ""))
    if local_queue is None or local_queue["metadata"]["namespace"] != jobset["metadata"]["namespace"]:
        return [f"not queued in a LocalQueue of namespace {jobset['metadata']['namespace']}"]
    cluster_queue = objects["ClusterQueue"][local_queue["spec"]["clusterQueue"]]
    (group,) = cluster_queue["spec"]["resourceGroups"]
    quota = {flavor["name"]: Counter({r["name"]: amount(r["name"], r["nominalQuota"]) for r in flavor["resources"]})
             for flavor in group["flavors"]}
    used: dict[str, Counter] = {name: Counter((in_use or {}).get(name, {})) for name in quota}
    problems, assigned = [], {}
    for name, pods, spec in pod_sets(jobset):
        requests = pod_requests(spec)
        uncovered = set(requests) - set(group["coveredResources"])
        flavors = matching_flavors(spec, cluster_queue, objects["ResourceFlavor"])
        if uncovered or not flavors:
            problems.append(f"{name}: uncovered {sorted(uncovered)}, matching flavors {flavors}")
            continue
        wanted = Counter({resource: value * pods for resource, value in requests.items()})
        fits = [f for f in flavors if all(used[f][r] + v <= quota[f][r] for r, v in wanted.items())]
        if not fits:
            problems += [f"{flavors[-1]}: {r} {used[flavors[-1]][r] + v} > {quota[flavors[-1]][r]}"
                         for r, v in wanted.items() if used[flavors[-1]][r] + v > quota[flavors[-1]][r]]
            continue
        assigned[name] = fits[0]
        used[fits[0]] += wanted
    return problems or assigned


def admission_problems(jobset: dict, objects: dict[str, dict]) -> list[str]:
    """Why Kueue would not admit this JobSet through the stack's queues; [] when it would."""
    assigned = assigned_flavors(jobset, objects)
    return assigned if isinstance(assigned, list) else []


def rendered(name: str, step: str) -> dict:
    return jobs.render_manifests(spec_of(get_recipe(name)), SETTINGS)[step]


@pytest.mark.parametrize(("name", "step"), CASES, ids=IDS)
def test_every_step_is_queued_in_the_stacks_local_queue(stacks_json, name, step):
    objects = queue_objects(stacks_json[name])
    jobset = rendered(name, step)
    (local_queue,) = objects["LocalQueue"].values()
    assert jobset["metadata"]["labels"][QUEUE_LABEL] == local_queue["metadata"]["name"]
    assert jobset["metadata"]["namespace"] == local_queue["metadata"]["namespace"]


@pytest.mark.parametrize(("name", "step"), CASES, ids=IDS)
def test_every_step_fits_the_nominal_quota_of_the_flavor_its_node_selector_matches(stacks_json, name, step):
    assert admission_problems(rendered(name, step), queue_objects(stacks_json[name])) == []


@pytest.mark.parametrize("name", GKE_RECIPES)
@pytest.mark.parametrize("step", ["convert", "export"])
def test_conversion_steps_take_the_cpu_flavor_which_is_the_stacks_cpu_pool(stacks_json, name, step):
    objects = queue_objects(stacks_json[name])
    (cluster_queue,) = objects["ClusterQueue"].values()
    [(_, _, spec)] = pod_sets(rendered(name, step))
    assert matching_flavors(spec, cluster_queue, objects["ResourceFlavor"]) == ["cpu"]
    pools = {pool["name"] for pool in resources(stacks_json[name], "google_container_node_pool").values()}
    assert objects["ResourceFlavor"]["cpu"]["spec"]["nodeLabels"]["cloud.google.com/gke-nodepool"] in pools


def test_the_check_refuses_a_step_that_asks_for_more_than_the_cpu_pool(stacks_json):
    objects = queue_objects(stacks_json["qwen3-v6e32"])
    jobset = rendered("qwen3-v6e32", "convert")
    [(_, _, spec)] = pod_sets(jobset)
    spec["containers"][0]["resources"]["requests"]["cpu"] = "129"  # the quota is 2 x 64 vCPUs
    assert admission_problems(jobset, objects) == ["cpu: cpu 129 > 128"]


def test_the_check_refuses_a_step_whose_node_selector_matches_no_flavor(stacks_json):
    objects = queue_objects(stacks_json["qwen3-v6e32"])
    jobset = rendered("qwen3-v6e32", "export")
    [(_, _, spec)] = pod_sets(jobset)
    spec["nodeSelector"] = {"cloud.google.com/gke-nodepool": "some-other-pool"}
    assert admission_problems(jobset, objects) == ["main: uncovered [], matching flavors []"]


def test_the_check_refuses_a_cpu_step_that_does_not_tolerate_the_cpu_pools_taint(stacks_json):
    objects = queue_objects(stacks_json["qwen3-v6e32"])
    jobset = rendered("qwen3-v6e32", "convert")
    [(_, _, spec)] = pod_sets(jobset)
    del spec["tolerations"]
    assert admission_problems(jobset, objects) == ["main: uncovered [], matching flavors []"]


def test_the_check_refuses_a_step_without_the_queue_label(stacks_json):
    jobset = rendered("qwen3-v6e32", "convert")
    del jobset["metadata"]["labels"][QUEUE_LABEL]
    assert admission_problems(jobset, queue_objects(stacks_json["qwen3-v6e32"])) == [
        "not queued in a LocalQueue of namespace default"]


# --- Capacity fallback: the flavor Kueue picks, and what it injects into the pods ---------------------

VARIANTS = data_only_recipes()


def rendered_variant(name: str, step: str) -> dict:
    return jobs.render_manifests(spec_of(VARIANTS[name]), SETTINGS)[step]


@pytest.mark.parametrize(("name", "first", "then"), [
    ("qwen3-resv-flex", "tpu", "tpu-flex-start"),
    ("qwen3-spot-od", "tpu-spot", "tpu-on-demand"),
])
def test_train_workers_take_the_first_mode_and_fall_back_when_its_quota_is_taken(data_only_variants, name, first, then):
    objects = queue_objects(data_only_variants[name])
    jobset = rendered_variant(name, "train")
    assert assigned_flavors(jobset, objects) == {"pathways-head": "cpu", "worker": first}
    # Another train step holds the first mode's whole slice (32 chips): the workers go to the next mode.
    taken = {first: Counter({"google.com/tpu": 32})}
    assert assigned_flavors(jobset, objects, in_use=taken) == {"pathways-head": "cpu", "worker": then}


@pytest.mark.parametrize("name", ["qwen3-resv-flex", "qwen3-spot-od", "qwen3-flex", "qwen3-2x4x8-spot"])
def test_no_pod_pins_a_node_label_that_a_flavor_sets_otherwise(data_only_variants, name):
    """Kueue merges the assigned flavor's nodeLabels into each pod's nodeSelector and refuses a pod that
    pins another value for one of them (kueue v0.17.1 pkg/podset/podset.go, Merge): a worker that pinned
    a node pool or a capacity mode could not be moved to the fallback mode."""
    objects = queue_objects(data_only_variants[name])
    for step in ("convert", "train", "export"):
        for pod_set, _, spec in pod_sets(rendered_variant(name, step)):
            selector = spec.get("nodeSelector", {})
            for flavor in matching_flavors(spec, next(iter(objects["ClusterQueue"].values())), objects["ResourceFlavor"]):
                labels = objects["ResourceFlavor"][flavor]["spec"]["nodeLabels"]
                clashes = {k: (v, labels[k]) for k, v in selector.items() if k in labels and labels[k] != v}
                assert clashes == {}, (step, pod_set, flavor)
    worker = next(spec for pod_set, _, spec in pod_sets(rendered_variant(name, "train")) if pod_set == "worker")
    assert "tpu-rl/capacity" not in worker["nodeSelector"] and "cloud.google.com/gke-nodepool" not in worker["nodeSelector"]
