"""Each observer of `run`'s wait for a JobSet (scripts/pipeline/gke/observers.py, output.py), alone, fed
observations made by hand: the step's real JobSet manifest with the metadata and status the API adds, and
pods as JobSet v0.12.0 creates them, in the shapes the fake Kubernetes API serves (peers/jobset_life.py:
labels, conditions and container states as core/v1 and JobSet write them). The loop that asks them in
turn is driven end to end by the CLI tests (test_cli_stall_gke.py, test_cli_preemption.py, ...)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest

from contracts.orbax_log import save_line
from contracts.tunix_log import train_step_line
from peers.fixtures import SETTINGS, peer_settings, spec_of
from peers.jobset_life import NODE_SHUTDOWN_MESSAGE as SHUTDOWN, node_shut_down, waiting_state

from tpu_rl.recipes import STEPS, get_recipe, load_settings
from tpu_rl.recipes.runs.datasets import trained_steps
from tpu_rl.scripts.cloud.clients import Clients
from tpu_rl.scripts.cloud.gcs import write_json
from tpu_rl.scripts.cloud.jobsets import JobSetState
from tpu_rl.recipes.outcome import ApiError, StepFailed
from tpu_rl.scripts.pipeline import stall
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch
from tpu_rl.scripts.pipeline.gke.observation import Done, Fail, HeadLog, Observation, Say, Skip, poll
from tpu_rl.scripts.pipeline.gke.observers import (Ended, Gone, HeadLogHook, PhaseChanges, Problems, Restarts,
                                                   Starting, Summary)
from tpu_rl.scripts.pipeline.gke.output import JobSetStall, LogReads, LogUnread, Progress
from tpu_rl.scripts.pipeline.gke.starting import StartFailed
from tpu_rl.scripts.pipeline.gke.steps import step_jobs
from tpu_rl.scripts.pipeline.phases import Phases
from tpu_rl.scripts.pipeline.record import RunCancelled, record_cancellation
from tpu_rl.scripts.pipeline.session import Session

RECIPE = "qwen3-v6e32"
CREATED = "2026-12-06T08:00:00Z"
START = datetime(2026, 12, 6, 8, 0, tzinfo=timezone.utc)
UID = "5f0c7a8e-2b1d-4c3e-9a6f-0d8e7b6c5a41"


def settings(capacity: str | None = None):
    """The tests' settings; with `capacity`, that CAPACITY (spot: train's JobSet restarts on a reclaim)."""
    return load_settings(env={**SETTINGS, "CAPACITY": capacity}) if capacity else peer_settings()


def jobs(capacity: str | None = None):
    chosen = settings(capacity)
    return step_jobs(spec_of(chosen.recipe(get_recipe(RECIPE))), chosen)


def session(clock: list[datetime], capacity: str | None = None) -> Session:
    chosen = settings(capacity)
    return Session(spec_of(chosen.recipe(get_recipe(RECIPE))), chosen, Clients(chosen), now=lambda: clock[0])


def jobset(job, restarts: int = 0, suspend: bool = False, conditions: tuple = (), terminal: str | None = None) -> dict:
    """The step's JobSet as the API returns it: its manifest, with the metadata the API server adds and the
    status JobSet's controller writes (peers/jobset_life.py _store, _advance, _finish)."""
    obj = copy.deepcopy(job.manifest)
    obj["metadata"].update(uid=UID, creationTimestamp=CREATED, resourceVersion="1", namespace="default")
    if suspend:
        obj["spec"]["suspend"] = True
    obj["status"] = {"replicatedJobsStatus": [], "restarts": restarts, "conditions": list(conditions),
                     **({"terminalState": terminal} if terminal else {})}
    return obj


def pods(job, attempt: int = 0, ready: bool = True) -> list[dict]:
    """The pods of an attempt, one per replicated Job's replica and index, labelled as JobSet labels them;
    scheduled and running, Ready when `ready` (peers/jobset_life.py _create_pods, _advance)."""
    found = []
    for rj in job.manifest["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]
        containers = spec["template"]["spec"]["containers"]
        selector = spec["template"]["spec"].get("nodeSelector")
        for replica in range(int(rj.get("replicas", 1))):
            for index in range(int(spec.get("parallelism", 1))):
                name = f"{job.name}-{rj['name']}-{replica}-{index}-a{attempt}{index:03d}"
                found.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default", "creationTimestamp": CREATED,
                                 "labels": {"jobset.sigs.k8s.io/jobset-name": job.name,
                                            "jobset.sigs.k8s.io/jobset-uid": UID,
                                            "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                                            "jobset.sigs.k8s.io/restart-attempt": str(attempt)}},
                    "spec": {"containers": [{"name": c["name"], "image": c.get("image", "")} for c in containers],
                             **({"nodeSelector": dict(selector)} if selector else {})},
                    "status": {"phase": "Running",
                               "conditions": [{"type": "PodScheduled", "status": "True"},
                                              {"type": "Ready", "status": "True" if ready else "False"}],
                               "containerStatuses": [{"name": c["name"], "image": c.get("image", ""), "ready": ready,
                                                      "restartCount": 0,
                                                      "state": {"running": {"startedAt": CREATED}}}
                                                     for c in containers]}})
    return found


