"""`tpu-rl run`, `status` and `logs` on GKE: submit each step's JobSet in order, wait, verify its output
in GCS, resume from what is already verified, and explain failures in one line each.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Literal

from rich.markup import escape

from jobs.k8s import (
    JOBSET_NAME_LABEL,
    MAIN_CONTAINER,
    RUN_LABEL,
    STEP_LABEL,
    SPEC_DIGEST_ANNOTATION,
    jobset_name,
    main_pod_selector,
    main_replicated_job,
    spec_digest,
)
from recipes import STEPS, Recipe, Settings, Step, UserError
from recipes.conventions import CHECK_FAILED_PREFIX, HF_TOKEN_ENV, HF_TOKEN_K8S_SECRET
from scripts.cloud import gcs, hf_token
from scripts.cloud.kube import (
    JobSetState,
    PodCounts,
    capacity_of,
    current_attempt,
    disruption_of,
    jobset_state,
    pod_counts,
    pod_problems,
)
from scripts.outcome import ApiError, Interrupted, StepFailed
from scripts.pipeline.manifests import manifest_stream
from scripts.pipeline.progress import AttemptProgress, RewardReader, progress_suffix
from scripts.pipeline.record import RunCancelled, RunRecord, cancellation_of, record_cancellation, run_records
from scripts.pipeline.session import (
    Session,
    StatusReport,
    StepStatus,
    describe_missing,
    differing_fields,
    hms,
    verify_output,
)

# How many of a step's last log lines are shown when nothing was streamed, and searched for a check's reason.
LOG_TAIL_LINES = 50
# How many of the head's last log lines are searched for the trainer's step line at each poll.
PROGRESS_LOG_LINES = 200


def _parse_time(text: str) -> datetime | None:
    """RFC 3339 (with nanoseconds, as the kubelet writes them) to an aware datetime; None if not one."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if not match:
        return None
    fraction = (match.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}")


def _duration(start: str | None, end: datetime | str | None) -> str:
    """h:mm:ss from an RFC 3339 start to an end (a datetime or RFC 3339); "" when either is unknown."""
    started = _parse_time(start) if start else None
    ended = _parse_time(end) if isinstance(end, str) else end
    if started is None or ended is None:
        return ""
    return hms((ended - started).total_seconds())


def _elapsed(created: str | None, now: Callable[[], datetime]) -> str:
    since = _duration(created, now())
    return f"{since} elapsed" if since else ""


@dataclass(frozen=True)
class StepJob:
    step: Step
    name: str
    manifest: dict
    selector: str  # the main pod
    expected_pods: int

    @property
    def kubectl_logs(self) -> str:
        return f"kubectl logs -l {self.selector} -c {MAIN_CONTAINER}"


def step_jobs(recipe: Recipe, settings: Settings) -> dict[str, StepJob]:
    from jobs import render_manifests

    manifests = render_manifests(recipe, settings)
    jobs = {}
    for step in STEPS:
        manifest = manifests[step]
        expected = sum(int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1))
                       for rj in manifest["spec"]["replicatedJobs"])
        jobs[step] = StepJob(step, jobset_name(recipe, step), manifest, main_pod_selector(recipe, step), expected)
    return jobs


ActionKind = Literal["skip", "attach", "submit", "replace"]  # what `run` does with a step


@dataclass(frozen=True)
class Action:
    step: Step
    kind: ActionKind
    why: str


def _as_submitted(stored: object, ours: object) -> object:
    """The cluster's copy of a spec with only the fields we submit: the API server, the JobSet webhook and
    Kueue fill in defaults (and spec.suspend), which are not changes."""
    if isinstance(ours, dict) and isinstance(stored, dict):
        return {key: _as_submitted(stored[key], value) for key, value in ours.items() if key in stored}
    if isinstance(ours, list) and isinstance(stored, list) and len(ours) == len(stored):
        return [_as_submitted(theirs, mine) for theirs, mine in zip(stored, ours)]
    return stored


def spec_change(job: StepJob, existing: dict | None) -> str | None:
    """How the JobSet on the cluster differs from the one this run would submit, or None when it does not
    (by the spec digest tpu-rl stored on it; a JobSet without one counts as different)."""
    if existing is None:
        return None
    stored = ((existing.get("metadata") or {}).get("annotations") or {}).get(SPEC_DIGEST_ANNOTATION)
    if stored == spec_digest(job.manifest):
        return None
    ours = {"spec": job.manifest["spec"]}
    return differing_fields(_as_submitted({"spec": existing.get("spec") or {}}, ours), ours) or \
        "in fields the cluster fills in"


