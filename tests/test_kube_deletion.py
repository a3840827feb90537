"""Our deletes as the API server reads them: every DeleteOption in the body (DeleteResource reads the query
only when the body is empty), a JobSet deleted in the foreground stays until its pods are gone, and the wait
for that is bounded by the pods' grace period. The fake API's rules are the server's (peers/deletion.py,
docs/provenance.md#foreground-deletion-and-its-wait): these tests hold the fake to them too."""

from __future__ import annotations

import json
import os
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from cli_helpers import RECIPE, TRAIN
from peers.fixtures import peer_settings
from peers.kube_api import GROUP_PATH
from peers.settings import spec_of

NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def _train_manifest(grace: int | None = None) -> dict:
    from tpu_rl.jobs import render_manifests
    from tpu_rl.recipes import get_recipe

    manifest = render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["train"]
    if grace is not None:
        for rj in manifest["spec"]["replicatedJobs"]:
            rj["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return manifest


def _cluster(said: list[str] | None = None):
    from tpu_rl.recipes.outcome import RetryPolicy
    from tpu_rl.scripts.cloud.cluster import Cluster
    from tpu_rl.scripts.cloud.kubeconfig import api_client_for

    settings = peer_settings()
    told = {"say": said.append} if said is not None else {}
    return Cluster(api_client_for(settings, os.environ["KUBECONFIG"]), settings, RetryPolicy(base_delay=0), **told)


def _slice_pods(kube, name: str = TRAIN) -> list[str]:
    return [pod for pod, obj in kube.pods.items() if obj["metadata"]["labels"].get(NAME_LABEL) == name]


def _deletes(kube, path_part: str) -> list[tuple[dict, dict]]:
    """(body, query) of each DELETE the fake received whose path has `path_part`."""
    return [(json.loads(body) if body else {}, parse_qs(urlsplit(path).query))
            for method, path, body in kube.requests if method == "DELETE" and path_part in path]


def test_a_uid_guarded_jobset_delete_returns_only_once_its_slice_pods_are_gone(cloud):
    """The fail-over, lost-slice and --replace path: the JobSet of the name may be submitted again at once."""
    kube = cloud["kube"]
    kube.put_jobset(_train_manifest())
    uid = kube.jobsets[TRAIN]["metadata"]["uid"]
    assert _slice_pods(kube)
    assert _cluster().delete_jobset(TRAIN, uid) is True
    assert TRAIN not in kube.jobsets
    assert _slice_pods(kube) == [] and TRAIN not in kube.workloads  # no old pod under the name's label


def test_every_delete_we_make_puts_its_options_in_the_body(cloud):
    from tpu_rl.scripts.cloud.driver_job import Jobs

    kube = cloud["kube"]
    kube.kubelet = None  # the Job's pod stays Pending: nothing runs it
    kube.put_jobset(_train_manifest())
    uid = kube.jobsets[TRAIN]["metadata"]["uid"]
    cluster = _cluster()
    cluster.delete_jobset(TRAIN, uid)
    kube.put_jobset(_train_manifest())
    cluster.delete_jobset(TRAIN)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a-driver", "labels": {}},
           "spec": {"template": {"metadata": {}, "spec": {"terminationGracePeriodSeconds": 1, "containers": [
               {"name": "driver", "image": "python"}]}}}}
    Jobs(cluster).create(job)
    assert Jobs(cluster).delete("a-driver") is True
    assert _deletes(kube, "/jobsets/") == [({"propagationPolicy": "Foreground", "preconditions": {"uid": uid}}, {}),
                                           ({"propagationPolicy": "Foreground"}, {})]
    assert _deletes(kube, "/jobs/") == [({"propagationPolicy": "Foreground"}, {})]


