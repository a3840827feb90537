"""Per-user settings: where things go in the user's cloud.

Each setting is read from its environment variable (the names the tutorials use: PROJECT, REGION, ...)
when set, else from its key in an optional TOML config file: merged key by key. Only when neither sets
anything may the embedded example stand in. Every value is checked here, once; the error names the
setting and the rule (docs/settings.md).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

from recipes.capacity_wait import DEFAULT_WAITS, WaitKey, parse_capacity_wait
from recipes.cidrs import authorized_cidrs_problem, authorized_cidrs_warning
from recipes.errors import UserError
from recipes.capacity_modes import PLATFORM_CAPACITY, CapacityMode, parse_capacity
from recipes.model import Recipe

CONFIG_ENV = "TPU_RL_CONFIG"
DEFAULT_CONFIG = Path("tpu-rl.toml")

# The example values are recognisable on purpose: stacks refuse to plan with them (a lifecycle
# precondition) and the CLI refuses to talk to a cloud with them.
EXAMPLE_PROJECT = "tpu-rl-example"
DEFAULT_HF_TOKEN_SECRET = "hf-token"


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
    SettingSpec("state_bucket", "TF_STATE_BUCKET", "an existing bucket for Terraform state (default: local state)",
                required=False),
    SettingSpec("capacity", "CAPACITY", "the TPU capacity mode, or an ordered fallback list, e.g. flex-start,spot "
                "(default: each recipe's own)", required=False),
    SettingSpec("capacity_wait", "CAPACITY_WAIT", "how long run waits for TPU capacity per mode before the next, "
                "and (cpu) for a CPU pool node, e.g. 45m or flex-start=6h,spot=20m,cpu=1h (default: flex-start=4h, "
                "others 30m)", required=False,
                shapes_stacks=False),
)
_BY_FIELD = {spec.field: spec for spec in SPECS}
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

# Keys that would put a secret into a file we read; the token belongs in Secret Manager.
_SECRET_KEYS = {"hf_token", "hf_access_token", "token"}

_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
MAX_CLUSTER_NAME = 20


@dataclass(frozen=True)
class Settings:
    project: str
    region: str
    zone: str  # the first zone of ZONE: a TPU VM's, a reservation's, the CPU and system pools'
    cluster_name: str
    gcs_bucket: str
    reservation: str | None = None
    authorized_cidr: tuple[str, ...] = ()
    hf_token_secret: str = DEFAULT_HF_TOKEN_SECRET
    tpu_name: str | None = None
    state_bucket: str | None = None
    capacity: tuple[CapacityMode, ...] | None = None  # None: each recipe's own capacity list
    # (mode, seconds) for every mode: how long `run` waits for capacity before the next (recipes/capacity_wait.py)
    capacity_wait: tuple[tuple[WaitKey, float], ...] = DEFAULT_WAITS
    source: str = "environment"
    zones: tuple[str, ...] = ()  # every zone of ZONE, in fallback order (recipes/placement.py); zone first

    def __post_init__(self) -> None:
        zone = object.__getattribute__(self, "zone")
        if not object.__getattribute__(self, "zones"):
            object.__setattr__(self, "zones", UNSET if zone is UNSET else (zone,))

    def __getattribute__(self, name: str):
        """A field the command's needs left out (recipes/needs.py) and nobody set is refused with the line
        of a missing setting, never read as a value: a command that reads more than its row of NEEDS says
        fails its test (tests/test_settings_needs.py) instead of naming a wrong cluster or bucket."""
        value = object.__getattribute__(self, name)
        if value is UNSET:
            raise missing_settings([_BY_FIELD["zone" if name == "zones" else name]])
        return value

    @property
    def is_example(self) -> bool:
        return object.__getattribute__(self, "project") == EXAMPLE_PROJECT

    @property
    def vm_name(self) -> str:
        return self.tpu_name or f"{self.cluster_name}-vm"

    @property
    def bucket_url(self) -> str:
        return f"gs://{self.gcs_bucket}"

    @property
    def warnings(self) -> tuple[str, ...]:
        """What is allowed but likely not meant: each a line starting "warning: " (synth and the CLI print them)."""
        cidr = authorized_cidrs_warning(self.authorized_cidr)
        return (cidr,) if cidr else ()

    def recipe(self, recipe: Recipe) -> Recipe:
        """`recipe` as these settings run it: CAPACITY, when set, replaces its capacity list, and every rule
        that depends on the recipe is checked. The one place the override happens: the stacks
        (stacks.app.build_app) and the CLI both take their recipes from here.

        A TPU VM has one provisioning model and no flex-start, so a VM recipe takes the first mode of the
        list that a VM can use (reservation, spot, on-demand): CAPACITY=flex-start,spot gives the GKE
        recipes flex-start (spot as Kueue's fallback) and the VM spot."""
        recipe = self.with_capacity(recipe)
        self.for_recipe(recipe)
        return recipe

    def with_capacity(self, recipe: Recipe) -> Recipe:
        """`recipe` with CAPACITY applied (see `recipe`), without the other per-recipe rules: for listings
        such as `tpu-rl recipes`, whose costs follow the capacity."""
        if self.capacity is None:
            return recipe
        problem = self.capacity_problem(recipe)
        if problem:
            raise UserError(problem)
        usable = PLATFORM_CAPACITY[recipe.platform]
        return recipe.with_capacity(tuple(mode for mode in self.capacity if mode in usable)[:1]
                                    if recipe.platform == "vm" else self.capacity, source="CAPACITY")

    def capacity_problem(self, recipe: Recipe) -> str | None:
        """Why CAPACITY leaves `recipe` nothing to run on (a TPU VM has no flex-start), or None. One rule for
        every command: the commands of that recipe refuse with this line, and synth still writes its stack,
        whose plan fails with it (`deployable`), so a GKE-only user need not name a VM mode."""
        if self.capacity is None or recipe.platform != "vm":
            return None
        usable = PLATFORM_CAPACITY["vm"]
        if any(mode in usable for mode in self.capacity):
            return None
        listed = ",".join(self.capacity)
        return (f"CAPACITY '{listed}' has no mode the TPU VM of recipe '{recipe.name}' can use "
                f"({', '.join(usable)}): add one after the others, e.g. CAPACITY={listed},spot gives the VM spot")

    def deployable(self, recipe: Recipe) -> tuple[Recipe, str | None]:
        """`recipe` as synth writes its stack, and why its plan must fail (None: it may be planned).

        A recipe CAPACITY leaves nothing to run on is written as on-demand, which needs no reservation, only
        so that its stack is complete: every resource then carries a precondition with the reason, so
        `cdktf deploy` stops at plan, before anything is created, with the same line the CLI prints."""
        problem = self.capacity_problem(recipe)
        if problem:
            return recipe.with_capacity(("on-demand",), source="CAPACITY"), problem
        return self.recipe(recipe), None

    def zones_for(self, recipe: Recipe) -> tuple[str, ...]:
        """The zones the recipe's TPUs may be in: every zone of ZONE for a GKE stack, which has TPU pools in
        each (recipes/placement.py); the first for a TPU VM, which lives in one zone."""
        return self.zones if recipe.is_gke else self.zones[:1]

    def for_recipe(self, recipe: Recipe, needs: Collection[str] | None = None) -> "Settings":
        """Check the rules that depend on the recipe, those of the settings in `needs` (default: every
        rule, as deploy needs); return self when they hold."""
        def needed(field: str) -> bool:
            return needs is None or field in needs

        if needed("reservation") and "reservation" in recipe.capacity and not self.reservation:
            raise UserError(
                f"RESERVATION is not set, but recipe '{recipe.name}' uses capacity 'reservation': "
                f"export RESERVATION=<your {recipe.shape.machine_type} reservation name>"
            )
        flex_start = recipe.tpu_facts.flex_start
        offerless = [zone for zone in self.zones_for(recipe) if flex_start and zone not in flex_start.zones] \
            if needed("zone") else []
        if needed("zone") and "flex-start" in recipe.capacity and offerless:
            raise UserError(
                f"ZONE '{offerless[0]}' offers no flex-start {recipe.shape.generation} TPUs, which recipe "
                f"'{recipe.name}' uses: pick one of {', '.join(flex_start.zones)} (and its REGION)"
            )
        if needed("authorized_cidr") and recipe.is_gke and not self.authorized_cidr:
            raise UserError(
                f"AUTHORIZED_CIDR is not set, but recipe '{recipe.name}' creates a GKE control plane: "
                "export AUTHORIZED_CIDR=<your address>/32 (there is no 0.0.0.0/0 default)"
            )
        return self


def _fail(spec: SettingSpec, rule: str) -> UserError:
    return UserError(f"{spec.env} {rule}")


def missing_settings(specs: Sequence[SettingSpec]) -> UserError:
    """The one line for settings a command needs and nobody set: every one at once, so one run shows the
    whole fix. The same line in every command (recipes/needs.py says which needs what)."""
    names, verb = _listed([spec.env for spec in specs]), "is" if len(specs) == 1 else "are"
    exports = " ".join(f"{spec.env}=<{spec.help}>" for spec in specs)
    return UserError(f"{names} {verb} not set: export {exports} or set "
                     f"{_listed([spec.field for spec in specs])} in {DEFAULT_CONFIG}")


def _missing(values: Mapping[str, str], needs: Collection[str]) -> list[SettingSpec]:
    """The specs of `needs` that `values` leaves unset, in SPECS order. `vm_name` is met by TPU_NAME or
    CLUSTER_NAME (named when neither is set); the rules (RESERVATION, AUTHORIZED_CIDR) are checked with the
    recipe, by Settings.for_recipe."""
    wanted = set(needs) - {"reservation", "authorized_cidr"}
    if "vm_name" in wanted:
        wanted.discard("vm_name")
        if not values.get("tpu_name"):
            wanted.add("cluster_name")
    return [spec for spec in SPECS if spec.field in wanted and not values.get(spec.field)]


def _check(values: Mapping[str, str], needs: Collection[str] = REQUIRED) -> dict[str, object]:
    """Validate raw strings and convert them to typed values: refuse what `needs` lacks, check every value
    that is set (needed or not), and leave the other required fields UNSET."""
    missing = _missing(values, needs)
    if missing:
        raise missing_settings(missing)
    checked: dict[str, object] = {}
    for spec in SPECS:
        raw = values.get(spec.field)
        if raw is None or raw == "":
            if spec.required:
                checked[spec.field] = UNSET
            elif spec.default is not None:
                checked[spec.field] = spec.default
            continue
        checked[spec.field] = raw.strip()

    project = checked["project"]
    if project is not UNSET and not _PROJECT.match(project):
        raise _fail(_BY_FIELD["project"], f"'{project}' is not a valid project id: 6-30 characters, lowercase "
                    "letters, digits and hyphens, starting with a letter and not ending with a hyphen")
    region = checked["region"]
    if region is not UNSET and not _REGION.match(region):
        raise _fail(_BY_FIELD["region"], f"'{region}' is not a region name like us-east5")
    if checked["zone"] is not UNSET:
        checked["zones"] = _check_zones(checked["zone"], None if region is UNSET else region)
        checked["zone"] = checked["zones"][0]
    cluster = checked["cluster_name"]
    if cluster is UNSET:
        pass
    elif len(cluster) > MAX_CLUSTER_NAME:
        raise _fail(_BY_FIELD["cluster_name"], f"'{cluster}' has {len(cluster)} characters; the limit is "
                    f"{MAX_CLUSTER_NAME} (GKE node pool and service account names derive from it)")
    elif not _DNS_1035.match(cluster):
        raise _fail(_BY_FIELD["cluster_name"], f"'{cluster}' is not a DNS-1035 label: lowercase letters, digits "
                    "and '-', starting with a letter and ending with a letter or digit")
    if checked["gcs_bucket"] is not UNSET:
        _check_bucket(checked["gcs_bucket"], _BY_FIELD["gcs_bucket"])
    if checked.get("state_bucket") is not None:
        _check_bucket(checked["state_bucket"], _BY_FIELD["state_bucket"])
        if checked["state_bucket"] == checked["gcs_bucket"]:
            # The artifacts stack creates GCS_BUCKET: its own state cannot live in a bucket that does not
            # exist before its first deploy, and destroying the stack would delete the state with it.
            raise _fail(_BY_FIELD["state_bucket"], f"'{checked['state_bucket']}' is GCS_BUCKET, the artifacts bucket a "
                        "stack manages: create a separate bucket for Terraform state (docs/stacks.md, 'State "
                        "backend') or unset TF_STATE_BUCKET for local state")
    reservation = checked.get("reservation")
    if reservation is not None and not _RESOURCE_NAME.match(reservation):
        raise _fail(_BY_FIELD["reservation"], f"'{reservation}' is not a reservation name: lowercase letters, "
                    "digits and '-', 1-63 characters, starting with a letter")
    cidrs = checked.get("authorized_cidr")
    if cidrs is not None:
        checked["authorized_cidr"] = _check_cidrs(cidrs)
    secret = checked["hf_token_secret"]
    if not _SECRET_NAME.match(secret):
        raise _fail(_BY_FIELD["hf_token_secret"], f"'{secret}' is not a Secret Manager secret id: 1-255 letters, "
                    "digits, '-' or '_'")
    capacity = checked.get("capacity")
    if capacity is not None:
        try:
            checked["capacity"] = parse_capacity(capacity)
        except ValueError as error:
            raise _fail(_BY_FIELD["capacity"], str(error)) from None
    capacity_wait = checked.get("capacity_wait")
    if capacity_wait is not None:
        try:
            checked["capacity_wait"] = parse_capacity_wait(capacity_wait)
        except ValueError as error:
            raise _fail(_BY_FIELD["capacity_wait"], str(error)) from None
    tpu_name = checked.get("tpu_name")
    if tpu_name is not None and not _RESOURCE_NAME.match(tpu_name):
        raise _fail(_BY_FIELD["tpu_name"], f"'{tpu_name}' is not an instance name: lowercase letters, digits "
                    "and '-', 1-63 characters, starting with a letter")
    return checked


def _check_zones(raw: str, region: str | None) -> tuple[str, ...]:
    """ZONE: one zone, or a comma-separated list in fallback order, every one in REGION (when a command
    reads REGION too, or it is set), none twice."""
    spec = _BY_FIELD["zone"]
    zones = [part.strip() for part in raw.split(",")]
    like = region or "us-east5"
    for zone in zones:
        if not zone:
            raise _fail(spec, f"'{raw}' has an empty item: list zones like {like}-b,{like}-a")
        zone_match = _ZONE.match(zone)
        if not zone_match:
            raise _fail(spec, f"'{zone}' is not a zone name like {like}-b")
        if region is not None and zone_match.group(1) != region:
            raise _fail(spec, f"'{zone}' is not in REGION '{region}': pick a zone named {region}-<letter>")
    repeated = next((zone for index, zone in enumerate(zones) if zone in zones[:index]), None)
    if repeated:
        raise _fail(spec, f"'{raw}' lists {repeated} twice: name each zone once, in fallback order")
    return tuple(zones)


def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def bucket_name_problem(bucket: str) -> str | None:
    """What breaks GCS bucket naming in `bucket` (a bare name), or None: one rule for GCS_BUCKET,
    TF_STATE_BUCKET and the gs:// URLs a command takes."""
    rule = ("GCS names are 3-63 characters of lowercase letters, digits, '-', '_' and '.', start and end with "
            "a letter or digit, and may not start with 'goog' or contain 'google'")
    if not _BUCKET.match(bucket) or bucket.startswith("goog") or "google" in bucket or ".." in bucket:
        return f"breaks GCS bucket naming: {rule}"
    try:
        ipaddress.ip_address(bucket)
    except ValueError:
        return None
    return "looks like an IP address, which GCS does not allow as a bucket name"


def _check_bucket(bucket: str, spec: SettingSpec) -> None:
    if bucket.startswith("gs://"):
        raise _fail(spec, f"'{bucket}' must be the bare bucket name, without gs://")
    problem = bucket_name_problem(bucket)
    if problem:
        raise _fail(spec, f"'{bucket}' {problem}")


def _check_cidrs(raw: str) -> tuple[str, ...]:
    items = [part.strip() for part in raw.split(",")]
    problem = authorized_cidrs_problem(items)
    if problem:
        raise _fail(_BY_FIELD["authorized_cidr"], problem)
    return tuple(str(ipaddress.ip_network(item)) for item in items)


# Settings whose value is a comma-separated list; a config file may give them as a TOML list of strings.
_LIST_FIELDS = {"authorized_cidr", "capacity", "zone"}


def _read_config(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{CONFIG_ENV} points to {path}, which does not exist: create it or unset {CONFIG_ENV}") from None
    except IsADirectoryError:
        raise UserError(f"{CONFIG_ENV} points to {path}, which is a directory: name the TOML file, e.g. "
                        f"{CONFIG_ENV}={path / DEFAULT_CONFIG}, or unset {CONFIG_ENV}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read as a text file ({error.__class__.__name__}: {error}): fix the file "
                        f"or unset {CONFIG_ENV}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path} is not valid TOML ({error}): fix the file or unset {CONFIG_ENV}") from None
    values: dict[str, str] = {}
    for key, value in data.items():
        if key.lower() in _SECRET_KEYS:
            raise UserError(f"{path} has a '{key}' key: tokens do not belong in config files; remove it and "
                            "store the token with `tpu-rl secret set` (it reads stdin)")
        if key not in _BY_FIELD:
            raise UserError(f"{path} has an unknown key '{key}' (known: {', '.join(_BY_FIELD)})")
        if key in _LIST_FIELDS and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            raise UserError(f"{path}: {key} must be {_expected_form(key)}, not a TOML {_toml_type(value)}")
        values[key] = value
    return values


def _expected_form(key: str) -> str:
    """How a config-file value is written, with the example's value (or the setting's own example)."""
    example = {"authorized_cidr": "203.0.113.7/32", "capacity": "flex-start"}.get(key) or EXAMPLE.get(key) or \
        _BY_FIELD[key].default or "..."
    if key in _LIST_FIELDS:
        return f'a string or a list of strings, e.g. {key} = "{example}" or {key} = ["{example}"]'
    return f'a string, e.g. {key} = "{example}"'


def _toml_type(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", list: "array", dict: "table"}.get(type(value), "date")


def load_settings(env: Mapping[str, str] | None = None, *, allow_example: bool = False,
                  needs: Collection[str] = REQUIRED) -> Settings:
    """Settings from the environment and config file, refusing in one line any of `needs` (the fields a
    command reads, recipes/needs.py; default: what synth needs) that nobody set.

    With nothing set at all and ``allow_example`` the embedded example is returned, so that synth works
    on a fresh machine; its values can never reach a cloud.
    """
    env = os.environ if env is None else env
    config_path = Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else DEFAULT_CONFIG
    from_file = _read_config(config_path) if env.get(CONFIG_ENV) or config_path.is_file() else {}
    from_env = {spec.field: env[spec.env] for spec in SPECS if env.get(spec.env)}
    values = {**from_file, **from_env}
    source = "environment" if from_env else str(config_path) if from_file else "example"
    if allow_example and set(values) <= EXAMPLE_OVERLAYS:
        values = {**EXAMPLE, **values}
        source = "example"
    checked = _check(values, needs)
    return Settings(**checked, source=source)


def example_settings() -> Settings:
    """The embedded example, whatever the environment says (for tests and docs)."""
    return Settings(**_check(dict(EXAMPLE)), source="example")
