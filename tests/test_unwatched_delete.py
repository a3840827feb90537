"""The driver lost sight of a step's log and deletes its JobSet so that it does not bill unwatched
(scripts/pipeline/gke/submit.py _unwatched). A delete that fails for a reason that may pass must leave the
driver's ending transient: an ending the run decided (exit 4) fails the driver's Job for good
(podFailurePolicy), and the JobSet it could not delete would then bill with nobody watching."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.gke.submit import _unwatched

JOB = StepJob(step="train", name="tpu-rl-train-x", manifest={}, selector="s", expected_pods=1)


def _session(delete):
    return SimpleNamespace(cluster=SimpleNamespace(delete_jobset=delete), command=lambda verb: f"`tpu-rl {verb}`")


@pytest.mark.parametrize("transient", [True, False])
def test_a_delete_that_failed_keeps_its_errors_transience_and_says_the_jobset_keeps_running(transient):
    def delete(name, uid):
        raise ApiError("HTTP 503 after 6 tries", transient=transient)

    line, again = _unwatched(_session(delete), JOB, "uid-1", "`tpu-rl run r --steps train`")
    assert again is transient
    assert line == ("JobSet tpu-rl-train-x keeps running: deleting it failed (HTTP 503 after 6 tries); stop it "
                    "with `tpu-rl cancel`, or rerun `tpu-rl run r --steps train`")


def test_a_deleted_jobset_ends_the_driver_for_good_by_its_uid():
    deleted = []
    line, again = _unwatched(_session(lambda name, uid: deleted.append((name, uid)) or True), JOB, "uid-1",
                             "`tpu-rl run r --steps train`")
    assert deleted == [("tpu-rl-train-x", "uid-1")] and again is False
    assert line.startswith("JobSet tpu-rl-train-x was deleted so that it does not bill unwatched; its checkpoints")
