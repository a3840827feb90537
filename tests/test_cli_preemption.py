"""What `tpu-rl run` and `status` read about preemptible capacity: the checkpoint a restart resumes from
(GCS emulator), the restart line without a preemption, and the capacity a step ran on (fake Kubernetes API)."""

from __future__ import annotations

from typer.testing import CliRunner

from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.fixtures import SETTINGS, peer_settings, put_step_output, spec_of
from peers.step_outputs import orbax_checkpoint
from tpu_rl.recipes import get_recipe, load_settings
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud import gcs as bucket_reader
from tpu_rl.scripts.cloud.clients import Clients
from tpu_rl.scripts.cloud.jobsets import JobSetState, capacity_of, current_attempt
from tpu_rl.scripts.pipeline.gke.observers import restart_of
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.session import Session

RECIPE = "qwen3-v6e32"
runner = CliRunner()


def actor_dir() -> str:
    return ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings()).actor_checkpoints


def put_checkpoint(client, step: str, committed: bool = True) -> None:
    """A train_rl checkpoint of `step` as orbax writes it; without `committed`, cut off before its step
    directory's commit marker (the last object orbax writes)."""
    objects = orbax_checkpoint(f"{actor_dir()}{step}/model_params/", ("model_params", "optimizer_state"), ocdbt=False)
    for url, data in objects if committed else objects[:-1]:
        bucket, name = split_gs_url(url)
        client.bucket(bucket).blob(name).upload_from_string(data)


def test_the_latest_checkpoint_is_the_highest_committed_step_by_number(gcs, settings_env):
    paths = ArtifactPaths(spec_of(get_recipe(RECIPE)), peer_settings())
    assert bucket_reader.latest_checkpoint_step(gcs, paths) is None  # nothing saved yet
    for step in ("7", "10", "20"):
        put_checkpoint(gcs, step)
    put_checkpoint(gcs, "30", committed=False)  # the save the preemption cut off
    bucket, prefix = split_gs_url(actor_dir())
    gcs.bucket(bucket).blob(f"{prefix}notes/commit_success.txt").upload_from_string(b"")  # not a step
    assert bucket_reader.latest_checkpoint_step(gcs, paths) == 20


def test_no_bucket_means_no_checkpoint(gcs, settings_env):
    settings = load_settings(env={**SETTINGS, "GCS_BUCKET": "no-such-bucket"})
    assert bucket_reader.latest_checkpoint_step(gcs, ArtifactPaths(spec_of(get_recipe(RECIPE)), settings)) is None


def _session() -> Session:
    settings = peer_settings()
    return Session(spec_of(get_recipe(RECIPE)), settings, Clients(settings))


def _train_job() -> StepJob:
    return StepJob("train", "qwen3-v6e32-train", {}, "selector", 9)


def test_a_restart_without_a_disrupted_pod_is_reported_as_a_failure_and_from_step_0(gcs, settings_env):
    state = JobSetState("running", restarts=2, max_restarts=3)
    line, _ = restart_of(_session(), _train_job(), state, [],
                         ["pod head-0 container workload-container OOMKilled (exit code 137)"])
    assert line == (f"train: failed (pod head-0 container workload-container OOMKilled (exit code 137)); JobSet "
                    f"restarted (2 of 3); no finished checkpoint in {actor_dir()} yet, so training starts again at "
                    "step 0")


def test_a_restart_names_the_last_preemption_seen(gcs, settings_env):
    put_checkpoint(gcs, "40")
    state = JobSetState("running", restarts=1, max_restarts=3)
    line, _ = restart_of(_session(), _train_job(), state, ["pod w-1 DisruptionTarget DeletionByPodGC"],
                         ["pod w-1 container pathways-worker Error (exit code 143)"])
    assert line == (f"train: preempted (pod w-1 DisruptionTarget DeletionByPodGC); JobSet restarted (1 of 3); "
                    f"training resumes from checkpoint step 40 ({actor_dir()}40)")


def _pod(name: str, attempt: str | None, selector: dict | None = None) -> dict:
    labels = {"jobset.sigs.k8s.io/jobset-name": "x"}
    if attempt is not None:
        labels["jobset.sigs.k8s.io/restart-attempt"] = attempt
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeSelector": selector or {}}}


def test_capacity_is_the_flavor_label_kueue_put_on_the_pods():
    head = _pod("head", "0", {"cloud.google.com/gke-nodepool": "cpu-np"})
    worker = _pod("worker", "0", {"cloud.google.com/gke-tpu-topology": "4x8", "tpu-rl/capacity": "flex-start"})
    assert capacity_of([head, worker]) == "flex-start"
    assert capacity_of([head]) is None and capacity_of([]) is None
    other = _pod("worker-2", "0", {"tpu-rl/capacity": "spot"})
    assert capacity_of([worker, other]) == "flex-start,spot"


def test_the_current_attempt_leaves_out_pods_of_an_earlier_one():
    old, new, unlabelled = _pod("old", "0"), _pod("new", "1"), _pod("plain", None)
    assert current_attempt([old, new, unlabelled], 1) == [new, unlabelled]


def test_status_says_which_capacity_the_train_step_ran_on(cloud, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("CAPACITY", "flex-start,spot")
    recipe = load_settings().recipe(get_recipe(RECIPE))
    manifests = render_manifests(spec_of(recipe), peer_settings())
    cloud["kube"].put_jobset(manifests["convert"], "succeeded")
    train = manifests["train"]["metadata"]["name"]
    cloud["kube"].plan(train, capacity="spot")  # Kueue admitted the TPU pods to the spot flavor
    cloud["kube"].put_jobset(manifests["train"], "succeeded")
    put_step_output(cloud["gcs"], recipe, "train")
    result = runner.invoke(app, ["status", RECIPE])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.split()[:1] in (["convert"], ["train"])}
    assert rows["train"].split(maxsplit=1)[1].startswith("succeeded, on spot, pods done"), result.output
    assert rows["convert"].split(maxsplit=1)[1].startswith("succeeded, pods done"), result.output  # a CPU step
