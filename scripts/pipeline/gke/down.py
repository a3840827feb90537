"""`tpu-rl down` on GKE: stop what a finished recipe bills by destroying its stack with `npx cdktf destroy
RECIPE`, keeping the bucket (the `artifacts` stack, which no recipe stack declares).

Why a destroy and not a node-pool resize through the GKE API (docs/capacity.md, "When the queue is empty"):
the TPU pools of flex-start, spot and on-demand are at 0 nodes once a run has ended, and a reservation's
chips bill until the reservation is deleted, whether its pool has nodes or not
(https://cloud.google.com/compute/docs/instances/reservations-overview, billing), so removing TPU nodes
stops no TPU billing; what still bills is the cluster itself: its fee, system pool and NAT. Terraform
destroys the stack and records it in the stack's state, so `npx cdktf deploy RECIPE` recreates it
cleanly, and another recipe's stack, or another project's, is never in that state.

Before anything is destroyed it checks, in this order, and refuses in one line: a checkout with
cdktf.json to run cdktf in, `npx` on PATH, the stack's state naming the settings' own cluster (project,
region, name) and project, no run of the recipe active or queued in that cluster, and no run of it whose
run.json a `run` wrote in the last billing.ATTACHED_FRESH (a `run` between two steps has no JobSet).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from rich.markup import escape

from tpu_rl.recipes import UserError, conventions
from tpu_rl.recipes.costs.standing import account
from tpu_rl.recipes.outcome import Outcome
from tpu_rl.recipes.settings.specs import CONFIG_ENV, DEFAULT_CONFIG
from tpu_rl.scripts.cloud import gcs
from tpu_rl.scripts.pipeline.gke.billing import ATTACHED_FRESH, active_runs, attached_runs, cluster_bill
from tpu_rl.scripts.pipeline.session import Session

CHECKOUT = Path(__file__).resolve().parents[3]  # the repository root: cdktf.json, node_modules, the stacks
CLUSTER_TYPE = "google_container_cluster"  # hashicorp/google's resource type, as the state names it


class DestroyFailed(Outcome):
    """`cdktf destroy` exited non-zero: its own output says why; the state keeps what was destroyed."""


def destroy_command(recipe: str) -> list[str]:
    """What `down` runs in the checkout: cdktf-cli 0.21's destroy of one stack, approved by `down`'s own
    question (or --yes) instead of cdktf's."""
    return ["npx", "cdktf", "destroy", recipe, "--auto-approve"]


def _state_text(session: Session) -> tuple[str, str | None]:
    """(where the stack's state is, its text or None when there is none)."""
    stack, settings = session.recipe.name, session.settings
    if settings.state_bucket:
        name = conventions.remote_state_object(stack)
        where = f"gs://{settings.state_bucket}/{name}"
        return where, gcs.read_text(session.clients.storage(), where)
    path = CHECKOUT / conventions.local_state_file(stack)
    return str(path), path.read_text() if path.is_file() else None


def state_resources(text: str | None) -> list[tuple[str, dict]]:
    """(type, attributes) of every managed resource instance a Terraform state holds (state format version
    4: resources, each with mode, type and instances[].attributes; hashicorp/terraform v1.9.8
    internal/states/statefile/version4.go, stateV4/resourceStateV4/instanceObjectStateV4)."""
    if not text:
        return []
    try:
        state = json.loads(text)
    except ValueError:
        return []
    return [(resource.get("type") or "", instance.get("attributes") or {})
            for resource in state.get("resources") or [] if resource.get("mode") == "managed"
            for instance in resource.get("instances") or []]