def plan_gke(session: Session, jobs: dict[str, StepJob], steps: tuple[Step, ...], replace: bool) -> list[Action]:
    """Decide, before anything is submitted, what happens to each step. Raises UserError on conflicts."""
    actions: list[Action] = []
    will_run: set[str] = set()
    for step in steps:
        job = jobs[step]
        existing = session.cluster.get_jobset(job.name)
        state = jobset_state(existing)
        missing = session.missing(step)
        # A JobSet under this name that would be used (reattached, or replaced because its output is
        # missing) but was submitted with another spec is never reused silently.
        change = spec_change(job, existing) if missing or state.phase in ("running", "suspended") else None
        if change:
            what = f"JobSet {job.name} ({state.phase}) was submitted with another spec than this run's ({change})"
            if not replace and not (session.confirm and session.confirm(f"{what}. Delete it and submit the new spec?")):
                raise UserError(f"{what}: rerun with --replace to delete it and submit the new spec, or choose "
                                "another run name with --run NAME")
            actions.append(Action(step, "replace", what))
        elif state.phase in ("running", "suspended"):
            actions.append(Action(step, "attach", f"JobSet {job.name} is {state.phase}"))
        elif not missing:
            reuse = f" (JobSet {job.name} {state.phase})" if state.phase != "absent" else ""
            actions.append(Action(step, "skip", f"output verified{reuse}"))
            continue
        elif state.phase == "absent":
            actions.append(Action(step, "submit", "no output yet"))
        else:
            what = (f"JobSet {job.name} from an earlier run {state.phase}"
                    + (f" ({state.reason})" if state.reason else "")
                    + f" but its output is missing ({describe_missing(missing)})")
            if not replace and not (session.confirm and session.confirm(f"{what}. Delete it and submit again?")):
                raise UserError(f"{what}: rerun with --replace to delete it and submit {step} again "
                                f"(see why with {session.logs_hint(step)})")
            actions.append(Action(step, "replace", what))
        # A step to be submitted needs its predecessor's output, now or from this invocation. (A running
        # JobSet is reattached whatever its input: it already started.)
        index = STEPS.index(step)
        if actions[-1].kind != "attach" and index and STEPS[index - 1] not in will_run:
            before = STEPS[index - 1]
            missing_before = session.missing(before)
            if missing_before:
                raise UserError(
                    f"{step} needs the output of {before}, which is missing ({describe_missing(missing_before)}): "
                    f"run {session.command('run', '--steps', f'{before},{step}')} (or without --steps)")
        will_run.add(step)
    return actions


def run_gke(session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
            dry_run: bool = False) -> None:
    console = session.console
    jobs = step_jobs(session.recipe, session.settings)
    if dry_run and session.confirm is not None:
        session.confirm = lambda question: True  # the plan as if the question were answered yes; it says so
    try:
        record = RunRecord.open(session)
        actions = plan_gke(session, jobs, steps, replace)
    except ApiError as error:
        raise ApiError(f"{error}; nothing was submitted") from None
    if dry_run:
        show_dry_run(session, jobs, actions, replace)
        return
    if any(action.kind in ("submit", "replace") for action in actions):
        token = hf_token.read_token(session.clients.secrets(), session.settings)
        session.cluster.ensure_secret(HF_TOKEN_K8S_SECRET, HF_TOKEN_ENV, token)
        del token
        console.print(f"Kubernetes Secret {HF_TOKEN_K8S_SECRET} filled from Secret Manager "
                      f"'{session.settings.hf_token_secret}'")
    console.print(f"run {session.paths.run_name}; plan: "
                  + ", ".join(f"{action.step} {action.kind}" for action in actions))
    record.start({action.step: action.kind for action in actions}, {step: job.name for step, job in jobs.items()})
    try:
        _run_actions(session, jobs, actions, steps, record, follow_logs)
    except BaseException as error:
        record.finish(error)
        raise
    record.finish(None)
    session.report_done(steps)


