"""Per-user settings: where things go in the user's cloud.

Each setting is read from its environment variable (the names the tutorials use: PROJECT, REGION, ...)
when set, else from its key in an optional TOML config file (tpu-rl.toml, or the file TPU_RL_CONFIG
names): merged key by key. In the file every key is a known setting, every value a string (or a list of
strings for a list setting), and never a token. Only when neither sets anything may the embedded example
stand in. Every value is checked once (recipes/settings/checks.py); the error names the setting and the
rule (docs/settings.md). Which settings exist: recipes/settings/specs.py.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping

from tpu_rl.recipes.capacity.modes import (DEFAULT_WAITS, CapacityMode, WaitKey, uses_queued_provisioning,
                                           uses_reservation)
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.settings.checks import authorized_cidrs_warning, check_values
from tpu_rl.recipes.settings.specs import (BY_FIELD, CONFIG_ENV, DEFAULT_CONFIG, DEFAULT_HF_TOKEN_SECRET, EXAMPLE,
                                           EXAMPLE_OVERLAYS, EXAMPLE_PROJECT, REQUIRED, SPECS, UNSET, VM_STOPS,
                                           missing_settings)
from tpu_rl.recipes.user_text import read_text_file


# Keys that would put a secret into a file we read; the token belongs in Secret Manager.
_SECRET_KEYS = {"hf_token", "hf_access_token", "token"}

# Settings whose value is a comma-separated list; a config file may give them as a TOML list of strings.
_LIST_FIELDS = {"authorized_cidr", "capacity", "zone"}


def read_config(path: Path, named: bool = True) -> dict[str, str]:
    """The file's settings. `named`: the path came from TPU_RL_CONFIG (so unsetting it is a way out),
    else it is ./tpu-rl.toml, read when it exists."""
    way_out = f" or unset {CONFIG_ENV}" if named else ""
    if not path.exists():
        raise UserError(f"{CONFIG_ENV} points to {path}, which does not exist: create it or unset {CONFIG_ENV}")
    if path.is_dir():
        if not named:
            raise UserError(f"{path} is a directory, not the TOML file of settings tpu-rl reads from the working "
                            f"directory: rename it, or point {CONFIG_ENV} at your settings file")
        raise UserError(f"{CONFIG_ENV} points to {path}, which is a directory: name the TOML file, e.g. "
                        f"{CONFIG_ENV}={path / DEFAULT_CONFIG}, or unset {CONFIG_ENV}")
    # a binary file, a device (TPU_RL_CONFIG=/dev/zero) or a huge one: one line (recipes/user_text.py)
    text = read_text_file(path, CONFIG_ENV if named else "the settings file", f"fix the file{way_out}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path} is not valid TOML ({error}): fix the file{way_out}") from None
    values: dict[str, str] = {}
    for key, value in data.items():
        if key.lower() in _SECRET_KEYS:
            raise UserError(f"{path} has a '{key}' key: tokens do not belong in config files; remove it and "
                            "store the token with `tpu-rl secret set` (it reads stdin)")
        if key not in BY_FIELD:
            raise UserError(f"{path} has an unknown key '{key}' (known: {', '.join(BY_FIELD)})")
        if key in _LIST_FIELDS and isinstance(value, list):
            value = _joined(path, key, value)
        if not isinstance(value, str):
            raise UserError(f"{path}: {key} must be {_expected_form(key)}, not a TOML {_toml_type(value)}")
        values[key] = value
    return values


def _joined(path: Path, key: str, items: list) -> str:
    """A list setting's TOML array as the comma-separated string; one line naming an item that is no string."""
    if not items:
        raise UserError(f"{path}: {key} is an empty list: give at least one value, as {_expected_form(key)}")
    for item in items:
        if not isinstance(item, str):
            raise UserError(f"{path}: {key} holds {item!r}, a TOML {_toml_type(item)}: write every item as a string "
                            f"(in quotes), as {_expected_form(key)}")
    return ",".join(items)