def read(text: str = "", last_line: str | None = None, error: ApiError | None = None):
    return lambda: HeadLog(text, last_line, error)


def test_gone_says_whether_tpu_rl_cancel_deleted_the_jobset(gcs, settings_env):
    job, clock = jobs()["convert"], [START]
    now = session(clock)
    observer = Gone(now)
    assert observer.observe(Observation(job, jobset(job), pods(job))) is None
    gone = observer.observe(Observation(job, None))
    assert isinstance(gone, Fail) and type(gone.error) is StepFailed
    assert str(gone.error) == (f"step convert failed: JobSet {job.name} disappeared while running (deleted by "
                               f"someone?); rerun `tpu-rl run {RECIPE}` to resubmit")
    write_json(gcs, now.paths.run_record, {"status": "running"})  # the run's record, which `tpu-rl cancel` marks
    clock[0] = START + timedelta(minutes=30)
    record_cancellation(now, ["convert"], {"jobsets": [job.name]})
    cancelled = observer.observe(Observation(job, None))
    assert isinstance(cancelled, Fail) and isinstance(cancelled.error, RunCancelled)
    assert str(cancelled.error) == (f"step convert was cancelled: `tpu-rl cancel` deleted JobSet {job.name} at "
                                    f"2026-12-06T08:30:00+00:00; its outputs are kept, rerun `tpu-rl run {RECIPE}` "
                                    "to go on")


def test_each_pod_problem_is_said_once_and_kept_for_the_failure():
    job = jobs()["train"]
    running = pods(job)
    worker = node_shut_down(running[-1])["metadata"]["name"]
    observer = Problems()
    said = observer.observe(Observation(job, jobset(job), running))
    assert said == Say((f"[yellow]![/] train: pod {worker} disrupted (TerminationByKubelet): {SHUTDOWN}",
                        f"[yellow]![/] train: pod {worker} container {running[-1]['spec']['containers'][0]['name']} "
                        "Error (exit code 137)"))
    assert observer.observe(Observation(job, jobset(job), running)) is None  # said once
    assert observer.fresh == [] and len(observer.seen) == 2


def test_a_restart_is_said_once_with_the_disruption_seen_before_it_and_recorded(gcs, settings_env):
    job, clock = jobs("spot")["train"], [START]
    problems, records, now = Problems(), [], session(clock, "spot")
    observer = Restarts(now, problems, records)
    before = pods(job)
    pod = node_shut_down(before[-1])["metadata"]["name"]
    for seen in (Observation(job, jobset(job), pods(job)), Observation(job, jobset(job), before)):
        problems.observe(seen)
        assert observer.observe(seen) is None
    clock[0] = START + timedelta(minutes=20)
    after = Observation(job, jobset(job, restarts=1), before + pods(job, attempt=1))
    problems.observe(after)
    restarts = job.manifest["spec"]["failurePolicy"]["maxRestarts"]
    checkpoints = now.paths.actor_checkpoints  # empty: no checkpoint to resume from
    assert observer.observe(after) == Say((f"train: preempted (pod {pod} DisruptionTarget TerminationByKubelet: "
                                           f"{SHUTDOWN}); JobSet restarted (1 of {restarts}); no finished checkpoint "
                                           f"in {checkpoints} yet, so training starts again at step 0",))
    assert records == [{"at": "2026-12-06T08:20:00Z", "restart": 1, "preempted": True,
                        "reason": f"pod {pod} DisruptionTarget TerminationByKubelet: {SHUTDOWN}",
                        "resumes_from_step": None}]
    assert observer.observe(after) is None  # said once


