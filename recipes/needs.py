"""Which settings each command needs: the one place that says so.

A command needs exactly what it reads, so a teammate who only looks at runs sets the project and the
bucket, and (for the commands that reach a cluster or a TPU VM) where that is. `load_settings(needs=...)`
refuses a missing one with the same line in every command (recipes/setting_specs.py); a value set is
checked whether or not the command reads it, by every command that loads settings (plan-review and
check-rewards load none). docs/settings.md shows this table (`needs_table`), and
tests/test_settings_needs.py runs every command with only these set, and with each one missing.

Three names are rules rather than plain fields:
- `reservation`: needed only when the recipe's capacity (after CAPACITY) includes reservation;
- `authorized_cidr`: needed only by a GKE recipe (its control plane's allowlist);
- `vm_name`: the TPU VM's name, TPU_NAME or else <CLUSTER_NAME>-vm: either setting satisfies it.
"""

from __future__ import annotations

from typing import Mapping

from tpu_rl.recipes.capacity_modes import Platform

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
    from tpu_rl.recipes.setting_specs import SPECS

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
