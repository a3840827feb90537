"""What `run` does with each step, decided before anything is submitted, and the dry run that shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rich.markup import escape

from tpu_rl.jobs.k8s import SPEC_DIGEST_ANNOTATION, spec_digest
from tpu_rl.recipes import STEPS, Step, UserError
from tpu_rl.recipes.costs.run import driver_cost_line
from tpu_rl.scripts.cloud.jobsets import jobset_state
from tpu_rl.scripts.pipeline.gke.admission import CapacityWatch, jobset_uid, like_existing, read_admission
from tpu_rl.scripts.pipeline.gke.steps import StepJob
from tpu_rl.scripts.pipeline.manifests import manifest_stream
from tpu_rl.scripts.pipeline.session import Session, describe_missing, differing_fields, dry_run_costs

ActionKind = Literal["skip", "attach", "submit", "replace"]  # what `run` does with a step


@dataclass(frozen=True)
class Action:
    step: Step
    kind: ActionKind
    why: str
    uid: str = ""  # of the JobSet a replace deletes, and only that one (DeleteOptions preconditions.uid)

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

def plan_gke(session: Session, jobs: dict[Step, StepJob], steps: tuple[Step, ...], replace: bool) -> list[Action]:
    """Decide, before anything is submitted, what happens to each step. Raises UserError on conflicts."""
    actions: list[Action] = []
    will_run: set[str] = set()
    for step in steps:
        existing = session.cluster.get_jobset(jobs[step].name)
        job = jobs[step] = like_existing(jobs[step], existing)  # one `run` pinned to a later capacity mode
        state = jobset_state(existing)
        missing = session.missing(step, finished=state.phase == "succeeded")
        # A JobSet under this name that would be used (reattached, or replaced because its output is
        # missing) but was submitted with another spec is never reused silently.
        change = spec_change(job, existing) if missing or state.phase in ("running", "suspended") else None
        if change:
            what = f"JobSet {job.name} ({state.phase}) was submitted with another spec than this run's ({change})"
            if not replace and not (session.confirm and session.confirm(f"{what}. Delete it and submit the new spec?")):
                raise UserError(f"{what}: rerun with --replace to delete it and submit the new spec, or choose "
                                "another run name with --run NAME")
            actions.append(Action(step, "replace", what, jobset_uid(existing)))
        elif state.phase == "suspended" and (admission := read_admission(session, existing)).workload.phase == "inactive":
            # Kueue never admits a workload it deactivated again; it holds no capacity, so no question is
            # asked. One that someone else deactivated (kueuectl stop) may be meant: ask, or --replace.
            watch = CapacityWatch(session, job)
            if not admission.workload.by_kueue:
                what = watch.deactivated_by_someone(admission)
                if not replace and not (session.confirm and session.confirm(f"{what}. Delete it and submit it again?")):
                    raise UserError(what)
                why = f"deactivated by someone ({admission.workload.reason or 'spec.active false'})"
            else:
                why = watch.deactivation(admission)
            actions.append(Action(step, "replace", f"JobSet {job.name}, whose workload will not run: {why}",
                                  jobset_uid(existing)))
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
            actions.append(Action(step, "replace", what, jobset_uid(existing)))
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

def show_dry_run(session: Session, jobs: dict[Step, StepJob], actions: list[Action], replace: bool,
                 note: str = "", show_manifests: bool = False) -> None:
    """The plan, each step with its reason, expected time and cost, a note on it, and (with
    --show-manifests) the JobSets run would submit, as one YAML stream."""
    console = session.console
    console.print(f"dry run of run {session.paths.run_name}: nothing is submitted or written")
    costs, total = dry_run_costs(session.spec, [action.step for action in actions if action.kind != "skip"],
                                 [action.step for action in actions if action.kind == "attach"])
    for action in actions:
        asks = " (run asks first; --replace does not)" if action.kind == "replace" and not replace else ""
        console.print(f"  {action.step}: {action.kind}{asks}: {escape(action.why)}{costs.get(action.step, '')}")
    if note:
        console.print(note)
    console.print(total)
    console.print(driver_cost_line())
    show_submitted(console, [jobs[action.step] for action in actions if action.kind in ("submit", "replace")],
                   show_manifests)


def show_submitted(console, submitted: list[StepJob], show_manifests: bool) -> None:
    """The names of the JobSets a dry run would submit, and with --show-manifests the JobSets."""
    if not submitted:
        console.print("it would submit no JobSet")
        return
    shown = " (--show-manifests prints them)" if not show_manifests else ""
    console.print(f"the JobSets it would submit{shown}:")
    for job in submitted:
        console.print(f"  {job.name}")
    if show_manifests:
        console.out(manifest_stream(job.manifest for job in submitted), highlight=False, end="")
