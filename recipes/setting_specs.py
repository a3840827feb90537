"""Which settings exist: each one's environment variable, config-file key, help and default; the embedded
example; and the one line for settings a command needs and nobody set."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

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
    """A required field a command does not need, and nobody set (recipes/needs.py)."""

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


def missing_settings(specs: Sequence[SettingSpec]) -> UserError:
    """The one line for settings a command needs and nobody set: every one at once, so one run shows the
    whole fix. The same line in every command (recipes/needs.py says which needs what)."""
    names, verb = _listed([spec.env for spec in specs]), "is" if len(specs) == 1 else "are"
    exports = " ".join(f"{spec.env}=<{spec.help}>" for spec in specs)
    return UserError(f"{names} {verb} not set: export {exports} or set "
                     f"{_listed([spec.field for spec in specs])} in {DEFAULT_CONFIG}")

def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