def test_the_wait_after_a_foreground_delete_is_bounded_by_the_pods_grace_period_and_says_so(cloud, monkeypatch):
    """Pods that never stop: the wait ends after their grace period and the collector's minute, naming both."""
    from tpu_rl.scripts.cloud import deletion
    from tpu_rl.recipes.outcome import ApiError

    kube = cloud["kube"]
    kube.pod_stop_passes = 10**9
    clock = iter(range(0, 10**6, 7))
    monkeypatch.setattr(deletion.time, "monotonic", lambda: next(clock))
    for grace, bound in ((None, 90), (120, 180)):  # unset: the API's default of 30 s
        kube.put_jobset(_train_manifest(grace))
        said: list[str] = []
        with pytest.raises(ApiError) as still:
            _cluster(said).delete_jobset(TRAIN, kube.jobsets[TRAIN]["metadata"]["uid"])
        why = f"its pods' {grace or 30} s grace period, then 60 s for the kubelet and the garbage collector"
        assert str(still.value) == (f"JobSet {TRAIN} is still being deleted after {bound} s ({why}); wait a minute "
                                    "and run again")
        assert said == [f"waiting up to {bound} s for JobSet {TRAIN} and its pods to go ({why})"]
        kube.jobsets.clear()


# -- the fake API follows the server's rules ---------------------------------------------------------
def _custom_api():
    return k8s.CustomObjectsApi(k8s_config.new_client_from_config(os.environ["KUBECONFIG"]))


def test_the_fake_reads_the_options_from_the_query_when_the_body_is_empty(cloud):
    kube = cloud["kube"]
    kube.put_jobset(_train_manifest())
    group, version = GROUP_PATH.split("/")[2:]
    kept = _custom_api().delete_namespaced_custom_object(group, version, "default", "jobsets", TRAIN,
                                                          propagation_policy="Foreground")
    assert kept["metadata"]["finalizers"] == ["foregroundDeletion"] and kept["metadata"]["deletionTimestamp"]
    assert TRAIN in kube.jobsets and _slice_pods(kube)  # the owner stays while its pods terminate
    for _ in range(5):
        _custom_api().list_namespaced_custom_object(group, version, "default", "jobsets")
    assert TRAIN not in kube.jobsets and _slice_pods(kube) == []


def test_the_fake_ignores_the_query_beside_a_body_and_a_custom_resource_goes_in_the_background(cloud):
    """The defect the old delete_jobset had: preconditions in the body, Foreground in the query."""
    kube = cloud["kube"]
    kube.put_jobset(_train_manifest())
    uid = kube.jobsets[TRAIN]["metadata"]["uid"]
    group, version = GROUP_PATH.split("/")[2:]
    answer = _custom_api().delete_namespaced_custom_object(
        group, version, "default", "jobsets", TRAIN, propagation_policy="Foreground",
        body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)))
    assert (answer["kind"], answer["status"], answer["details"]) == (
        "Status", "Success", {"name": TRAIN, "group": "jobset.x-k8s.io", "kind": "jobsets", "uid": uid})
    assert TRAIN not in kube.jobsets
    pods = _slice_pods(kube)
    assert pods  # left to the garbage collector, which deletes them on its next passes
    _custom_api().list_namespaced_custom_object(group, version, "default", "jobsets")
    assert all(kube.pods[pod]["metadata"].get("deletionTimestamp") for pod in pods)


def test_the_fake_orphans_a_batch_v1_jobs_pod_when_no_policy_is_given(cloud):
    kube = cloud["kube"]
    kube.kubelet = None  # the pod stays Pending: nothing runs it
    batch = k8s.BatchV1Api(k8s_config.new_client_from_config(os.environ["KUBECONFIG"]))
    batch.create_namespaced_job("default", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                                            "spec": {"template": {"metadata": {}, "spec": {"containers": [
                                                {"name": "c", "image": "python"}]}}}})
    (pod,) = kube.pods_of_job("j")
    batch.delete_namespaced_job("j", "default")
    assert "j" not in kube.jobs
    assert pod["metadata"]["name"] in kube.pods and pod["metadata"]["ownerReferences"] == []
    assert not pod["metadata"].get("deletionTimestamp")


def test_the_fake_refuses_a_policy_the_server_does_not_know(cloud):
    kube = cloud["kube"]
    kube.put_jobset(_train_manifest())
    group, version = GROUP_PATH.split("/")[2:]
    with pytest.raises(k8s.ApiException) as refused:
        _custom_api().delete_namespaced_custom_object(group, version, "default", "jobsets", TRAIN,
                                                      body={"propagationPolicy": "Later"})
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Later": supported values: '
        '"Foreground", "Background", "Orphan", "nil"')
    assert TRAIN in kube.jobsets and kube.deleted == []