def test_starting_ends_the_wait_on_an_image_that_cannot_be_pulled_without_saying_what_it_awaits(kube, settings_env):
    job, now = jobs()["convert"], session([START])

    def starting() -> Starting:
        return Starting(now, job, CapacityWatch(now, job, phases=Phases("convert")))

    assert starting().observe(Observation(job, jobset(job), pods(job))) is None  # every pod ready: nothing awaited

    def stuck(reason: str, pull: str = "not found") -> list[dict]:
        found = pods(job, ready=False)
        found[0]["status"]["phase"] = "Pending"  # its containers not created yet (peers/jobset_life.py start_failure)
        container = found[0]["status"]["containerStatuses"][0]
        container["state"] = waiting_state(reason, container["image"], container["name"], found[0]["metadata"]["name"],
                                           pull)
        return found

    # a pull that may work on a retry: what the step waits for is said; one that cannot: only the failure
    awaits = Say(("convert: waiting for step convert's pod to start (waited 0:00:00)",))
    assert starting().observe(Observation(job, jobset(job), stuck("ErrImagePull", "timeout"))) == awaits
    unparsable = stuck("InvalidImageName")
    container, image = unparsable[0]["status"]["containerStatuses"][0], unparsable[0]["spec"]["containers"][0]["image"]
    failed = starting().observe(Observation(job, jobset(job), unparsable))
    assert isinstance(failed, Fail) and isinstance(failed.error, StartFailed) and failed.error.uid == UID
    assert str(failed.error).startswith(f"container {container['name']} of pod {unparsable[0]['metadata']['name']} "
                                        f"cannot pull image {image} (InvalidImageName: "), str(failed.error)


@pytest.mark.parametrize("step", STEPS)
def test_a_failed_log_read_skips_the_poll_says_so_once_and_ends_every_step_at_the_limit(monkeypatch, step):
    """Every step's wait reads its head's log (train's progress, every step's stall bound), and a failed read
    skips the poll: its Ready pods would be waited for without end."""
    job = jobs()[step]
    seconds = [1000.0]
    monkeypatch.setattr(stall, "clock", lambda: seconds[0])
    lost = ApiError("lost contact with the cluster reading logs of pod head")
    observer = LogReads()

    def poll(head) -> Skip | Fail | None:
        return observer.observe(Observation(job, jobset(job), pods(job), head))

    assert poll(None) is None  # nothing read this poll
    assert poll(read("log\n", "2026-12-06T08:00:00Z log")) is None
    assert poll(read(error=lost)) == Skip((f"[yellow]![/] {step}: {lost}; the poll is skipped until a read works; "
                                           "run ends after 0:10:00 of them",))
    seconds[0] += 300
    assert poll(read(error=lost)) == Skip()
    assert poll(read("log\n", "2026-12-06T08:05:00Z log")) is None  # a read worked: the count starts again
    assert isinstance(poll(read(error=lost)), Skip)
    seconds[0] += 599
    assert poll(read(error=lost)) == Skip()
    seconds[0] += 1
    ended = poll(read(error=lost))
    assert isinstance(ended, Fail) and isinstance(ended.error, LogUnread) and not ended.error.transient
    assert str(ended.error) == (f"no read of the head's log worked for 0:10:00, the limit; the last failure: {lost}")


@pytest.mark.parametrize("between", ["a poll that reads nothing", "pods not Ready", "a restart"])
def test_the_log_read_limit_counts_only_an_unbroken_run_of_failed_reads_of_ready_pods(monkeypatch, between):
    """A failed read, then a poll that reads nothing (a JobSet requeued after a preemption) or whose pods are
    not Ready, or a new attempt, then 15 min later failed reads again: the limit starts again there (an
    older code kept the first failure's time and ended run at the next failed read, "worked for 0:15:30"),
    and the line names the failed reads' own span."""
    job = jobs()["train"]
    seconds = [1000.0]
    monkeypatch.setattr(stall, "clock", lambda: seconds[0])
    lost = ApiError("lost contact with the cluster reading logs of pod head")
    observer = LogReads()
    attempt = 1 if between == "a restart" else 0

    def failed() -> Skip | Fail | None:
        return observer.observe(Observation(job, jobset(job, restarts=attempt), pods(job, attempt), read(error=lost)))

    assert isinstance(observer.observe(Observation(job, jobset(job), pods(job), read(error=lost))), Skip)
    seconds[0] += 30
    if between == "a poll that reads nothing":
        assert observer.observe(Observation(job, jobset(job, suspend=True), [])) is None
    if between == "pods not Ready":
        assert isinstance(observer.observe(Observation(job, jobset(job), pods(job, ready=False), read(error=lost))),
                          Skip)
    seconds[0] += 900
    assert isinstance(failed(), Skip)  # 15:30 after the first failure, the first of this run
    seconds[0] += 599
    assert failed() == Skip()
    seconds[0] += 31
    ended = failed()
    assert isinstance(ended, Fail) and isinstance(ended.error, LogUnread)
    assert str(ended.error) == f"no read of the head's log worked for 0:10:30, the limit; the last failure: {lost}"


