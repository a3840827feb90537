"""Typed recipes. The TOML table is parsed once, here, and every rule is checked at load time.

Code further down (stacks, manifests, the CLI) trusts these types and only reads derived properties;
it never recomputes chips or hosts itself.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from recipes.errors import UserError

CapacityMode = Literal["reservation", "flex-start", "spot", "on-demand"]
CAPACITY_MODES: tuple[CapacityMode, ...] = ("reservation", "flex-start", "spot", "on-demand")
Platform = Literal["gke", "vm"]
# A TPU VM is one VM with one provisioning model: no flex-start node pool and no queue to fall back in.
PLATFORM_CAPACITY: dict[str, tuple[CapacityMode, ...]] = {
    "gke": CAPACITY_MODES,
    "vm": ("reservation", "spot", "on-demand"),
}
Step = Literal["convert", "train", "export"]
STEPS: tuple[Step, ...] = ("convert", "train", "export")

_RECIPE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,18}[a-z0-9]$")
# The override keys train_rl multiplies with num_batches into its number of steps. MaxText 0.2.4's
# pyconfig also accepts a nested model's field by its bare name, so `num_iterations=2` sets
# rl.num_iterations as well (configs/pyconfig.py with RLConfig in configs/types.py).
TRAIN_STEP_FACTORS = ("rl.num_iterations", "train_fraction", "num_epoch")
_FACTOR_ALIASES = {"rl.num_iterations": ("rl.num_iterations", "num_iterations")}
_BINARY_QUANTITY = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|Ti)$")
_BINARY_FACTORS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_OVERRIDE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*=.*$", re.DOTALL)


def same_setting(key: str) -> tuple[str, ...]:
    """Every spelling of the setting an override key sets: `num_iterations` and `rl.num_iterations` are one
    in MaxText 0.2.4 (see TRAIN_STEP_FACTORS)."""
    return next((names for names in _FACTOR_ALIASES.values() if key in names), (key,))


def quantity_bytes(quantity: str) -> int:
    """Bytes of a Kubernetes memory quantity with a binary suffix, e.g. 190Gi."""
    match = _BINARY_QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"'{quantity}' is not a memory size like 190Gi")
    return int(match.group(1)) * _BINARY_FACTORS[match.group(2)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlexStartFacts(_Strict):
    """Where and how GKE offers a generation through flex-start (Dynamic Workload Scheduler)."""

    zones: tuple[str, ...]
    min_gke_version: str  # the cluster version from which GKE creates flex-start TPU node pools
    max_run_hours: int = Field(ge=1)  # the longest a flex-start node may run (maxRunDurationSeconds)
    source: str


class QuotaMetrics(_Strict):
    """The Compute Engine regional quotas a generation's TPU hosts draw on (regions.get `quotas[].metric`,
    in chips): preemptible for spot and flex-start, on-demand for on-demand. `confirmed` is false while the
    names come from material other than Google's own API reference; preflight then treats a metric the
    region does not list as unreadable (a warning), not as zero."""

    preemptible: str
    on_demand: str
    confirmed: bool
    source: str


class TpuGeneration(_Strict):
    """Facts about one TPU generation: which topologies and machine types exist."""

    topologies: tuple[str, ...]
    gke_accelerator: str
    pathways_instance_prefix: str
    multi_host_machine_type: str
    machine_types: dict[str, int]  # machine type -> chips per VM
    flex_start: FlexStartFacts | None = None  # None: not offered through flex-start
    quota: QuotaMetrics | None = None  # None: preflight knows no quota metric for it


class MachineSize(_Strict):
    """vCPUs, memory and boot disk type of one machine type; Kueue quotas are derived from these."""

    vcpus: int = Field(ge=1)
    memory_gib: int = Field(ge=1)
    disk_type: str  # boot disk type the machine series accepts (N4, C4D and ct6e take only Hyperdisk)


class MaxTextRelease(_Strict):
    image: str
    pip: str
    python: str
    # The JAX version inside `image`, and the Pathways server/proxy tag built for that client JAX. Google
    # names the tags jax-<version> or <date>-jax_<version>; the IFRT proxy refuses clients outside a
    # narrow window, so the tag must name exactly `jax`.
    jax: str
    pathways_tag: str
    # The config defaults of the keys train_rl multiplies into its number of steps (configs/post_train/rl.yml
    # of the release), for the recipes that do not override them.
    train_step_defaults: dict[str, float]
    # The rl.yml defaults of the keys that size the held-out evaluation (recipes/evaluation.py).
    eval_defaults: dict[str, float]

    @field_validator("jax")
    @classmethod
    def _release_number(cls, jax: str) -> str:
        if not re.fullmatch(r"\d+\.\d+\.\d+", jax):
            raise ValueError(f"'{jax}' is not a JAX release number like 0.11.0")
        return jax

    @model_validator(mode="after")
    def _tag_serves_this_jax(self) -> "MaxTextRelease":
        names = re.fullmatch(r"(?:jax-|\d{8}(?:_RC\d+)?-jax_)(\d+\.\d+\.\d+)", self.pathways_tag)
        if names is None:
            raise ValueError(f"pathways_tag '{self.pathways_tag}' is not a Pathways tag like jax-0.11.0 or "
                             "20260911-jax_0.11.0 (never latest)")
        if names.group(1) != self.jax:
            raise ValueError(f"pathways_tag '{self.pathways_tag}' serves jax {names.group(1)}, but the image has "
                             f"jax {self.jax}: pick a tag built for jax {self.jax}")
        return self

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str) -> str:
        if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
            raise ValueError("must be pinned to a tag other than :latest")
        return image


class PathwaysRepositories(_Strict):
    """Where the Pathways images live; the tag comes from the MaxText release (its JAX version)."""

    server_image: str
    proxy_image: str


class PathwaysImages(BaseModel):
    """The Pathways server and proxy images for one MaxText release, both with the release's tag."""

    model_config = ConfigDict(frozen=True)

    server_image: str
    proxy_image: str
    tag: str
    jax: str  # the client JAX the tag serves, which the train head checks against the image's

    @property
    def server(self) -> str:
        return f"{self.server_image}:{self.tag}"

    @property
    def proxy(self) -> str:
        return f"{self.proxy_image}:{self.tag}"