def _expected_form(key: str) -> str:
    """How a config-file value is written, with the example's value (or the setting's own example)."""
    example = {"authorized_cidr": "203.0.113.7/32", "capacity": CapacityMode.FLEX_START.value}.get(key) or \
        EXAMPLE.get(key) or BY_FIELD[key].default or "..."
    if key in _LIST_FIELDS:
        return f'a string or a list of strings, e.g. {key} = "{example}" or {key} = ["{example}"]'
    return f'a string, e.g. {key} = "{example}"'


def _toml_type(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", list: "array", dict: "table"}.get(type(value), "date")


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
    vm_after_run: str = VM_STOPS  # VM_STOPS or VM_STAYS (recipes/settings/specs.py)
    state_bucket: str | None = None
    capacity: tuple[CapacityMode, ...] | None = None  # None: each recipe's own capacity list
    # (mode, seconds) for every mode: how long `run` waits for capacity before the next (recipes/capacity/modes.py)
    capacity_wait: tuple[tuple[WaitKey, float], ...] = DEFAULT_WAITS
    source: str = "environment"
    zones: tuple[str, ...] = ()  # every zone of ZONE, in fallback order (recipes/capacity/placement.py); zone first

    def __post_init__(self) -> None:
        zone = object.__getattribute__(self, "zone")
        if not object.__getattribute__(self, "zones"):
            object.__setattr__(self, "zones", UNSET if zone is UNSET else (zone,))

    def __getattribute__(self, name: str):
        """A field the command's needs left out (recipes/settings/specs.py) and nobody set is refused with the line
        of a missing setting, never read as a value: a command that reads more than its platform's `needs` says
        fails its test (tests/test_settings_needs.py) instead of naming a wrong cluster or bucket."""
        value = object.__getattribute__(self, name)
        if value is UNSET:
            raise missing_settings([BY_FIELD["zone" if name == "zones" else name]])
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
        (tpu_rl.stacks.app.build_app) and the CLI both take their recipes from here.

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
        # Node pools fall back through the list; one provisioning model takes the first it can use.
        return recipe.with_capacity(recipe.platform_facts.capacity_from(self.capacity), source="CAPACITY")

    def capacity_problem(self, recipe: Recipe) -> str | None:
        """Why CAPACITY leaves `recipe` nothing to run on (a TPU VM has no flex-start), or None. One rule for
        every command: the commands of that recipe refuse with this line, and synth still writes its stack,
        whose plan fails with it (`deployable`), so a GKE-only user need not name a VM mode."""
        if self.capacity is None:
            return None
        usable = recipe.platform_facts.capacity
        if any(mode in usable for mode in self.capacity):
            return None
        listed = ",".join(self.capacity)
        label = recipe.platform_facts.label
        return (f"CAPACITY '{listed}' has no mode the {label} of recipe '{recipe.name}' can use "
                f"({', '.join(usable)}): add one after the others, e.g. CAPACITY={listed},spot gives the VM spot")

    def deployable(self, recipe: Recipe) -> tuple[Recipe, str | None]:
        """`recipe` as synth writes its stack, and why its plan must fail (None: it may be planned).

        A recipe CAPACITY leaves nothing to run on is written as on-demand, which needs no reservation, only
        so that its stack is complete: every resource then carries a precondition with the reason, so
        `cdktf deploy` stops at plan, before anything is created, with the same line the CLI prints."""
        problem = self.capacity_problem(recipe)
        if problem:
            return recipe.with_capacity((CapacityMode.ON_DEMAND,), source="CAPACITY"), problem
        return self.recipe(recipe), None

    def zones_for(self, recipe: Recipe) -> tuple[str, ...]:
        """The zones the recipe's TPUs may be in: every zone of ZONE for a GKE stack, which has TPU pools in
        each (recipes/capacity/placement.py); the first for a TPU VM, which lives in one zone."""
        return recipe.platform_facts.zones_used(self.zones)

    def for_recipe(self, recipe: Recipe, needs: Collection[str] | None = None) -> "Settings":
        """Check the rules that depend on the recipe, those of the settings in `needs` (default: every
        rule, as deploy needs); return self when they hold."""
        def needed(field: str) -> bool:
            return needs is None or field in needs

        if needed("reservation") and uses_reservation(recipe.capacity) and not self.reservation:
            raise UserError(
                f"RESERVATION is not set, but recipe '{recipe.name}' uses capacity 'reservation': "
                f"export RESERVATION=<your {recipe.shape.machine_type} reservation name>"
            )
        flex_start = recipe.tpu_facts.flex_start
        offerless = [zone for zone in self.zones_for(recipe) if flex_start and zone not in flex_start.zones] \
            if needed("zone") else []
        if flex_start and offerless and uses_queued_provisioning(recipe.capacity):
            raise UserError(
                f"ZONE '{offerless[0]}' offers no flex-start {recipe.shape.generation} TPUs, which recipe "
                f"'{recipe.name}' uses: pick one of {', '.join(flex_start.zones)} (and its REGION)"
            )
        if needed("authorized_cidr") and recipe.platform_facts.deploy_needs("authorized_cidr") \
                and not self.authorized_cidr:
            raise UserError(
                f"AUTHORIZED_CIDR is not set, but recipe '{recipe.name}' creates a {recipe.platform_facts.label} "
                "control plane: export AUTHORIZED_CIDR=<your address>/32 (there is no 0.0.0.0/0 default)"
            )
        return self

def deploy_settings(recipes: Iterable[Recipe], env: Mapping[str, str] | None = None) -> Settings:
    """Settings for synth, every one the stacks need and nobody set refused in one line: the five of
    REQUIRED, RESERVATION when a recipe's capacity (after CAPACITY) takes a reservation, AUTHORIZED_CIDR
    when a recipe is a GKE one. Nothing set at all: the embedded example (`is_example`)."""
    recipes = list(recipes)
    settings = load_settings(env, allow_example=True, needs=())
    missing = [BY_FIELD[field] for field in REQUIRED if object.__getattribute__(settings, field) is UNSET]
    runs = [settings.with_capacity(recipe) for recipe in recipes if not settings.capacity_problem(recipe)]
    if not settings.reservation and any(uses_reservation(recipe.capacity) for recipe in runs):
        missing.append(BY_FIELD["reservation"])
    if not settings.authorized_cidr and any(recipe.platform_facts.deploy_needs("authorized_cidr") for recipe in runs):
        missing.append(BY_FIELD["authorized_cidr"])
    if len(missing) > 1 or (missing and missing[0].required):
        raise missing_settings(missing)
    for recipe in recipes:  # one rule alone: its own line, which names the recipe (Settings.for_recipe)
        settings.deployable(recipe)
    return settings


EXAMPLE_NOTICE = ("no settings are set, so synth uses the embedded example (PROJECT={project}), which only "
                  "synthesizes and can never deploy: export your own (README, step 1) to deploy")


def load_settings(env: Mapping[str, str] | None = None, *, allow_example: bool = False,
                  needs: Collection[str] = REQUIRED) -> Settings:
    """Settings from the environment and config file, refusing in one line any of `needs` (the fields a
    command reads, recipes/settings/specs.py; default: what synth needs) that nobody set.

    With nothing set at all and ``allow_example`` the embedded example is returned, so that synth works
    on a fresh machine; its values can never reach a cloud.
    """
    env = os.environ if env is None else env
    config_path = Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else DEFAULT_CONFIG
    named = bool(env.get(CONFIG_ENV))
    from_file = read_config(config_path, named) if named or config_path.exists() else {}
    from_env = {spec.field: env[spec.env] for spec in SPECS if env.get(spec.env)}
    values = {**from_file, **from_env}
    source = "environment" if from_env else str(config_path) if from_file else "example"
    if allow_example and set(values) <= EXAMPLE_OVERLAYS:
        values = {**EXAMPLE, **values}
        source = "example"
    text, parsed = check_values(values, needs)
    return Settings(**text, **parsed, source=source)


def example_settings() -> Settings:
    """The embedded example, whatever the environment says (for tests and docs)."""
    text, parsed = check_values(dict(EXAMPLE))
    return Settings(**text, **parsed, source="example")
