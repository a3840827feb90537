"""The run's driver from outside it: `run` creates it or finds it (never a second one), `status` says its
state, `cancel` deletes it first. The Job and its request are rendered by jobs/driver.py; following its
log is attach.py.

A driver's state, from its Job (batch/v1 JobStatus conditions): running (including a pod not started
yet), finished (Complete), failed (Failed), or none.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_rl.jobs.driver import (REQUEST_ANNOTATION, driver_job, driver_name, request_configmap,
                                request_configmap_name, request_digest, run_request, settings_env)
from tpu_rl.jobs.driver_runtime import DRIVER_CONTAINER, DRIVER_VERSION_ANNOTATION, driver_drift
from tpu_rl.jobs.k8s import jobset_name
from tpu_rl.recipes import STEPS, Step, UserError
from tpu_rl.recipes.outcome import DRIVER_BACKOFF_LIMIT, ExitCode
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cloud.driver_job import JobExists, Jobs
from tpu_rl.scripts.cloud.jobsets import jobset_state
from tpu_rl.scripts.pipeline.gke.driver_wheel import runtime_version
from tpu_rl.scripts.pipeline.session import Session


@dataclass(frozen=True)
class DriverState:
    name: str
    phase: str  # running | finished | failed | none
    version: str = ""  # the package version it runs
    digest: str = ""  # its request's (jobs/driver.py request_digest)
    exit_code: int | None = None  # its last pod's, once it ended
    reason: str = ""  # why its Job failed (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy)
    # A running driver's pods that failed (JobStatus.failed): the Job started it again each time, with a
    # back-off up to 10 min, so a driver failing over and over still reads "running" without them.
    failures: int = 0

    def line(self) -> str:
        """The one line `status` shows."""
        if self.phase == "none":
            return f"driver: none (no Job {self.name})"
        how = f", exit {self.exit_code}" if self.exit_code is not None and self.phase == "failed" else ""
        why = f", {self.reason}" if self.phase == "failed" and self.reason else ""
        if self.phase == "running" and self.failures:
            last = f", the last exit {self.exit_code}" if self.exit_code is not None else ""
            how = f", started again after {self.failures} of at most {DRIVER_BACKOFF_LIMIT} failures{last}"
        return f"driver: {self.phase} (Job {self.name}, tpu-rl {self.version or '?'}{how}{why})"

    def drift(self) -> str:
        """One line when the driver runs another version of the package than this CLI; "" otherwise."""
        if self.phase == "none":
            return ""
        line = driver_drift(runtime_version(), self.version or None)
        return f"! {line}" if line else ""


def job_phase(job: dict | None) -> tuple[str, str]:
    """(phase, reason of a failure) of a Job. Only the terminal conditions Complete and Failed end it:
    SuccessCriteriaMet and FailureTarget come first while its pods still terminate (Kubernetes 1.31+,
    KEP-4368: kubernetes.io/docs/concepts/workloads/controllers/job, "Termination of Job pods")."""
    if job is None:
        return "none", ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "finished", ""
        if condition.get("type") == "Failed":
            return "failed", condition.get("reason") or ""
    return "running", ""


def last_exit_code(pods: list[dict]) -> int | None:
    """The exit code of the newest of `pods` (oldest first) whose driver container ended."""
    return next((code for code in map(exit_code_of, reversed(pods)) if code is not None), None)


def exit_code_of(pod: dict | None) -> int | None:
    """The driver container's exit code in a pod, once it terminated."""
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == DRIVER_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                return terminated.get("exitCode")
    return None


def driver_state(session: Session, jobs: Jobs | None = None) -> DriverState:
    jobs = jobs or Jobs(session.cluster)
    name = driver_name(session.spec)
    job = jobs.get(name)
    phase, reason = job_phase(job)
    if job is None:
        return DriverState(name, phase)
    version = ((job["spec"]["template"].get("metadata") or {}).get("annotations") or {}).get(DRIVER_VERSION_ANNOTATION)
    digest = (job["metadata"].get("annotations") or {}).get(REQUEST_ANNOTATION, "")
    failures = int((job.get("status") or {}).get("failed") or 0) if phase == "running" else 0
    pods = jobs.pods(name) if phase != "running" or failures else []
    return DriverState(name, phase, version or "", digest, last_exit_code(pods), reason, failures)


