"""`run` deletes a JobSet that fell short only if it is still that JobSet: the DELETE carries
DeleteOptions preconditions.uid, and the API server refuses another object of the name with a 409
Conflict Status (the fake's is the real shape: tests/peers/deletion.py precondition_failed)."""

from __future__ import annotations

import json
import os

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from cli_helpers import RECIPE, TRAIN, error_line, run_train, succeeds
from peers.kube_api import GROUP_PATH
from peers.settings import spec_of
from tpu_rl.recipes.outcome import ExitCode

def test_a_jobset_replaced_by_one_of_the_same_name_is_not_deleted_by_a_run_whose_step_fell_short(cloud, monkeypatch):
    kube = cloud["kube"]
    kube.plan(TRAIN, capacity="spot", stockout=("spot",), **succeeds(cloud))
    kube.replaced_before_delete = True  # a concurrent `run --replace` got there first
    result = run_train(cloud, monkeypatch, "spot,on-demand", "spot=0.5s")
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    line = error_line(result)
    assert line.startswith("error: step train stopped: waiting for nodes for the v6e-32 slice (spot)"), line
    assert f"JobSet {TRAIN} was meanwhile replaced by another of the same name" in line
    assert TRAIN in kube.jobsets and kube.deleted == [] and kube.created == [TRAIN]  # the new one stays


def test_the_fake_api_answers_a_delete_with_another_uid_with_the_api_servers_409_conflict_status(cloud):
    kube = cloud["kube"]
    from tpu_rl.jobs import render_manifests
    from peers.fixtures import peer_settings
    from tpu_rl.recipes import get_recipe

    kube.put_jobset(render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["train"])
    uid = kube.jobsets[TRAIN]["metadata"]["uid"]
    api = k8s.CustomObjectsApi(k8s_config.new_client_from_config(os.environ["KUBECONFIG"]))
    group, version = GROUP_PATH.split("/")[2:]
    with pytest.raises(k8s.ApiException) as refused:
        api.delete_namespaced_custom_object(group, version, "default", "jobsets", TRAIN,
                                            body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="an-old-uid")))
    assert refused.value.status == 409
    body = json.loads(refused.value.body)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "Conflict", 409)
    # rest.BeforeDelete checks the precondition first, with NewConflict of the object's kind
    assert body["details"] == {"name": TRAIN, "group": "jobset.x-k8s.io", "kind": "JobSet"}
    assert body["message"] == (
        f'Operation cannot be fulfilled on JobSet.jobset.x-k8s.io "{TRAIN}": the UID in the precondition '
        f"(an-old-uid) does not match the UID in record ({uid}). The object might have been deleted and then "
        "recreated")
    assert TRAIN in kube.jobsets and kube.deleted == []
    api.delete_namespaced_custom_object(group, version, "default", "jobsets", TRAIN,
                                        body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)))
    assert TRAIN not in kube.jobsets  # its own UID deletes it


def test_run_replace_deletes_only_the_jobset_it_planned_to_replace(cloud, monkeypatch):
    """`run --replace` deletes the JobSet its plan read by UID, as a shortfall does: one that a concurrent
    `run --replace` put in its place meanwhile is left alone, and nothing is submitted."""
    from tpu_rl.jobs import render_manifests
    from peers.fixtures import peer_settings, put_step_output
    from tpu_rl.recipes import get_recipe, load_settings
    from typer.testing import CliRunner
    from tpu_rl.scripts.cli import app

    kube = cloud["kube"]
    monkeypatch.setenv("CAPACITY", "spot")
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    kube.put_jobset(render_manifests(spec_of(load_settings().recipe(get_recipe(RECIPE))), peer_settings())["train"], "failed")
    kube.replaced_before_delete = True
    result = CliRunner().invoke(app, ["run", RECIPE, "--steps", "train", "--replace"])
    assert result.exit_code == ExitCode.JOB_FAILED, result.output
    assert f"JobSet {TRAIN} was meanwhile replaced by another of the same name" in error_line(result)
    assert TRAIN in kube.jobsets and kube.deleted == [] and kube.created == []