def test_progress_reads_the_attempt_s_furthest_step_and_a_save_from_the_head_s_log(gcs, settings_env):
    job, clock = jobs()["train"], [START]
    progress = Progress(session(clock))
    log = f"{train_step_line(3, 0.5)}\n{train_step_line(4, 0.25)}\n{save_line('save', 4)}\n"
    progress.observe(Observation(job, jobset(job), pods(job), read(log)))
    assert (progress.stepped.step, progress.stepped.loss, progress.saving) == (4, 0.25, True)
    total = trained_steps(get_recipe(RECIPE))
    assert progress.training("0:20:00 elapsed") == f"train: step 4/{total}, loss 0.25, 0:20:00 elapsed"
    progress.observe(Observation(job, jobset(job), pods(job), read(f"{train_step_line(3, 0.5)}\n")))
    assert progress.stepped.step == 4 and progress.saving  # a window without the lines keeps what was seen
    progress.observe(Observation(job, jobset(job, restarts=1), pods(job, attempt=1),
                                 read(f"{train_step_line(2, 0.75)}\n")))
    assert (progress.stepped.step, progress.saving) == (2, False)  # a new attempt starts afresh
    progress.observe(Observation(job, jobset(job, suspend=True), []))
    assert progress.stepped is None and progress.training is None  # not running: nothing read


def test_the_head_log_hook_gets_train_s_log_only_while_it_runs():
    train, convert = jobs()["train"], jobs()["convert"]
    handed: list[str] = []
    hook = HeadLogHook(handed.append)
    hook.observe(Observation(train, jobset(train), pods(train), read("step lines\n")))
    hook.observe(Observation(train, jobset(train, suspend=True), []))
    hook.observe(Observation(convert, jobset(convert), pods(convert), read("convert lines\n")))
    assert handed == ["step lines\n"]


def test_a_phase_change_is_said_with_how_long_the_phase_before_it_lasted(settings_env):
    job, clock = jobs()["convert"], [START]
    now = session(clock)
    phases = Phases("convert")
    observer = PhaseChanges(now, CapacityWatch(now, job, phases=phases), phases, Progress(now))
    assert observer.observe(Observation(job, jobset(job, suspend=True), [])) is None  # the first phase: queued
    clock[0] = START + timedelta(minutes=12)
    pulling = pods(job, ready=False)
    for pod in pulling:  # as the kubelet shows a pod whose image pulls (peers/jobset_life.py pulling_ticks)
        pod["status"]["phase"] = "Pending"
        pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    assert observer.observe(Observation(job, jobset(job), pulling)) == Say(("convert: pulling images (after queued "
                                                                            "for 0:12:00)",))
    clock[0] = START + timedelta(minutes=15)
    assert observer.observe(Observation(job, jobset(job), pulling)) is None
    assert [(phase, seconds) for phase, _, seconds in phases.spans] == [("queued", 720.0),
                                                                              ("pulling images", 180.0)]


def test_the_summary_is_said_when_it_changes_and_shown_in_the_status_at_each_poll(gcs, settings_env):
    job, clock = jobs()["convert"], [START + timedelta(minutes=5)]
    now = session(clock)
    observer = Summary(now, Progress(now))
    n = job.expected_pods
    assert observer.observe(Observation(job, jobset(job), pods(job))) == Say(
        (f"convert: running, pods {n}/{n} scheduled, {n}/{n} ready  [dim]0:05:00 elapsed[/]",),
        f"convert: running, pods {n}/{n} scheduled, {n}/{n} ready  0:05:00 elapsed")
    clock[0] += timedelta(minutes=1)
    assert observer.observe(Observation(job, jobset(job), pods(job))) == Say(
        (), f"convert: running, pods {n}/{n} scheduled, {n}/{n} ready  0:06:00 elapsed")
    restarted = observer.observe(Observation(job, jobset(job, restarts=1), pods(job, attempt=1)))
    assert restarted.lines == (f"convert: running, pods {n}/{n} scheduled, {n}/{n} ready, 1 "
                               "restart(s)  [dim]0:06:00 elapsed[/]",)
    train = jobs()["train"]
    progress = Progress(now)
    shows = Summary(now, progress)
    running = Observation(train, jobset(train), pods(train), read(f"{train_step_line(7, 0.5)}\n"))
    progress.observe(running)
    total = trained_steps(get_recipe(RECIPE))
    said = shows.observe(running)
    assert said.lines[1:] == (f"train: step 7/{total}, loss 0.5, 0:06:00 elapsed",)
    assert said.status == f"train: step 7/{total}, loss 0.5, 0:06:00 elapsed"
    assert shows.observe(running).lines == ()  # neither the pods nor the step changed