def _check_own_state(session: Session) -> tuple[str, list[tuple[str, dict]]]:
    """Where the stack's state is and what it holds. Any managed resource means something is deployed:
    Terraform deletes the cluster before its network, so a destroy that failed after it leaves a state
    with the subnet, router, NAT or service accounts and no cluster. UserError when the cluster is not
    the settings' own, or a resource carrying a project (hashicorp/google's `project` attribute) names
    another project."""
    settings, stack = session.settings, session.recipe.name
    where, text = _state_text(session)
    resources = state_resources(text)
    wanted = (settings.project, settings.region, settings.cluster_name)
    for kind, attributes in resources:
        if kind == CLUSTER_TYPE:
            found = (attributes.get("project"), attributes.get("location"), attributes.get("name"))
            if found != wanted:
                raise UserError(f"the state of stack {stack} ({where}) holds cluster '{found[2]}' of project "
                                f"'{found[0]}' in {found[1]}, not the one PROJECT, REGION and CLUSTER_NAME name "
                                f"('{wanted[2]}' of '{wanted[0]}' in {wanted[1]}): set the settings that stack "
                                "was deployed with, or destroy it yourself")
        elif attributes.get("project") not in (None, "", settings.project):
            raise UserError(f"the state of stack {stack} ({where}) holds {kind} '{attributes.get('id')}' of "
                            f"project '{attributes['project']}', not PROJECT '{settings.project}': set the "
                            "settings that stack was deployed with, or destroy it yourself")
    return where, resources


def waited_releases(resources: list[tuple[str, dict]]) -> list[tuple[str, int]]:
    """(name, timeout) of each release the stack now uninstalls without waiting whose state still records a
    wait: a stack deployed before they stopped waiting. The helm provider uninstalls with the state's wait
    and timeout, not the config's (docs/stacks.md, "Deploy and destroy")."""
    return [(attributes["name"], int(attributes.get("timeout") or 300)) for kind, attributes in resources
            if kind == "helm_release" and attributes.get("name") in conventions.UNWAITED_RELEASES
            and attributes.get("wait")]


def _waits_lines(recipe: str, waited: list[tuple[str, int]]) -> list[str]:
    """The warning, then its two commands each whole on a line of its own (a command to copy is never wrapped)."""
    names = ", ".join(f"{name} (up to {seconds // 60} min)" for name, seconds in waited)
    return [f"! the state of stack {recipe} still records a wait on uninstalling Helm release(s) {names}, "
            "as deployed before tpu-rl stopped waiting on them: the helm provider uninstalls with the state's "
            "wait, so the destroy may wait that long on Kueue's finalizers and stop before the cluster. First "
            "run the deploy (it records no wait), then down:", f"  npx cdktf deploy {recipe}", f"  tpu-rl down {recipe}"]


def _config_env() -> dict[str, str]:
    """The environment cdktf runs in: this one, and the config file these settings came from, by its
    absolute path, as cdktf's synth runs in the checkout (recipes/settings/load.py reads ./tpu-rl.toml)."""
    env = dict(os.environ)
    config = Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG)
    if config.is_file():
        env[CONFIG_ENV] = str(config.resolve())
    return env


