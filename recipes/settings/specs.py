"""Which settings exist: each one's environment variable, config-file key, help and default; the embedded
example; the one line for settings a command needs and nobody set; and which settings each command needs
(each platform's `needs`, recipes/platforms/, in the order of COMMANDS).

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

from tpu_rl.recipes.platforms import PLATFORMS, facts_of
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


class _Unset(str):
    """A required field a command does not need, and nobody set (`needs`). A str, as the fields it stands in
    for are (recipes/settings/checks.py Checked), though no one reads it: Settings refuses to hand it out."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset("<unset>")  # no valid value of any setting, should it ever leak

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
    whole fix. The same line in every command (`needs` says which needs what)."""
    names, verb = _listed([spec.env for spec in specs]), "is" if len(specs) == 1 else "are"
    exports = " ".join(f"{spec.env}=<{spec.help}>" for spec in specs)
    return MissingSettings(f"{names} {verb} not set: export {exports} or set "
                     f"{_listed([spec.field for spec in specs])} in {DEFAULT_CONFIG}")

def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# Every command, in the order docs/settings.md lists them; each platform says what each reads (its `needs`,
# recipes/platforms/), on the groups of recipes/settings/where.py.
COMMANDS = ("synth", "recipes", "render", "preflight", "secret set", "run", "sweep", "eval", "cancel", "status",
            "runs", "logs", "metrics", "down", "check-rewards", "fit", "plan-review")

# The rules' own lines (Settings.for_recipe) name these; `load_settings` leaves them to it.
RULES = ("reservation", "authorized_cidr")


def needs(command: str, platform: str | None = None) -> tuple[str, ...]:
    """The settings `command` needs for a recipe on `platform`; None: a command that reads the same on every
    platform (KeyError: a command or platform missing from the registry, ValueError: they differ)."""
    if platform is not None:
        return facts_of(platform).needs[command]
    found = {facts.needs[command] for facts in PLATFORMS.values()}
    if len(found) != 1:
        raise ValueError(f"`{command}` reads different settings on each platform: name the recipe's platform")
    return found.pop()


def needs_table() -> str:
    """Every platform's `needs` as the Markdown table of docs/settings.md."""
    env = {spec.field: spec.env for spec in SPECS}
    env["vm_name"] = "`TPU_NAME` or `CLUSTER_NAME`"
    notes = {"reservation": " (capacity `reservation`)", "authorized_cidr": ""}

    order = [spec.field for spec in SPECS]
    order.insert(order.index("cluster_name"), "vm_name")

    def cell(fields: tuple[str, ...]) -> str:
        fields = tuple(sorted(fields, key=order.index))
        names = [(env[field] if field == "vm_name" else f"`{env[field]}`") + notes.get(field, "") for field in fields]
        return ", ".join(names) or "none"

    def refused(command: str) -> str:
        return f"({' or '.join(facts.label for facts in PLATFORMS.values() if command not in facts.refused)} only)"

    platforms = PLATFORMS.values()
    lines = ["| command | " + " | ".join(f"{facts.label} recipe" for facts in platforms) + " |",
             "| --- |" + " --- |" * len(platforms)]
    for command in COMMANDS:
        shown = "`make synth`, `npx cdktf deploy`" if command == "synth" else f"`tpu-rl {command}`"
        cells = [refused(command) if command in facts.refused else cell(facts.needs[command]) for facts in platforms]
        lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