def test_ended_is_done_when_the_jobset_succeeded_and_fails_in_its_and_its_pods_words(kube, settings_env):
    job, clock = jobs()["convert"], [START]
    now = session(clock)
    problems = Problems()
    observer = Ended(now, problems)
    assert observer.observe(Observation(job, jobset(job), pods(job))) is None
    exited = pods(job)
    name, container = exited[0]["metadata"]["name"], exited[0]["spec"]["containers"][0]["name"]
    exited[0]["status"] = {"phase": "Failed", "containerStatuses": [  # the fake's failed pod (jobset_life.py _finish)
        {"name": container, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
    problems.observe(Observation(job, jobset(job), exited))
    completed = jobset(job, conditions=({"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                                         "message": "jobset completed successfully",
                                         "lastTransitionTime": "2026-12-06T09:00:00Z"},), terminal="Completed")
    assert observer.observe(Observation(job, completed, [])) == Done(JobSetState(
        "succeeded", "AllJobsCompleted", "jobset completed successfully", CREATED, 0, "2026-12-06T09:00:00Z",
        job.manifest["spec"]["failurePolicy"]["maxRestarts"]))
    failed = jobset(job, conditions=({"type": "Failed", "status": "True", "reason": "FailedJobs",
                                      "message": "jobset failed due to one or more job failures",
                                      "lastTransitionTime": "2026-12-06T09:00:00Z"},), terminal="Failed")
    ended = observer.observe(Observation(job, failed, []))
    assert isinstance(ended, Fail) and type(ended.error) is StepFailed
    assert str(ended.error).startswith(f"step convert failed: JobSet {job.name} FailedJobs: jobset failed due to one "
                                       f"or more job failures; pod {name} container {container} Error (exit code "
                                       f"1). Logs: `tpu-rl logs {RECIPE} convert`"), str(ended.error)


def test_the_stall_bound_says_when_its_count_starts_pauses_on_a_pod_not_ready_and_ends_at_the_bound(
        settings_env, monkeypatch):
    job, clock = jobs()["convert"], [START]
    seconds = [0.0]
    monkeypatch.setattr(stall, "clock", lambda: seconds[0])
    now = session(clock)
    observer = JobSetStall(now, job, Progress(now))
    counts = Say(("convert: all pods ready; stalled if silent 1:30:00",))

    def poll(ready: bool = True, line: str = "2026-12-06T08:00:00Z Starting weight transformation..."):
        return observer.observe(Observation(job, jobset(job), pods(job, ready=ready), read(f"{line}\n", line)))

    assert poll() == counts
    seconds[0] += 3600
    assert poll() is None
    assert poll(ready=False) is None  # a pod not Ready: the count stops
    seconds[0] += 3600
    assert poll() == counts  # and starts again, saying so
    seconds[0] += stall.QUIET_STALL_SECONDS - 1
    assert poll() is None
    seconds[0] += 1
    stalled = poll()
    assert isinstance(stalled, Fail) and type(stalled.error) is StepFailed
    assert str(stalled.error) == (f"step convert of JobSet {job.name} looks stalled: its log has not changed for "
                                  f"1:30:00 (the bound: 1:30:00); it is left running: look with `tpu-rl logs {RECIPE} "
                                  f"convert`, and stop it with `tpu-rl cancel {RECIPE}`")


def test_the_poll_reads_the_head_s_log_only_when_needed_and_once_when_an_observer_first_asks(kube, settings_env):
    """The read waits for the first observer that asks (LogReads, after the waits before the step runs), so
    that the reads keep their order; convert's log serves only its stall bound."""
    job, now = jobs()["convert"], session([START])
    assert poll(now, job, stalls=True).jobset is None  # not submitted yet
    plan = kube.plan(job.name, outcome="hang", log_reads=["one\n", "two\n", "three\n"])
    kube.put_jobset(job.manifest)  # running, every pod Ready
    seen = poll(now, job, stalls=False)
    assert seen.ready and seen.head is None  # no stall bound: nothing to read
    seen = poll(now, job, stalls=True)
    assert len(plan.log_reads) == 3  # not read yet
    assert seen.head.text == "one\n" and seen.head.last_line.endswith(" one") and seen.head.error is None
    assert seen.head.text == "one\n" and len(plan.log_reads) == 2  # read once
