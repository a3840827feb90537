"""`tpu-rl run` on GKE: start the run's driver in the cluster (or find it), then follow it. The terminal
only watches: Ctrl-C, a closed laptop or a lost network detach it, and the run goes on.

Following is reading the driver pod's log again every FOLLOW_SECONDS and printing the lines not yet
printed, pod after pod (a pod the Job replaced after an eviction goes on in the next), until its Job
ends; `run` then exits with the driver's exit code, whose line the driver printed. Each read asks for
the lines with the kubelet's timestamps from the second of the last one printed on (sinceTime) and prints
those after it (log_stream.LogCursor): a poll moves only the new lines, and a log the kubelet rotated
(containerLogMaxSize) loses none of them.
"""

from __future__ import annotations

import sys
import time
from typing import NoReturn

from tpu_rl.jobs.driver import RETRY_EXIT_CODE
from tpu_rl.jobs.driver_runtime import DRIVER_CONTAINER
from tpu_rl.recipes import Step
from tpu_rl.recipes.outcome import ApiError, ExitCode, Reported, StepFailed
from tpu_rl.scripts.cloud.driver_job import Jobs
from tpu_rl.scripts.pipeline.gke.driver import EXIT_CODES, exit_code_of, follow_commands, job_phase, start_driver
from tpu_rl.scripts.pipeline.gke.driver_start import StartBound
from tpu_rl.scripts.pipeline.gke.log_stream import LogCursor
from tpu_rl.scripts.pipeline.session import Session

FOLLOW_SECONDS = 2.0  # between two reads of the driver's log (at most; TPU_RL_POLL_SECONDS if shorter)
MIN_FOLLOW_SECONDS = 0.05


def run_attached(session: Session, steps: tuple[Step, ...], *, replace: bool, follow_logs: bool,
                 detach: bool) -> None:
    console = session.console
    started = start_driver(session, steps, replace=replace, follow_logs=follow_logs)
    state, run = started.state, session.paths.run_name
    if started.created:
        console.print(f"run {run}: started its driver, Job {state.name}, in the cluster")
    else:
        console.print(f"run {run}: its driver, Job {state.name}, is running; attaching to it")
    drift = state.drift()
    if drift:
        console.print(f"[yellow]{drift}[/]")
    if detach:
        console.print(f"detached: run {run} goes on in the cluster")
        for line in follow_commands(session, steps):
            console.print(line, soft_wrap=True)
        return
    follow_driver(session, state.name, steps)


def follow_driver(session: Session, name: str, steps: tuple[Step, ...]) -> None:
    """Print the driver's log as it grows until its Job ends; exit as it did. Ctrl-C and a lost cluster
    detach, in one line that names the commands to come back with."""
    jobs, console = Jobs(session.cluster), session.console
    start = StartBound(session, jobs)  # a pod that never starts is named, and bounded
    cursors: dict[str, LogCursor] = {}
    held: dict[str, str] = {}  # a pod's error line, shown once the pod's replacement or the Job's end says how
    ended: set[str] = set()
    following = ""
    pause = min(max(session.poll_interval, MIN_FOLLOW_SECONDS), FOLLOW_SECONDS)
    try:
        while True:
            job = jobs.get(name)
            phase, reason = job_phase(job)
            pods = jobs.pods(name) if job else []
            for pod in pods:
                pod_name, pod_phase = pod["metadata"]["name"], (pod.get("status") or {}).get("phase", "")
                if pod_name in ended:
                    continue
                if following and pod_name != following and pod_name not in cursors:
                    why = f" ({held.pop(following).removeprefix('error: ')})" if following in held else ""
                    console.print(f"driver: pod {following} ended{why}; following its replacement {pod_name}",
                                  markup=False, highlight=False)
                following = pod_name
                cursor = cursors.setdefault(pod_name, LogCursor())
                for line in cursor.read(session.cluster, pod_name, DRIVER_CONTAINER):
                    if line.startswith("error: "):  # the run's ending only if the Job does not start another
                        held[pod_name] = line
                    else:
                        _show(console, line)
                if pod_phase in ("Succeeded", "Failed"):  # read after it ended: its whole log
                    ended.add(pod_name)
            if job is None:
                _gone(session, name)
            if phase != "running":
                break
            newest = pods[-1]["metadata"]["name"] if pods else ""
            start.observe(job, pods, printed=newest in cursors and cursors[newest].last is not None,
                          ran_before=any(c.last is not None for pod, c in cursors.items() if pod != newest))
            time.sleep(pause)
    except KeyboardInterrupt:
        _detached(session, steps, "interrupted")
        raise Reported(ExitCode.INTERRUPTED) from None
    except ApiError as error:
        _detached(session, steps, f"lost contact with the cluster ({error})")
        raise Reported(ExitCode.API_ERROR) from None
    last_error = held.pop(following, None)
    if phase == "finished":
        return
    code = exit_code_of(pods[-1]) if pods else None
    if code == RETRY_EXIT_CODE:  # each retry ended on what the run did not decide, an API that kept failing
        # or a crash: the last pod's line says which; no driver is left to watch what it submitted
        why = last_error.removeprefix("error: ") if last_error else "its last pod said nothing"
        raise ApiError(f"the run's driver gave up after {len(pods)} tries, the last: {why}; what it submitted "
                       f"keeps running: rerun {session.command('run', '--steps', ','.join(steps))} to reattach")
    if last_error:
        _show(console, last_error)
    if code in EXIT_CODES:
        raise Reported(code)  # the driver said why in its last line, shown above
    raise StepFailed(f"the run's driver failed ({reason or 'no reason given'}, exit {code}): its log is above; "
                     f"see {session.command('status')}")


def _gone(session: Session, name: str) -> NoReturn:
    """The driver's Job went away while followed: `tpu-rl cancel` (its record says so), or someone."""
    from tpu_rl.scripts.pipeline.record import RunCancelled, cancellation_of

    cancelled = cancellation_of(session, name)
    if cancelled:
        raise RunCancelled(f"run {session.paths.run_name} was cancelled: `tpu-rl cancel` deleted its driver Job "
                           f"{name} at {cancelled}; its outputs are kept, rerun {session.command('run')} to go on")
    raise StepFailed(f"the run's driver Job {name} disappeared (deleted by someone?); its JobSets may run on: see "
                     f"{session.command('status')}, and rerun {session.command('run')} to go on")


def _show(console, line: str) -> None:
    """One line of the driver's log: its error line on stderr, as the CLI prints its own."""
    if line.startswith("error: "):
        print(line, file=sys.stderr, flush=True)
    else:
        console.print(line, markup=False, highlight=False)


def _detached(session: Session, steps: tuple[Step, ...], why: str) -> None:
    session.console.print(f"{why}: detached; run {session.paths.run_name} goes on in the cluster")
    for line in follow_commands(session, steps):
        session.console.print(line, soft_wrap=True)