def _check_nothing_runs(session: Session) -> None:
    """Refuse while a run of the recipe is active or queued in the cluster, or a `run` following it has
    written its run.json lately (an attached run between two steps has no JobSet on the cluster); say in
    a line each `running` record older than that, whose `run` has stopped."""
    recipe, console = session.recipe.name, session.console
    again = f"then run `tpu-rl down {recipe}` again"
    active = active_runs(session)
    if active:
        first = next((run for run in active if run.run), active[0])
        if first.run is None:  # a conversion alone: the runs that wait on it share it
            raise UserError(f"a conversion of {recipe} is active or queued ({first.what}): wait for it to end, or "
                            f"cancel the run that waits on it (`tpu-rl runs {recipe}` lists them; `tpu-rl cancel "
                            f"{recipe} --run <run>`), {again}")
        raise UserError(f"run {first.run} of {recipe} is active or queued ({first.what}): cancel it with "
                        f"`tpu-rl cancel {recipe} --run {first.run}` (or wait for it to end), {again}")
    for run in attached_runs(session):
        minutes = int(run.age.total_seconds() // 60)
        if run.age <= ATTACHED_FRESH:
            raise UserError(f"run {run.run} of {recipe} is running: its run.json was written {minutes} min ago, "
                            "so a `tpu-rl run` follows it and submits its next step soon: wait for it to end, "
                            f"stop that `run`, or cancel it with `tpu-rl cancel {recipe} --run {run.run}` once "
                            f"its step is on the cluster, {again}")
        console.print(escape(f"run {run.run} says running, but its run.json is {minutes} min old and nothing "
                             "of it is on the cluster: the `run` that followed it stopped"))


def down_gke(session: Session, yes: bool) -> None:
    recipe, settings, console = session.recipe.name, session.settings, session.console
    if not (CHECKOUT / "cdktf.json").is_file():
        raise UserError(f"`tpu-rl down` runs `npx cdktf destroy {recipe}` in the tpu-rl checkout, and there is "
                        f"none at {CHECKOUT} (no cdktf.json): run it from the checkout you deployed with")
    if shutil.which("npx") is None:
        raise UserError("`tpu-rl down` needs npx (Node.js 22, README prerequisites) to run cdktf: install it "
                        "and run `make synth` in the checkout")
    state, resources = _check_own_state(session)
    if not resources:
        console.print(escape(f"nothing to stop: no resource in the state of stack {recipe} ({state}): never "
                             "deployed, already destroyed, or deployed with another TF_STATE_BUCKET or checkout; "
                             f"gs://{settings.gcs_bucket} is untouched"))
        return
    kept, reserved = f"gs://{settings.gcs_bucket} and the token secret (the artifacts stack, cents)", ""
    if any(kind == CLUSTER_TYPE for kind, _ in resources):
        _check_nothing_runs(session)
        bill = cluster_bill(session)
        reserved = f", and reservation {settings.reservation}" if bill.reserved else ""
        console.print(escape(f"`npx cdktf destroy {recipe}` deletes cluster {settings.cluster_name}, its pools and "
                             "network"))
        for line in account(bill, session.recipe):  # the words `runs`, `run` and the README use
            console.print(escape(line))
    else:  # a destroy that stopped after the cluster: no cluster to ask, and what is left bills (the NAT)
        kinds = ", ".join(sorted({kind for kind, _ in resources}))
        console.print(escape(f"the state of stack {recipe} ({state}) holds no cluster but {len(resources)} "
                             f"resources an earlier destroy left ({kinds}): `npx cdktf destroy {recipe}` "
                             "deletes them (the Cloud NAT bills until then)"))
    console.print(escape(f"still billed after: {kept}{reserved}"))
    waited = waited_releases(resources)
    if waited:
        warning, *commands = _waits_lines(recipe, waited)
        console.print(f"[yellow]{escape(warning)}[/]")
        for command in commands:
            console.print(command, soft_wrap=True)
    if not yes:
        if session.confirm is None:
            raise UserError(f"down would destroy stack {recipe}: rerun with --yes to confirm (there is no "
                            "terminal to ask in)")
        if not session.confirm(f"Destroy stack {recipe} (gs://{settings.gcs_bucket} is kept)?"):
            console.print("nothing was destroyed")
            return
    console.print(f"running `{' '.join(destroy_command(recipe))}` in {CHECKOUT}")
    code = subprocess.run(destroy_command(recipe), cwd=CHECKOUT, env=_config_env(), check=False).returncode
    if code != 0:
        first = f"`npx cdktf deploy {recipe}` (its Helm releases then uninstall without waiting), then " \
            if waited else ""
        raise DestroyFailed(f"`npx cdktf destroy {recipe}` exited {code} (its output is above); the stack's "
                            f"state ({state}) keeps what it did not destroy: run {first}`tpu-rl down {recipe}` "
                            "again")
    console.print(escape(f"stack {recipe} destroyed: its cluster bills nothing more; still billed: {kept}"
                         f"{reserved}"))
    console.print(f"to start again: `npx cdktf deploy {recipe}`, then the stack's get_credentials_command and "
                  f"`tpu-rl run {recipe}`")
