"""`terraform plan` of the stacks a pull request changes, read-only, for the plan-review workflow.

Run by `.github/workflows/plan.yml` after the stacks are synthesized with the repository's settings:
`python -m tpu_rl.scripts.plan_review.terraform_plan --out terraform-plan.md --logs plan-logs STACK...`.
It never writes to the state bucket, never takes the state lock, and never fails the job: each stack
gets one line, and its full `init`/`plan` output goes to `<logs>/<stack>.log`.

- A stack with state in the bucket is planned against it: `init` only reads an existing state, and
  `plan -lock=false` takes no lock.
- A stack without state yet (a new recipe, a stack never deployed) is planned locally. Terraform's GCS
  backend creates an empty state when it finds none, and takes the lock and writes the state object to
  do so, during `init` and whatever `-lock` says (hashicorp/terraform v1.9.8 @e044e569c5bc,
  internal/backend/remote-state/gcs/backend_state.go, `StateMgr`: RefreshState, then Lock, WriteState,
  PersistState, Unlock when State() is nil), which a read-only identity may not. The state object it
  looks for is `<prefix>/<workspace>.tfstate` (`stateFile`; the workspace is `default`), so that object is
  checked first (a read), and when it is absent the stack's backend block is dropped: the plan then runs
  against an empty local state and shows everything the stack would add.
- Changes are counted from `terraform show -json` of the saved plan, as Terraform's own summary counts
  adds, changes and destroys (imports, which it also counts, are not reported: the stacks declare none;
  hashicorp/terraform v1.9.8 internal/command/jsonformat/plan.go, renderHuman): managed resources only;
  create and both replace orders add, delete and both replace orders destroy, update changes. Output
  changes are counted too: Terraform prints no `Plan:` line when only outputs change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

DEFAULT_WORKSPACE = "default"  # hashicorp/terraform internal/backend: backend.DefaultStateName
STATE_SUFFIX = ".tfstate"  # backend_state.go stateFileSuffix
PLAN_FILE = "tpu-rl-review.tfplan"
ERROR_CHARS = 300

StateExists = Callable[[str, str], bool]  # (bucket, object name) -> does it exist


@dataclass(frozen=True)
class Counts:
    add: int = 0
    change: int = 0
    destroy: int = 0
    outputs: int = 0

    def summary(self) -> str:
        if not (self.add or self.change or self.destroy or self.outputs):
            return "no changes"
        text = f"{self.add} to add, {self.change} to change, {self.destroy} to destroy"
        if self.outputs:
            text += f"; {self.outputs} output{'s' if self.outputs != 1 else ''} changed"
        return text


def count_changes(plan: dict) -> Counts:
    """Counts from `terraform show -json PLANFILE` (the plan representation's resource_changes and
    output_changes, each with change.actions)."""
    add = change = destroy = 0
    for resource in plan.get("resource_changes") or []:
        if resource.get("mode") != "managed":
            continue
        actions = resource.get("change", {}).get("actions", [])
        if "create" in actions:
            add += 1
        if "delete" in actions:
            destroy += 1
        if actions == ["update"]:
            change += 1
    outputs = sum(1 for output in (plan.get("output_changes") or {}).values()
                  if output.get("actions", ["no-op"]) != ["no-op"])
    return Counts(add, change, destroy, outputs)


def state_object(backend: dict) -> tuple[str, str] | None:
    """(bucket, object) of the default workspace's state for a GCS backend block, or None for another."""
    gcs = backend.get("gcs")
    if gcs is None:
        return None
    prefix = str(gcs.get("prefix", "")).strip("/")
    name = f"{DEFAULT_WORKSPACE}{STATE_SUFFIX}"
    return gcs["bucket"], f"{prefix}/{name}" if prefix else name


def gcs_state_exists(project: str | None = None) -> StateExists:
    """A check through google-cloud-storage with the job's credentials (storage.objects.get, a read;
    STORAGE_EMULATOR_HOST is honoured by the client itself)."""
    def exists(bucket: str, name: str) -> bool:
        import google.cloud.storage as storage

        return storage.Client(project=project).bucket(bucket).blob(name).exists()
    return exists