def show_dry_run(session: Session, jobs: dict[str, StepJob], actions: list[Action], replace: bool) -> None:
    """The plan, each step with its reason, and the JobSets run would submit, as one YAML stream."""
    console = session.console
    console.print(f"dry run of run {session.paths.run_name}: nothing is submitted, and no Secret or run.json is "
                  "written")
    for action in actions:
        asks = " (run asks first; --replace does not)" if action.kind == "replace" and not replace else ""
        console.print(f"  {action.step}: {action.kind}{asks}: {escape(action.why)}")
    submitted = [jobs[action.step] for action in actions if action.kind in ("submit", "replace")]
    if not submitted:
        console.print("it would submit no JobSet")
        return
    console.print(f"the JobSets it would submit ({', '.join(job.name for job in submitted)}):")
    console.out(manifest_stream(job.manifest for job in submitted), highlight=False, end="")


def _run_actions(session: Session, jobs: dict[str, StepJob], actions: list[Action], steps: tuple[Step, ...],
                 record: RunRecord, follow_logs: bool) -> None:
    console = session.console
    for action in actions:
        job = jobs[action.step]
        if action.kind == "skip":
            console.print(f"[green]✓[/] {action.step}: {action.why}, skipping")
            continue
        if action.kind == "replace":
            console.print(f"{action.step}: deleting {escape(action.why)} (--replace)")
            session.cluster.delete_jobset(job.name)
        if action.kind in ("submit", "replace"):
            session.cluster.create_jobset(job.manifest)
            console.print(f"{action.step}: submitted JobSet {job.name}")
        else:
            console.print(f"{action.step}: {action.why}; reattaching to it (not submitting a duplicate)")
        record.step(action.step, "running")
        reattach = session.command("run", "--steps", ",".join(steps[steps.index(action.step):]))
        try:
            wait_for_jobset(session, job, follow_logs)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted: JobSet {job.name} keeps running on the cluster. Reattach with {reattach}; logs: "
                f"{session.logs_hint(job.step)}; stop it with {session.command('cancel')}") from None
        except ApiError as error:
            raise ApiError(f"lost contact with the cluster while waiting for {job.step} ({error}); JobSet "
                           f"{job.name} keeps running: rerun {reattach} to reattach") from None
        verify_output(session, action.step, steps)
        record.step(action.step, "succeeded", capacity=_capacity(session, job))


