"""Which settings exist: each one's environment variable, config-file key, help and default; the embedded
example; the one line for settings a command needs and nobody set; and which settings each command needs
(NEEDS): the one place that says so.

A command needs exactly what it reads, so a teammate who only looks at runs sets the project and the
bucket, and (for the commands that reach a cluster or a TPU VM) where that is. `load_settings(needs=...)`
refuses a missing one with the same line in every command (missing_settings); a value set is checked
whether or not the command reads it, by every command that loads settings (plan-review and check-rewards
load none). docs/settings.md shows this table (`needs_table`), and tests/test_settings_needs.py runs every
command with only these set, and with each one missing.

Three names are rules rather than plain fields:
- `reservation`: needed only when the recipe's capacity (after CAPACITY) includes reservation;
- `authorized_cidr`: needed only by a GKE recipe (its control plane's allowlist);
- `vm_name`: the TPU VM's name, TPU_NAME or else <CLUSTER_NAME>-vm: either setting satisfies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from tpu_rl.recipes.capacity.modes import Platform
from tpu_rl.recipes.errors import UserError


CONFIG_ENV = "TPU_RL_CONFIG"
DEFAULT_CONFIG = Path("tpu-rl.toml")

# The example values are recognisable on purpose: stacks refuse to plan with them (a lifecycle
# precondition) and the CLI refuses to talk to a cloud with them.
EXAMPLE_PROJECT = "tpu-rl-example"
DEFAULT_HF_TOKEN_SECRET = "hf-token"
# What the VM recipe's TPU VM does once its startup script verified every output (jobs/vm_stop.py): stop
# itself, so only its boot disk bills, or stay up for the user.
VM_STOPS, VM_STAYS = "stop", "keep"


@dataclass(frozen=True)
class SettingSpec:
    field: str
    env: str
    help: str
    required: bool = True
    default: str | None = None
    shapes_stacks: bool = True  # False: only `tpu-rl` reads it, so a plan of the stacks needs no value


SPECS: tuple[SettingSpec, ...] = (
    SettingSpec("project", "PROJECT", "your Google Cloud project id"),
    SettingSpec("region", "REGION", "the region, e.g. us-east5"),
    SettingSpec("zone", "ZONE", "a zone of the region with v6e capacity, e.g. us-east5-b"),
    SettingSpec("cluster_name", "CLUSTER_NAME", "the GKE cluster name (at most 20 characters)"),
    SettingSpec("gcs_bucket", "GCS_BUCKET", "a globally unique bucket name for checkpoints and exports"),
    SettingSpec("reservation", "RESERVATION", "the TPU reservation name", required=False),
    SettingSpec(
        "authorized_cidr",
        "AUTHORIZED_CIDR",
        "comma-separated CIDRs allowed to reach the GKE control plane, e.g. 203.0.113.7/32",
        required=False,
    ),
    SettingSpec("hf_token_secret", "HF_TOKEN_SECRET", "the Secret Manager secret holding the Hugging Face token",
                required=False, default=DEFAULT_HF_TOKEN_SECRET),
    SettingSpec("tpu_name", "TPU_NAME", "the TPU VM name for VM recipes", required=False),
    SettingSpec("vm_after_run", "VM_AFTER_RUN", f"what the TPU VM of a VM recipe does after a verified run: "
                f"{VM_STOPS} (itself) or {VM_STAYS} (running)", required=False, default=VM_STOPS),
    SettingSpec("state_bucket", "TF_STATE_BUCKET", "an existing bucket for Terraform state (default: local state)",
                required=False),
    SettingSpec("capacity", "CAPACITY", "the TPU capacity mode, or an ordered fallback list, e.g. flex-start,spot "
                "(default: each recipe's own)", required=False),
    SettingSpec("capacity_wait", "CAPACITY_WAIT", "how long run waits for TPU capacity per mode before the next, "
                "and (cpu) for a CPU pool node, e.g. 45m or flex-start=6h,spot=20m,cpu=1h (default: flex-start=4h, "
                "others 30m)", required=False,
                shapes_stacks=False),
)
BY_FIELD = {spec.field: spec for spec in SPECS}
# What synth needs, and `load_settings` by default: every field without which no stack can be written.
REQUIRED = tuple(spec.field for spec in SPECS if spec.required)


class _Unset:
    """A required field a command does not need, and nobody set (NEEDS)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset()

EXAMPLE: Mapping[str, str] = {
    "project": EXAMPLE_PROJECT,
    "region": "us-east5",
    "zone": "us-east5-b",
    "cluster_name": "tpu-rl-example",
    "gcs_bucket": "tpu-rl-example-artifacts",
    "reservation": "tpu-rl-example-reservation",
    "authorized_cidr": "203.0.113.0/24",
}

# Settings that may be laid over the embedded example, so that e.g. `CAPACITY=flex-start make synth` shows
# what flex-start changes before any project exists (the example still never reaches a cloud).
EXAMPLE_OVERLAYS = {"capacity"}


class MissingSettings(UserError):
    """Settings a command needs (or reads) that nobody set: bad input, and a type of its own so that a reader
    for whom an unset setting is no error (jobs/driver.py settings_env) tells it from any other."""