@dataclass(frozen=True)
class StackPlan:
    stack: str
    line: str  # the Markdown list item
    log: Path


def _run(command: list[str], cwd: Path, log, env: dict[str, str]) -> subprocess.CompletedProcess:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    log.write(result.stdout + result.stderr + f"(exit {result.returncode})\n\n")
    log.flush()
    return result


# init wraps configuration errors in this line before naming them; the next error is the one to show.
_INIT_WRAPPER = "Error: Terraform encountered problems during initialisation"


def _first_error(text: str) -> str:
    errors = [line.strip(" │╷╵") for line in text.splitlines() if line.strip(" │╷╵").startswith("Error")]
    specific = [line for line in errors if not line.startswith(_INIT_WRAPPER)]
    return (specific or errors or ["see the log"])[0][:ERROR_CHARS]


def plan_stack(stack: str, stack_dir: Path, logs: Path, state_exists: StateExists,
               terraform: str = "terraform", env: dict[str, str] | None = None) -> StackPlan:
    env = dict(os.environ if env is None else env)
    env.setdefault("TF_IN_AUTOMATION", "1")
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{stack}.log"
    config_path = stack_dir / "cdk.tf.json"
    with log_path.open("w") as log:
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as error:
            return StackPlan(stack, f"- `{stack}`: plan failed: no synthesized configuration ({error})", log_path)
        backend = config.get("terraform", {}).get("backend", {})
        where = state_object(backend)
        if where is not None:
            try:
                deployed = state_exists(*where)
            except Exception as error:  # noqa: BLE001 - any API error is reported, the job goes on
                log.write(f"reading gs://{where[0]}/{where[1]} failed: {error}\n")
                reason = " ".join(str(error).split())[:ERROR_CHARS]
                return StackPlan(stack, f"- `{stack}`: plan failed: could not read gs://{where[0]}/{where[1]} "
                                        f"({reason})", log_path)
            if not deployed:
                log.write(f"gs://{where[0]}/{where[1]} does not exist: planning against an empty local state, "
                          "without the backend (its init would create the state object)\n\n")
                config["terraform"].pop("backend")
                config_path.write_text(json.dumps(config, indent=2))
        steps = [
            [terraform, "init", "-input=false", "-no-color"],
            [terraform, "plan", "-lock=false", "-input=false", "-no-color", f"-out={PLAN_FILE}"],
        ]
        for command in steps:
            result = _run(command, stack_dir, log, env)
            if result.returncode:
                return StackPlan(stack, f"- `{stack}`: plan failed: {_first_error(result.stdout + result.stderr)}",
                                 log_path)
        shown = subprocess.run([terraform, "show", "-json", "-no-color", PLAN_FILE], cwd=stack_dir, env=env,
                               capture_output=True, text=True)
        if shown.returncode:
            log.write(shown.stderr)
            return StackPlan(stack, f"- `{stack}`: plan failed: {_first_error(shown.stderr)}", log_path)
        counts = count_changes(json.loads(shown.stdout))
    if not deployed:
        return StackPlan(stack, f"- `{stack}`: not deployed: {counts.add} to add (planned against an empty "
                                "state; the state bucket was only read)", log_path)
    return StackPlan(stack, f"- `{stack}`: {counts.summary()}", log_path)


def render(plans: Sequence[StackPlan], logs_hint: str) -> str:
    lines = ["### Terraform plan (read-only, -lock=false)", ""]
    lines += [plan.line for plan in plans] or ["No stack to plan."]
    lines += ["", logs_hint, ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_rl.scripts.plan_review.terraform_plan",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("stacks", nargs="*", help="the stacks to plan (the review's changed stacks)")
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"), help="the synth output (default: cdktf.out)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the Markdown summary")
    parser.add_argument("--logs", type=Path, required=True, help="a directory for one log per stack")
    parser.add_argument("--logs-hint", default="", help="where a reader finds the logs (a sentence)")
    args = parser.parse_args(argv)
    exists = gcs_state_exists(os.environ.get("PROJECT") or None)
    plans = [plan_stack(stack, args.outdir / "stacks" / stack, args.logs, exists) for stack in args.stacks]
    args.out.write_text(render(plans, args.logs_hint or f"One log per stack in {args.logs}/."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