def _capacity(session: Session, job: StepJob) -> str | None:
    """The capacity mode the step's pods ran on, for the run record; None when unknown."""
    try:
        return capacity_of(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"))
    except ApiError:
        return None


class LogFollower(threading.Thread):
    """Streams the main pod's log while a step runs; reconnects after a dropped stream."""

    def __init__(self, session: Session, job: StepJob) -> None:
        super().__init__(daemon=True)
        self.session, self.job = session, job
        self.stop = threading.Event()
        self.streamed = False

    def _print(self, line: str) -> None:
        self.streamed = True
        self.session.console.print(f"[dim]{self.job.step}|[/] {escape(line)}", highlight=False)

    def run(self) -> None:
        # Lines carry the kubelet's timestamps; after a drop the stream is reopened a little before the
        # last line seen and everything up to that line is skipped, so nothing repeats or goes missing.
        last_stamp: datetime | None = None
        while not self.stop.is_set():
            try:
                pod = main_pod(self.session.cluster.list_pods(self.job.selector), running_only=True)
                if pod is not None:
                    since = int((self.session.now() - last_stamp).total_seconds()) + 2 if last_stamp else None
                    for raw in self.session.cluster.stream_log(pod["metadata"]["name"], MAIN_CONTAINER, since,
                                                               timestamps=True):
                        stamp_text, _, line = raw.partition(" ")
                        stamp = _parse_time(stamp_text)
                        if stamp is not None and last_stamp is not None and stamp <= last_stamp:
                            continue
                        last_stamp = stamp or last_stamp
                        self._print(line if stamp is not None else raw)
            except Exception:  # a dropped stream is not fatal; the main loop reports cluster trouble
                pass
            self.stop.wait(max(self.session.poll_interval, 0.05))

    def finish(self, tail: int = LOG_TAIL_LINES) -> None:
        """Stop following; if the step ended before any line was streamed, show the log's last lines."""
        self.stop.set()
        self.join(timeout=10)
        if not self.streamed:
            pod = main_pod(self.session.cluster.list_pods(self.job.selector))
            if pod is not None:
                for line in self.session.cluster.read_log(pod["metadata"]["name"], MAIN_CONTAINER, tail).splitlines():
                    self._print(line)


def main_pod(pods: list[dict], running_only: bool = False) -> dict | None:
    running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
    if running:
        return running[0]
    if running_only:
        return None
    return max(pods, key=lambda pod: pod["metadata"].get("creationTimestamp", ""), default=None)


def wait_for_jobset(session: Session, job: StepJob, follow_logs: bool) -> JobSetState:
    console, cluster = session.console, session.cluster
    follower = LogFollower(session, job) if follow_logs else None
    if follower:
        follower.start()
    problems: list[str] = []
    disruptions: list[str] = []  # pods taken away (DisruptionTarget) since the last restart
    restarts_seen: int | None = None
    last_summary = None
    hinted_kueue = False
    total_steps = session.recipe.train_steps
    progress = AttemptProgress()
    reward = RewardReader(session.clients.storage, session.paths.tensorboard, session.now)
    try:
        with console.status(f"{job.step}: waiting for JobSet {job.name}") as status:
            while True:
                state = jobset_state(cluster.get_jobset(job.name))
                if state.phase == "absent":
                    cancelled = cancellation_of(session, job.name)
                    if cancelled:
                        raise RunCancelled(f"step {job.step} was cancelled: `tpu-rl cancel` deleted JobSet {job.name} "
                                           f"at {cancelled}; its outputs are kept, rerun {session.command('run')} "
                                           "to go on")
                    raise StepFailed(f"step {job.step} failed: JobSet {job.name} disappeared while running (deleted "
                                     f"by someone?); rerun {session.command('run')} to resubmit")
                pods = cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}")
                for problem in (p for pod in pods for p in pod_problems(pod)):
                    if problem not in problems:
                        problems.append(problem)
                        console.print(f"[yellow]![/] {job.step}: {escape(problem)}")
                disruptions += [d for d in map(disruption_of, pods) if d and d not in disruptions]
                if restarts_seen is not None and state.restarts > restarts_seen:
                    console.print(escape(restart_line(session, job, state, disruptions, problems)))
                    disruptions.clear()
                restarts_seen = state.restarts
                # Pods of an earlier attempt may still be terminating: count, and read progress from, the
                # current attempt's only, so a step logged before the restart does not stick.
                pods = current_attempt(pods, state.restarts)
                counts = pod_counts(pods)
                summary = (f"{job.step}: {state.phase}, pods {counts.scheduled}/{job.expected_pods} scheduled, "
                           f"{counts.ready}/{job.expected_pods} ready")
                if state.phase == "suspended" and not hinted_kueue:
                    hinted_kueue = True
                    console.print(f"{job.step}: waiting for Kueue to admit JobSet {job.name}; if this lasts, check "
                                  f"`kubectl get workloads` and the ClusterQueue's CPU and TPU quota")
                if job.step == "train" and state.phase == "running":
                    head = main_pod(current_attempt(cluster.list_pods(job.selector), state.restarts))
                    log = cluster.read_log(head["metadata"]["name"], MAIN_CONTAINER, PROGRESS_LOG_LINES) if head else ""
                    summary += progress_suffix(progress.update(state.restarts, log), total_steps, reward.latest())
                if state.restarts:
                    summary += f", {state.restarts} restart(s)"
                elapsed = _elapsed(state.created, session.now)
                status.update(f"{summary}  {elapsed}")
                if summary != last_summary:
                    console.print(f"{summary}  [dim]{elapsed}[/]")
                    last_summary = summary
                if state.phase == "succeeded":
                    return state
                if state.phase == "failed":
                    raise StepFailed(failure_message(session, job, state, problems))
                session.sleep(session.poll_interval)
    finally:
        if follower:
            follower.finish()


def restart_line(session: Session, job: StepJob, state: JobSetState, disruptions: list[str],
                 problems: list[str]) -> str:
    """One line for a JobSet restart: what took the step down (a preemption when a pod was disrupted), the
    restart against its bound, and for train the checkpoint training resumes from, read from the bucket."""
    if disruptions:
        cause = f"preempted ({disruptions[-1]})"
    else:
        cause = f"failed ({problems[-1]})" if problems else "failed (its pods were replaced before they said why)"
    bound = f" ({state.restarts} of {state.max_restarts})" if state.max_restarts else ""
    line = f"{job.step}: {cause}; JobSet restarted{bound}"
    if job.step != "train":
        return line
    paths = session.paths
    try:
        step = gcs.latest_checkpoint_step(session.clients.storage(), paths)
    except ApiError as error:
        return f"{line}; training resumes from the latest checkpoint in {paths.actor_checkpoints} ({error})"
    if step is None:
        return f"{line}; no finished checkpoint in {paths.actor_checkpoints} yet, so training starts again at step 0"
    return f"{line}; training resumes from checkpoint step {step} ({paths.actor_checkpoints}{step})"