def missing_settings(specs: Sequence[SettingSpec]) -> MissingSettings:
    """The one line for settings a command needs and nobody set: every one at once, so one run shows the
    whole fix. The same line in every command (NEEDS says which needs what)."""
    names, verb = _listed([spec.env for spec in specs]), "is" if len(specs) == 1 else "are"
    exports = " ".join(f"{spec.env}=<{spec.help}>" for spec in specs)
    return MissingSettings(f"{names} {verb} not set: export {exports} or set "
                     f"{_listed([spec.field for spec in specs])} in {DEFAULT_CONFIG}")

def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# Where things are: each a group of the fields that find one thing.
BUCKET = ("project", "gcs_bucket")
CLUSTER = ("project", "region", "cluster_name")  # the kube context gke_<project>_<region>_<cluster>
VM = ("project", "zone", "vm_name")


def _fields(*groups: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(field for group in groups for field in group))


def _both(*groups: tuple[str, ...]) -> dict[Platform, tuple[str, ...]]:
    fields = _fields(*groups)
    return {"gke": fields, "vm": fields}


# What a deploy needs of every stack (`make synth`, `npx cdktf deploy`): all five, and the rules.
DEPLOY = ("project", "region", "zone", "cluster_name", "gcs_bucket")

NEEDS: Mapping[str, Mapping[Platform, tuple[str, ...]]] = {
    "synth": {"gke": _fields(DEPLOY, ("reservation", "authorized_cidr")), "vm": _fields(DEPLOY, ("reservation",))},
    "recipes": _both(),
    "render": {"gke": ("gcs_bucket",), "vm": _fields(VM, BUCKET)},  # what the manifests or the script name
    # Capacity, quota, bucket and token; the cluster's version for flex-start (GKE).
    "preflight": {"gke": _fields(CLUSTER, ("zone",), BUCKET, ("reservation",)),
                  "vm": _fields(("project", "region", "zone"), BUCKET, ("reservation",))},
    "secret set": _both(("project",)),
    # The bucket's region (run writes checkpoints there), the zones it waits for capacity in.
    "run": {"gke": _fields(CLUSTER, ("zone",), BUCKET), "vm": _fields(VM, ("region",), BUCKET)},
    # ZONE: where a JobSet waiting for Kueue may get its slice (scripts/pipeline/gke/admission.py places_of).
    # As `run` (each run of the sweep is one); the VM recipe refuses a sweep before any setting is read.
    "sweep": {"gke": _fields(CLUSTER, ("zone",), BUCKET), "vm": ()},
    "eval": {"gke": _fields(CLUSTER, ("zone",), BUCKET), "vm": _fields(CLUSTER, ("zone",), BUCKET)},  # GKE only
    "cancel": {"gke": _fields(CLUSTER, BUCKET), "vm": _fields(VM, BUCKET)},
    "status": {"gke": _fields(CLUSTER, ("zone",), BUCKET), "vm": _fields(VM, BUCKET)},
    # On GKE, the cluster too: what it still bills when no run of the recipe is there (scripts/pipeline/gke/billing.py).
    "runs": {"gke": _fields(CLUSTER, BUCKET), "vm": BUCKET},
    "logs": {"gke": CLUSTER, "vm": _fields(VM, BUCKET)},  # a VM step's log is in the bucket once it ended
    "metrics": _both(BUCKET),
    # `npx cdktf destroy RECIPE` synthesizes every stack: what synth needs, checked before anything is destroyed.
    # A VM recipe is refused before any setting is read.
    "down": {"gke": _fields(DEPLOY, ("reservation", "authorized_cidr")), "vm": ()},
    "check-rewards": _both(),
    # Nothing: the plan is compiled on this machine; paths and names never change what a chip holds.
    "fit": _both(),
    # None: both sides are built with the example settings, every setting variable and TPU_RL_CONFIG
    # dropped from their environment and tpu-rl.toml from the working tree (scripts/plan_review/worktrees.py).
    "plan-review": _both(),
}

GKE_ONLY = ("eval", "sweep")  # refused on the VM recipe before any setting is read

# The rules' own lines (Settings.for_recipe) name these; `load_settings` leaves them to it.
RULES = ("reservation", "authorized_cidr")


def needs(command: str, platform: Platform = "gke") -> tuple[str, ...]:
    """The settings `command` needs for a recipe on `platform` (KeyError: a command missing from NEEDS)."""
    return NEEDS[command][platform]


def needs_table() -> str:
    """NEEDS as the Markdown table of docs/settings.md."""
    env = {spec.field: spec.env for spec in SPECS}
    env["vm_name"] = "`TPU_NAME` or `CLUSTER_NAME`"
    notes = {"reservation": " (capacity `reservation`)", "authorized_cidr": ""}

    order = [spec.field for spec in SPECS]
    order.insert(order.index("cluster_name"), "vm_name")

    def cell(fields: tuple[str, ...]) -> str:
        fields = tuple(sorted(fields, key=order.index))
        names = [(env[field] if field == "vm_name" else f"`{env[field]}`") + notes.get(field, "") for field in fields]
        return ", ".join(names) or "none"

    lines = ["| command | GKE recipe | TPU VM recipe |", "| --- | --- | --- |"]
    for command, by_platform in NEEDS.items():
        shown = "`make synth`, `npx cdktf deploy`" if command == "synth" else f"`tpu-rl {command}`"
        gke, vm = cell(by_platform["gke"]), cell(by_platform["vm"])
        lines.append(f"| {shown} | {gke} | {'(GKE only)' if command in GKE_ONLY else vm} |")
    return "\n".join(lines) + "\n"