def steps_left_running(session: Session, run: str) -> list[str]:
    """The steps of run `run` (train, export) whose JobSet still runs or queues on the cluster while its driver
    does not run: its pod was killed (SIGINT, SIGKILL) or its Job deleted, so nothing takes the run on to its
    next step. [] while the driver runs, or no step of the run does. Convert's JobSet is shared by the runs of
    one conversion, so it is no one run's."""
    spec = RunSpec.in_bucket(session.recipe, run)
    if job_phase(Jobs(session.cluster).get(driver_name(spec)))[0] == "running":
        return []
    return [step for step in ("train", "export")
            if jobset_state(session.cluster.get_jobset(jobset_name(spec, step))).phase in ("running", "suspended")]


@dataclass(frozen=True)
class Started:
    state: DriverState
    created: bool  # False: this `run` found the run's driver and attaches to it


def start_driver(session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool) -> Started:
    """Find the run's running driver (the same request: attach to it) or create one: its checks and plan
    first (submit.prepare_run, with the token Secret and user files), then its request and its Job. A
    running driver of another request is refused unless --replace, which deletes it first."""
    from tpu_rl.scripts.pipeline.gke.driver_image import stage_driver
    from tpu_rl.scripts.pipeline.gke.submit import prepare_run

    import sys

    from tpu_rl.scripts.pipeline.record import redacted

    spec, jobs = session.spec, Jobs(session.cluster)
    request = run_request(spec, steps, replace=replace, follow_logs=follow_logs, version=runtime_version())
    request["command"] = redacted(sys.argv)  # what run.json records as the run's command, not `tpu-rl drive`
    digest = request_digest(request, {file.name: file.content for file in spec.user_files},
                            settings_env(session.settings))
    jobs.wait_deleted(driver_name(spec))  # a Job being deleted (a `cancel`) is no driver to attach to
    state = driver_state(session, jobs)
    if state.phase == "running" and state.digest == digest:
        return Started(state, created=False)
    if state.phase == "running" and not replace:
        raise UserError(f"run {session.paths.run_name} has a driver running another request (other --steps or "
                        f"files): follow it with {session.command('status')}, or rerun with --replace to stop it "
                        "and start this one")
    replace = prepare_run(session, steps, replace)
    request["replace"] = replace
    request["consent"] = session.consent  # asked here, where the run was new: the driver's run.json keeps it
    runtime = stage_driver(session)
    if state.phase != "none":  # a finished driver, or one --replace stops: one driver per run
        jobs.delete(state.name)
        # the same request's ConfigMap, owned by that Job: the garbage collector would delete it after the
        # Job, maybe after this run recreated it (the pod then never mounts it); deleted here, it is new
        session.cluster.delete_configmap(request_configmap_name(spec, digest))
        session.console.print(f"deleted the run's earlier driver Job {state.name} ({state.phase})")
    session.cluster.ensure_configmap(request_configmap(spec, request, digest))
    try:
        job = jobs.create(driver_job(spec, session.settings, runtime, request, digest))
    except JobExists:  # an identical `run` created it meanwhile: attach to it, as the plan would have
        found = driver_state(session, jobs)
        if found.digest != digest:
            raise
        return Started(found, created=False)
    # owned by its Job from now on: deleted with it (a finished driver's TTL, `cancel`, the next `run`)
    session.cluster.ensure_configmap(request_configmap(spec, request, digest, job))
    return Started(driver_state(session, jobs), created=True)


def follow_commands(session: Session, steps: tuple[Step, ...]) -> list[str]:
    """The commands that attach to the run again, show it, and stop it."""
    again = session.command("run", *(("--steps", ",".join(steps)) if steps != STEPS else ()))
    return [f"  follow it: {again}", f"  its state: {session.command('status')}",
            f"  stop it:   {session.command('cancel')}"]


def stop_driver(session: Session) -> str:
    """Delete the run's driver Job and wait until its pod is gone (cancel: before the JobSets, so no
    JobSet is submitted by a dying driver); what was done, in a few words."""
    jobs = Jobs(session.cluster)
    name = driver_name(session.spec)
    return f"deleted driver Job {name}" if jobs.delete(name) else ""


EXIT_CODES = {int(code) for code in ExitCode}