class SourcePatch(_Strict):
    """A named edit of installed source that a seed applies before training."""

    name: str = ""
    description: str
    module: str | None = None  # patch the file of this importable module ...
    path: str | None = None  # ... or this absolute path inside the container
    regex: bool = False
    replacements: tuple[tuple[str, str], ...]
    maxtext_versions: tuple[str, ...]
    setting_from: str | None = None
    setting_env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_target(self) -> "SourcePatch":
        if (self.module is None) == (self.path is None):
            raise ValueError("give exactly one of module or path")
        return self


class ModelSpec(_Strict):
    maxtext_name: str
    hf_repo: str
    tokenizer: str
    scan_layers: bool
    use_multimodal: bool = False


class TpuSpec(_Strict):
    generation: str
    topology: str
    machine_type: str
    slices: int = Field(ge=1)
    # How long a flex-start slice may live (the ProvisioningRequest's maxRunDurationSeconds), at most the
    # generation's limit; it bounds a train step that hangs. Only read when the capacity includes flex-start.
    flex_start_max_run_hours: int | None = Field(default=None, ge=1)


class RlSpec(_Strict):
    num_batches: int = Field(ge=1)
    # train_rl saves a checkpoint every this many steps (and the last one on close); a preempted spot or
    # flex-start run resumes from the latest, so it loses at most this many steps.
    checkpoint_period: int = Field(ge=1)
    # The learning-rate schedule's length as a multiple of the run's train steps: tpu-rl passes
    # learning_rate_schedule_steps = ratio x train_steps unless an override sets it (recipes/schedule.py
    # has why). 1: warmup, then cosine decay to 0 at the run's last step (MaxText 0.2.4's own default).
    learning_rate_schedule_ratio: float = Field(default=1.0, gt=0)
    overrides: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    pathways_env: dict[str, str] = Field(default_factory=dict)
    # Memory limit of the Pathways head's train_rl container, a Kubernetes quantity with a binary
    # suffix (seed 000 capped it at 190G through the cgroup, which reads G as GiB).
    memory_max: str | None = None

    @field_validator("overrides")
    @classmethod
    def _key_value(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        for item in overrides:
            if not _OVERRIDE.match(item):
                raise ValueError(f"'{item[:40]}' is not key=value")
        return overrides

    @field_validator("overrides")
    @classmethod
    def _rewards_once(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        from recipes.user_files import check_reward_names

        for item in overrides:
            key, _, value = item.partition("=")
            if key in ("reward_functions", "reward.reward_functions"):  # split as train_rl.build_reward_fns does
                try:
                    check_reward_names([n.strip() for n in value.split(",") if n.strip()], item)
                except UserError as error:
                    raise ValueError(str(error)) from None
        return overrides

    @field_validator("memory_max")
    @classmethod
    def _binary_quantity(cls, memory_max: str | None) -> str | None:
        if memory_max is not None and not _BINARY_QUANTITY.match(memory_max):
            raise ValueError(f"'{memory_max}' is not a memory size like 190Gi (a whole number with Ki, Mi, Gi "
                             "or Ti)")
        return memory_max

    def override(self, key: str) -> str | None:
        """The value an override gives `key`, or None."""
        for item in self.overrides:
            name, _, value = item.partition("=")
            if name == key:
                return value
        return None

    @field_validator("overrides")
    @classmethod
    def _checkpoints_stay_on(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        for item in overrides:
            key, _, value = item.partition("=")
            if key == "enable_checkpointing" and value.strip().lower() in ("false", "0", "no"):
                raise ValueError("enable_checkpointing=false leaves no checkpoint for export to convert (and "
                                 "nothing to resume from); remove it")
        return overrides


class Durations(_Strict):
    convert: int = Field(ge=1)
    train: int = Field(ge=1)
    export: int = Field(ge=1)


class Shape(BaseModel):
    """A TPU slice shape with everything derived from it. Built only by :func:`derive_shape`."""

    model_config = ConfigDict(frozen=True)

    generation: str
    topology: str
    machine_type: str
    slices: int
    chips_per_vm: int
    chips_per_slice: int
    gke_accelerator: str
    pathways_instance_prefix: str

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // self.chips_per_vm

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def total_hosts(self) -> int:
        return self.hosts_per_slice * self.slices

    @property
    def accelerator_type(self) -> str:
        """The Cloud TPU accelerator type, e.g. v6e-32."""
        return f"{self.generation}-{self.chips_per_slice}"

    @property
    def pathways_instance_type(self) -> str:
        return f"{self.pathways_instance_prefix}:{self.topology}"

    @property
    def chips_per_host_bounds(self) -> str:
        """TPU_CHIPS_PER_HOST_BOUNDS for a single-host VM, e.g. 2,4,1 for 2x4."""
        return ",".join(self.topology.split("x") + ["1"])


def derive_shape(tpu: TpuSpec, generations: dict[str, TpuGeneration]) -> Shape:
    """Check a TPU spec against the generation's facts and derive chips and hosts from it."""
    facts = generations.get(tpu.generation)
    if facts is None:
        raise ValueError(f"tpu.generation '{tpu.generation}' is unknown (known: {', '.join(generations)})")
    if tpu.topology not in facts.topologies:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' is not a {tpu.generation} topology "
            f"(valid: {', '.join(facts.topologies)})"
        )
    chips_per_vm = facts.machine_types.get(tpu.machine_type)
    if chips_per_vm is None:
        raise ValueError(
            f"tpu.machine_type '{tpu.machine_type}' is not a {tpu.generation} machine type "
            f"(valid: {', '.join(facts.machine_types)})"
        )
    chips_per_slice = math.prod(int(side) for side in tpu.topology.split("x"))
    if chips_per_slice % chips_per_vm:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' has {chips_per_slice} chips, which is not a whole number of "
            f"{tpu.machine_type} hosts ({chips_per_vm} chips each); pick a topology with a multiple of "
            f"{chips_per_vm} chips or another machine type"
        )
    if chips_per_slice // chips_per_vm > 1 and tpu.machine_type != facts.multi_host_machine_type:
        raise ValueError(
            f"tpu.topology '{tpu.topology}' needs {chips_per_slice // chips_per_vm} hosts of "
            f"{tpu.machine_type}; multi-host {tpu.generation} slices need "
            f"tpu.machine_type = '{facts.multi_host_machine_type}'"
        )
    return Shape(
        generation=tpu.generation,
        topology=tpu.topology,
        machine_type=tpu.machine_type,
        slices=tpu.slices,
        chips_per_vm=chips_per_vm,
        chips_per_slice=chips_per_slice,
        gke_accelerator=facts.gke_accelerator,
        pathways_instance_prefix=facts.pathways_instance_prefix,
    )


def parse_capacity(value: object) -> tuple[CapacityMode, ...]:
    """'reservation,flex-start' or ["spot", "on-demand"] -> an ordered tuple of known, distinct modes."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise ValueError("must be a capacity mode or a comma-separated list of them")
    modes = [mode for mode in (str(item).strip() for item in items) if mode]
    unknown = [mode for mode in modes if mode not in CAPACITY_MODES]
    if unknown or not modes:
        raise ValueError(f"'{','.join(modes)}' names {', '.join(repr(m) for m in unknown) or 'no mode'}: use one "
                         f"or an ordered comma-separated list of {', '.join(CAPACITY_MODES)}")
    if len(set(modes)) != len(modes):
        raise ValueError(f"'{','.join(modes)}' names a mode twice")
    return tuple(modes)  # type: ignore[return-value]


class RecipeEntry(_Strict):
    """One [recipes.<name>] table as written in recipes.toml."""

    description: str
    platform: Platform
    pathways: bool
    # The default capacity, or an ordered fallback list (Kueue tries them in order); the CAPACITY setting
    # overrides it per user.
    capacity: tuple[CapacityMode, ...]
    maxtext_version: str
    cpu_machine_type: str | None = None
    durations_minutes: Durations
    model: ModelSpec
    tpu: TpuSpec
    rl: RlSpec

    @field_validator("capacity", mode="before")
    @classmethod
    def _capacity_list(cls, value: object) -> tuple[CapacityMode, ...]:
        return parse_capacity(value)

    @model_validator(mode="after")
    def _platform_rules(self) -> "RecipeEntry":
        if self.platform == "gke" and not self.cpu_machine_type:
            raise ValueError("cpu_machine_type is required for platform 'gke' (conversion and the Pathways head run there)")
        if self.platform == "vm" and self.pathways:
            raise ValueError("pathways needs platform 'gke'; a single TPU VM runs JAX directly")
        if self.platform == "vm" and self.tpu.slices != 1:
            raise ValueError("tpu.slices must be 1 for platform 'vm'")
        return self


class Recipe(BaseModel):
    """A validated recipe with its shape, MaxText release and patches resolved."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    platform: Platform
    pathways: bool
    capacity: tuple[CapacityMode, ...]  # in the order Kueue tries them
    maxtext_version: str
    maxtext: MaxTextRelease
    pathways_images: PathwaysImages
    cpu_machine_type: str | None
    cpu_machine: MachineSize | None
    tpu_host: MachineSize
    durations_minutes: Durations
    model: ModelSpec
    shape: Shape
    rl: RlSpec
    patches: tuple[SourcePatch, ...]

    tpu_facts: TpuGeneration
    flex_start_max_run_hours: int | None = None
    # The run this recipe trains (recipes/runs.py): the name `--run` chose, or None for the name derived
    # from what changes the trained weights; and the `--set` items already merged into rl.overrides.
    run: str | None = None
    sets: tuple[str, ...] = ()
    # --rewards and --data-processor files (recipes/user_files.py UserFile), mounted in the train head.
    user_files: tuple[Any, ...] = ()
    # What the train step loads instead of the conversion (jobs/evaluate.py: `tpu-rl eval` loads the
    # evaluated run's checkpoint params); None: the conversion (paths.converted_items).
    load_parameters: str | None = None

    @property
    def is_gke(self) -> bool:
        return self.platform == "gke"

    def with_capacity(self, capacity: tuple[CapacityMode, ...], source: str) -> "Recipe":
        """This recipe with another capacity list, checked against its platform and TPU generation."""
        check_capacity(self.name, self.platform, capacity, self.tpu_facts, self.flex_start_max_run_hours, source)
        return self.model_copy(update={"capacity": capacity})

    @property
    def steps_per_batch(self) -> float:
        """rl.num_iterations x train_fraction x num_epoch: train_steps is int(num_batches x this)."""
        product = 1.0
        for key in TRAIN_STEP_FACTORS:
            spellings = [name for name in _FACTOR_ALIASES.get(key, (key,)) if self.rl.override(name) is not None]
            if len(spellings) > 1:
                raise UserError(f"recipe '{self.name}': rl.overrides sets {key} twice ({' and '.join(spellings)}); "
                                "keep one")
            given = self.rl.override(spellings[0]) if spellings else None
            try:
                product *= float(given) if given is not None else self.maxtext.train_step_defaults[key]
            except ValueError:
                raise UserError(f"recipe '{self.name}': rl.overrides sets {key}={given}, which is not a number") from None
        return product

    @property
    def train_steps(self) -> int:
        """The steps train_rl runs: int(num_batches x rl.num_iterations x train_fraction x num_epoch).

        As MaxText computes it (0.2.4: configs/types.py, RLConfig's train_steps; 0.2.3:
        trainers/post_train/rl/train_rl.py, get_max_train_steps), with each factor from rl.overrides or
        else the release's config default. An upper bound: train_rl drops long prompts before it takes
        its num_batches x batch_size items, so it can stop below (scripts/cloud/gcs.py TrainedCheckpoint);
        tunix saves the step it reached on close, whatever checkpoint_period is."""
        product = float(self.rl.num_batches) * self.steps_per_batch
        steps = int(product)
        if steps < 1:
            raise UserError(f"recipe '{self.name}': num_batches x {' x '.join(TRAIN_STEP_FACTORS)} gives {steps} "
                            "training steps; raise num_batches or train_fraction")
        return steps

    @property
    def last_step(self) -> int:
        """The last step train_rl can reach (an upper bound); export converts the step it did reach."""
        return self.train_steps


def check_capacity(name: str, platform: str, capacity: tuple[CapacityMode, ...], facts: TpuGeneration,
                   max_run_hours: int | None, source: str) -> None:
    """The rules a capacity list must meet for a recipe; UserError naming `source` (the field or setting)."""
    where = f"{source} '{','.join(capacity)}' for recipe '{name}'"
    allowed = PLATFORM_CAPACITY[platform]
    refused = [mode for mode in capacity if mode not in allowed]
    if refused:
        raise UserError(f"{where}: a TPU VM takes one of {', '.join(allowed)}, not {', '.join(refused)} "
                        "(flex-start and fallback lists need a GKE recipe)")
    if platform == "vm" and len(capacity) > 1:
        raise UserError(f"{where}: a TPU VM has one provisioning model, so name one mode")
    if facts.flex_start and max_run_hours and max_run_hours > facts.flex_start.max_run_hours:
        raise UserError(f"recipe '{name}': tpu.flex_start_max_run_hours is {max_run_hours}; flex-start nodes run "
                        f"at most {facts.flex_start.max_run_hours} hours")
    if "flex-start" in capacity:
        if facts.flex_start is None:
            raise UserError(f"{where}: TPU {facts.gke_accelerator} is not offered through flex-start")
        if max_run_hours is None:
            raise UserError(f"{where}: flex-start needs tpu.flex_start_max_run_hours (how long a node may run)")


class RecipeFile(_Strict):
    tpu: dict[str, TpuGeneration]
    maxtext: dict[str, MaxTextRelease]
    pathways: PathwaysRepositories
    recipes: dict[str, RecipeEntry]
    patches: dict[str, SourcePatch] = Field(default_factory=dict)
    machines: dict[str, MachineSize] = Field(default_factory=dict)


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


def build_recipes(table: dict, source: str = "recipes.toml") -> dict[str, Recipe]:
    """Validate a parsed recipe table and return the recipes by name.

    Raises :class:`UserError` naming the recipe, the field and the rule on the first problem.
    """
    try:
        parsed = RecipeFile.model_validate(table)
    except ValidationError as error:
        raise UserError(f"{source}: {_first_error(error)}") from None

    recipes: dict[str, Recipe] = {}
    for name, entry in parsed.recipes.items():
        where = f"{source}: recipe '{name}'"
        if not _RECIPE_NAME.match(name):
            raise UserError(f"{where}: the name must be 2-20 lowercase letters, digits or '-' (it is a stack name)")
        release = parsed.maxtext.get(entry.maxtext_version)
        if release is None:
            raise UserError(
                f"{where}: maxtext_version '{entry.maxtext_version}' has no [maxtext.\"{entry.maxtext_version}\"] "
                f"entry (known: {', '.join(parsed.maxtext)})"
            )
        try:
            shape = derive_shape(entry.tpu, parsed.tpu)
        except ValueError as error:
            raise UserError(f"{where}: {error}") from None
        sizes = {}
        named = (("tpu.machine_type", entry.tpu.machine_type), ("cpu_machine_type", entry.cpu_machine_type))
        for field, machine_type in named:
            if machine_type is not None and machine_type not in parsed.machines:
                raise UserError(f"{where}: {field} '{machine_type}' has no [machines.\"{machine_type}\"] entry "
                                "(its vcpus and memory_gib size the Kueue quota)")
            sizes[field] = parsed.machines.get(machine_type) if machine_type else None
        patches = []
        for patch_name in entry.rl.patches:
            patch = parsed.patches.get(patch_name)
            if patch is None:
                raise UserError(f"{where}: rl.patches names '{patch_name}', which has no [patches.{patch_name}] entry")
            patches.append(patch.model_copy(update={"name": patch_name}))
        recipes[name] = Recipe(
            name=name,
            description=entry.description,
            platform=entry.platform,
            pathways=entry.pathways,
            capacity=entry.capacity,
            maxtext_version=entry.maxtext_version,
            maxtext=release,
            pathways_images=PathwaysImages(**parsed.pathways.model_dump(), tag=release.pathways_tag,
                                           jax=release.jax),
            cpu_machine_type=entry.cpu_machine_type,
            cpu_machine=sizes["cpu_machine_type"],
            tpu_host=sizes["tpu.machine_type"],
            durations_minutes=entry.durations_minutes,
            model=entry.model,
            shape=shape,
            rl=entry.rl,
            patches=tuple(patches),
            tpu_facts=parsed.tpu[entry.tpu.generation],
            flex_start_max_run_hours=entry.tpu.flex_start_max_run_hours,
        )
        check_capacity(name, entry.platform, entry.capacity, parsed.tpu[entry.tpu.generation],
                       entry.tpu.flex_start_max_run_hours, f"{source}: capacity")
        recipes[name].train_steps  # noqa: B018 -- refuses overrides that leave no training step, at load
    return recipes
