"""Why a step failed, in one line: a check's own reason, an OOM kill with its limit, or the JobSet's and
pods' status."""

from __future__ import annotations

from tpu_rl.jobs.k8s import MAIN_CONTAINER, main_replicated_job
from tpu_rl.recipes import Recipe
from tpu_rl.recipes.conventions import CHECK_FAILED_PREFIX
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud.jobsets import JobSetState, current_attempt
from tpu_rl.scripts.pipeline.gke.steps import LOG_TAIL_LINES, StepJob, main_pod
from tpu_rl.scripts.pipeline.session import Session


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
    machine_type, size = recipe.cpu_pool_machine
    machine = f"the CPU machine {machine_type} has {size.memory_gib} GiB"
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