def check_failure(log: str) -> str | None:
    """Why the step's own container refused to go on: the text after CHECK_FAILED_PREFIX on the last such
    line of its log's end; None when there is none."""
    reasons = [line.partition(CHECK_FAILED_PREFIX)[2].strip() for line in log.splitlines() if CHECK_FAILED_PREFIX in line]
    return reasons[-1] if reasons else None


def _oom_killed(pod: dict) -> bool:
    """Whether the pod's main container was OOM-killed (the kubelet's reason; exit code 137 alone is any
    SIGKILL, a preemption's too)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == MAIN_CONTAINER:
            states = (container.get("state") or {}, container.get("lastState") or {})
            return any((state.get("terminated") or {}).get("reason") == "OOMKilled" for state in states)
    return False


def memory_limit(recipe: Recipe, job: StepJob) -> str | None:
    """The memory limit of the step's main container in the manifest run submits (rl.memory_max for
    train_rl), or None when it has none."""
    replicated = main_replicated_job(recipe, job.step)
    rj = next(rj for rj in job.manifest["spec"]["replicatedJobs"] if rj["name"] == replicated)
    container = next(c for c in rj["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
    return ((container.get("resources") or {}).get("limits") or {}).get("memory")


def out_of_memory(recipe: Recipe, job: StepJob) -> str:
    """The headline for an OOM-killed main container: what ran out, its limit and the setting behind it, and
    what the CPU machine it runs on has (every GKE step's main container runs on the CPU pool)."""
    machine = f"the CPU machine {recipe.cpu_machine_type} has {recipe.cpu_machine.memory_gib} GiB"
    limit = memory_limit(recipe, job)
    if job.step == "train":
        setting = f"limit {limit}, rl.memory_max in recipes.toml" if limit else "no limit: rl.memory_max in recipes.toml"
        return f"train_rl ran out of memory ({setting}; {machine})"
    return f"the {job.step} step ran out of memory ({machine}: cpu_machine_type in recipes.toml)"


def failure_message(session: Session, job: StepJob, state: JobSetState, problems: list[str]) -> str:
    why = state.reason + (f": {state.message}" if state.message else "")
    detail = "; ".join(problems[-3:]) if problems else "no pod reported a reason (pods may be gone)"
    try:
        pods = session.cluster.list_pods(job.selector)
        pod = main_pod(pods)
        log = session.cluster.read_log(pod["metadata"]["name"], MAIN_CONTAINER, LOG_TAIL_LINES) if pod else ""
    except ApiError:  # the failure is still reported, from the JobSet and pod status alone
        pods, log = [], ""
    oom = any(map(_oom_killed, current_attempt(pods, state.restarts)))
    headline = out_of_memory(session.recipe, job) if oom else check_failure(log)
    headline = f"{headline}; " if headline else ""
    return (f"step {job.step} failed: {headline}JobSet {job.name} {why}; {detail}. Logs: {session.logs_hint(job.step)} "
            f"or `{job.kubectl_logs}`; rerun with --replace to retry")


# -- cancel -------------------------------------------------------------------------------------------
ACTIVE = ("running", "suspended")  # what cancel stops: running, or waiting for Kueue


def _convert_waits_for(record: dict | None, jobset: str) -> bool:
    """Whether a run's record shows it waiting on this conversion JobSet (submitted or reattached by that
    run, and not finished: an interrupted `run` leaves it "running" too)."""
    entry = ((record or {}).get("steps") or {}).get("convert") or {}
    return entry.get("jobset") == jobset and entry.get("status") == "running"


def cancel_targets(session: Session, step: Step | None) -> tuple[dict[str, str], list[str]]:
    """The JobSets cancel deletes, `{step: name}`, and a note for each it leaves.

    Train and export belong to the run: its JobSets are found by the run label (never by a name prefix,
    so another run's are never touched) and deleted when running or waiting for Kueue; a finished one is
    left to its TTL with its logs. The conversion is shared by every run of the same conversion identity,
    so its JobSet is deleted only when this run's record shows the run waiting on it and no other run's
    record does."""
    cluster, run = session.cluster, session.paths.run_name
    targets: dict[str, str] = {}
    notes: list[str] = []
    if step in (None, "convert"):
        name = jobset_name(session.recipe, "convert")
        if jobset_state(cluster.get_jobset(name)).phase in ACTIVE:
            records = run_records(session)
            others = sorted(other for other, record in records.items()
                            if other != run and _convert_waits_for(record, name))
            if not _convert_waits_for(records.get(run), name):
                notes.append(f"kept JobSet {name}: the conversion is running, but not for run {run} (its run.json "
                             "does not show it waiting on it); other runs may share it")
            elif others:
                notes.append(f"kept JobSet {name}: the conversion is shared, and run(s) {', '.join(others)} wait "
                             "on it too")
            else:
                targets["convert"] = name
    if step != "convert":
        selector = f"{RUN_LABEL}={run}" + (f",{STEP_LABEL}={step}" if step else "")
        for obj in cluster.list_jobsets(selector):
            labels = obj["metadata"].get("labels") or {}
            if jobset_state(obj).phase in ACTIVE:
                targets[labels.get(STEP_LABEL, obj["metadata"]["name"])] = obj["metadata"]["name"]
    return targets, notes


def cancel_gke(session: Session, step: Step | None, yes: bool) -> None:
    """Delete the run's running JobSets (after a yes), record the cancellation, keep every output."""
    console, run = session.console, session.paths.run_name
    targets, notes = cancel_targets(session, step)
    for note in notes:
        console.print(escape(note))
    what = f"{step} of run {run}" if step else f"run {run}"
    if not targets:
        console.print(f"nothing to cancel: no JobSet of {what} is running or waiting for Kueue "
                      f"(see {session.command('status')})")
        return
    names = ", ".join(targets.values())
    kept = f"outputs in gs://{session.settings.gcs_bucket} are kept"
    if not session.cancel_confirmed(yes, f"delete JobSet(s) {names} of {what}", kept):
        return
    record_cancellation(session, targets, jobsets=list(targets.values()))
    for name in targets.values():
        session.cluster.delete_jobset(name)
        console.print(f"deleted JobSet {name}")
    console.print(f"cancelled {what}: {kept}; {session.command('run')} goes on from them (training from its last "
                  "checkpoint)")


# -- status and logs ----------------------------------------------------------------------------------
def jobset_step_status(state: JobSetState, counts: PodCounts | None, expected_pods: int,
                       now: datetime) -> tuple[str, str, str]:
    """The state, pods and time cells of one JobSet: a finished one shows "done" and how long it took."""
    reason = f" ({state.reason})" if state.reason and state.phase != "succeeded" else ""
    if state.phase in ("succeeded", "failed"):
        took = _duration(state.created, state.finished)
        return state.phase + reason, "done", f"took {took}" if took else ""
    if state.phase == "absent":
        return "absent", "", ""
    since = _duration(state.created, now)
    pods = f"{counts.ready}/{expected_pods} ready" if counts is not None else ""
    return state.phase + reason, pods, f"{since} elapsed" if since else ""


def status_gke(session: Session) -> StatusReport:
    rows = []
    jobs = step_jobs(session.recipe, session.settings)
    for step, job in jobs.items():
        state = jobset_state(session.cluster.get_jobset(job.name))
        # A finished JobSet keeps its pods until its TTL, so the capacity it ran on stays readable.
        pods = (current_attempt(session.cluster.list_pods(f"{JOBSET_NAME_LABEL}={job.name}"), state.restarts)
                if state.phase != "absent" else [])
        counts = pod_counts(pods) if state.phase in ("running", "suspended") else None
        rows.append(StepStatus(step, *jobset_step_status(state, counts, job.expected_pods, session.now()),
                               session.output_state(step), capacity_of(pods) or ""))
    run = session.paths.run_name
    return StatusReport(f"run {run}, JobSets {run}-<step> ({jobs['convert'].name} for convert)", rows)


def logs_gke(session: Session, step: Step, follow: bool, tail: int | None) -> Iterable[str]:
    job = step_jobs(session.recipe, session.settings)[step]
    pod = main_pod(session.cluster.list_pods(job.selector))
    if pod is None:
        raise UserError(f"no pod for step {step} (JobSet {job.name} is absent, or its pods were removed after the "
                        f"24 h TTL): see {session.command('status')}")
    name = pod["metadata"]["name"]
    if follow:
        return session.cluster.stream_log(name, MAIN_CONTAINER, tail_lines=tail)
    return session.cluster.read_log(name, MAIN_CONTAINER, tail).splitlines()
