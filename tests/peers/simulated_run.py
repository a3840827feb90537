"""A whole successful run scripted into the peers: each step's JobSet succeeds in the fake Kubernetes API
and, as its container would, leaves its output in the GCS emulator (put_step_output); train's head logs
MaxText's train-step and evaluation lines as they come, and its TensorBoard event files hold curves.

Every figure here is synthetic: chosen to look like a GRPO run on GSM8K, never measured. The demo
(peers/demo.py) and the end-to-end run tests (test_cli_run.py) script a run with this one function.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from contracts.tunix_log import evaluation_line, train_step_line
from tpu_rl.jobs.k8s import jobset_name
from peers.fixtures import peer_settings, put_step_output, spec_of

STEPS = ("convert", "train", "export")
# Synthetic held-out accuracy: corr of `EVAL_QUESTIONS` before, halfway and after training.
EVAL_QUESTIONS = 64
SYNTHETIC_CORRECT = (26, 33, 38)


def synthetic_curves(total: int) -> dict[str, list[tuple[int, float]]]:
    """The four plotted tags over `total` steps: reward rising and saturating, loss and KL settling,
    completions shortening. Made up, shaped like a run; the tags are tunix's (scripts/rundata/tags.py)."""
    def rise(step: int) -> float:
        return 1 - math.exp(-3 * step / max(total, 1))

    steps = range(1, total + 1)
    # the rollout's tags at the step before the one they fed, as tunix writes them (tags.paired_step)
    return {
        "rewards/train/mean": [(s - 1, 0.6 + 1.2 * rise(s) + 0.05 * math.sin(s)) for s in steps],
        "actor/train/loss": [(s, 0.02 + 0.05 * (1 - rise(s)) + 0.004 * math.cos(s)) for s in steps],
        "actor/train/kl": [(s, 0.002 + 0.01 * rise(s)) for s in steps],
        "completions/train/mean_length": [(s - 1, 310 - 90 * rise(s) + 6 * math.sin(s / 2)) for s in steps],
    }


def train_log_reads(total: int, reads: int) -> list[str]:
    """What each read of the train head's log returns: the log growing from the pre-training evaluation
    through train-step lines to the post-training one (lines built from MaxText's format strings)."""
    curves = synthetic_curves(total)
    loss = dict(curves["actor/train/loss"])
    pre, middle, post = SYNTHETIC_CORRECT
    lines = ["loading the checkpoint", evaluation_line("pre", pre, EVAL_QUESTIONS, pre + 4, 50, 0.8123)]
    for step in range(1, total + 1):
        lines.append(train_step_line(step, loss[step]))
        if step == total // 2:
            lines.append(evaluation_line("intermediate", middle, EVAL_QUESTIONS, middle + 3, 60, 1.25, step=step))
    lines.append(evaluation_line("post", post, EVAL_QUESTIONS, post + 2, 63, 1.9, second=50))
    cuts = [max(1, round(len(lines) * (i + 1) / reads)) for i in range(reads)]
    return ["\n".join(lines[:cut]) + "\n" for cut in cuts]


def put_curves(client, recipe) -> None:
    """The run's TensorBoard event files in its tensorboard/ prefix, with synthetic_curves."""
    from tpu_rl.jobs.paths import ArtifactPaths
    from peers.event_files import put_event_files

    spec = spec_of(recipe)
    url = ArtifactPaths(spec, peer_settings()).tensorboard
    with tempfile.TemporaryDirectory() as tmp:
        put_event_files(client, url, synthetic_curves(spec.recipe.train_steps), Path(tmp))


def succeed_writing_output(kube, gcs_client, recipe, step: str, then=None, **plan) -> None:
    """`step`'s JobSet of `recipe` (under the peers' settings) succeeds as `plan` (peers/jobset_plan.py)
    scripts it and, as its container would, leaves the step's output in the bucket; then `then` runs."""
    def finish() -> None:
        put_step_output(gcs_client, recipe, step)
        if then is not None:
            then()

    kube.plan(jobset_name(spec_of(recipe), step), on_success=finish, **plan)


def script_successful_run(kube, gcs_client, recipe, ticks: int = 2, train_ticks: int | None = None,
                          with_train_log: bool = False) -> None:
    """Each step of `recipe` (a GKE recipe under the peers' settings) succeeds after `ticks` GETs of
    running (train: `train_ticks`) and writes its output; with `with_train_log`, train's head logs its
    steps and evaluations as it runs and leaves event files, so `run` shows progress and accuracy and
    `runs` and `metrics` have something to show."""
    for step in STEPS:
        plan = {"ticks": ticks}
        if step == "train" and with_train_log:
            plan["ticks"] = train_ticks or ticks
            # the whole log is read before the JobSet completes (run reads it while pods run)
            plan["log_reads"] = train_log_reads(spec_of(recipe).recipe.train_steps, max(1, plan["ticks"] - 3))
            plan["then"] = lambda: put_curves(gcs_client, recipe)
        succeed_writing_output(kube, gcs_client, recipe, step, **plan)


def put_idle_cluster_nodes(kube, recipe) -> None:
    """The nodes a deployed GKE stack keeps with no run: the system pool at its minimum and, for a
    reservation, every host of each slice's pool (infra/gke_cluster.py, infra/tpu_pool.py); the CPU pool and
    the other TPU pools are at 0."""
    from tpu_rl.recipes import conventions

    for index in range(conventions.SYSTEM_POOL_NODES):
        kube.put_node(conventions.SYSTEM_POOL_NAME, index)
    if "reservation" in recipe.capacity:  # the one mode whose pool does not scale to zero
        for slice_index in range(recipe.shape.slices):
            for index in range(recipe.shape.hosts_per_slice):
                kube.put_node(conventions.tpu_pool_name(slice_index), index,
                              {conventions.CAPACITY_NODE_LABEL: "reservation"})
