"""One [recipes.<name>] table as written in recipes.toml: its sections (model, tpu, rl, durations) and the
rules each checks alone; the steps of a pipeline; the override keys that size training."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tpu_rl.recipes.capacity.modes import CapacityMode, parse_capacity
from tpu_rl.recipes.catalog.facts import exportable_on_vm
from tpu_rl.recipes.catalog.strict import Strict
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.platforms import PLATFORMS, TrainMode, platforms_where
from tpu_rl.recipes.platforms.facts import StepRunner
from tpu_rl.recipes.runs.reward_names import check_reward_names

Step = Literal["convert", "train", "export"]
STEPS: tuple[Step, ...] = ("convert", "train", "export")

# The override keys train_rl multiplies with num_batches into its number of steps. MaxText 0.2.4's
# pyconfig also accepts a nested model's field by its bare name, so `num_iterations=2` sets
# rl.num_iterations as well (configs/pyconfig.py with RLConfig in configs/types.py).
TRAIN_STEP_FACTORS = ("rl.num_iterations", "train_fraction", "num_epoch")
_FACTOR_ALIASES = {"rl.num_iterations": ("rl.num_iterations", "num_iterations")}
_BINARY_QUANTITY = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|Ti)$")
_BINARY_FACTORS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
OVERRIDE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*=.*$", re.DOTALL)
XLA_FLAG = re.compile(r"^--(xla_[a-z0-9_]+)=([A-Za-z0-9_.,:-]+)$")


def _offering(mode: TrainMode) -> str:
    """The platforms that train in `mode`, for a message: 'gke'."""
    return " or ".join(f"'{name}'" for name in platforms_where(lambda facts: mode in facts.train_modes))


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


class ModelSpec(Strict):
    maxtext_name: str
    hf_repo: str
    tokenizer: str
    scan_layers: bool
    use_multimodal: bool = False
    # Whether the tokenizer names a pad token: train_rl hands its id to the trainer's model, which then
    # masks pads by segment ids (TunixMaxTextAdapter); the fit check compiles the same.
    pad_token: bool = True
    # The tensor prefixes of a Hugging Face checkpoint that is multimodal while training is text-only:
    # export carries them over unchanged from hf_repo (jobs/export.py); empty for a text-only model.
    vision_parts: tuple[str, ...] = ()


class TpuSpec(Strict):
    generation: str
    topology: str
    machine_type: str
    slices: int = Field(ge=1)
    # How long a flex-start slice may live (the ProvisioningRequest's maxRunDurationSeconds), at most the
    # generation's limit; it bounds a train step that hangs. Only read when the capacity includes flex-start.
    flex_start_max_run_hours: int | None = Field(default=None, ge=1)


class RlSpec(Strict):
    num_batches: int = Field(ge=1)
    # train_rl saves a checkpoint every this many steps (and the last one on close); a preempted spot or
    # flex-start run resumes from the latest, so it loses at most this many steps.
    checkpoint_period: int = Field(ge=1)
    # The learning-rate schedule's length as a multiple of the run's train steps: tpu-rl passes
    # learning_rate_schedule_steps = ratio x train_steps unless an override sets it (recipes/runs/schedule.py
    # has why). 1: warmup, then cosine decay to 0 at the run's last step (MaxText 0.2.4's own default).
    learning_rate_schedule_ratio: float = Field(default=1.0, gt=0)
    overrides: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    pathways_env: dict[str, str] = Field(default_factory=dict)
    # Memory limit of the Pathways head's train_rl container, a Kubernetes quantity with a binary
    # suffix (seed 000 capped it at 190G through the cgroup, which reads G as GiB).
    memory_max: str | None = None
    # key -> the seed's value, for each override changed so that the plan fits its chips with the margin
    # (docs/fit.md); the recipe's own value is in `overrides`, and `tpu-rl recipes` shows both.
    fitted_from: dict[str, str] = Field(default_factory=dict)
    # libtpu's compiler flags for the run's programs, each --xla_...=value: the fit check compiles with them,
    # and the run gives them to the compiler it runs (docs/fit.md, "The compiler's own limit").
    xla_flags: tuple[str, ...] = ()

    def _set_here(self) -> dict[str, str]:
        """key -> value of what the recipe sets that fitted_from may name: its overrides, and its xla_flags."""
        values = {item.partition("=")[0]: item.partition("=")[2] for item in self.overrides}
        return {**values, "xla_flags": " ".join(self.xla_flags)} if self.xla_flags else values

    def changed_to_fit(self) -> dict[str, tuple[str, str]]:
        """key -> (the recipe's value, the seed's) of each setting changed so that the plan fits."""
        values = self._set_here()
        return {key: (values[key], seed) for key, seed in self.fitted_from.items()}

    @property
    def compiler_options(self) -> dict[str, str]:
        """xla_flags as the compile options JAX hands libtpu, name -> value."""
        return dict(flag.removeprefix("--").split("=", 1) for flag in self.xla_flags)

    @field_validator("overrides")
    @classmethod
    def _key_value(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        for item in overrides:
            if not OVERRIDE.match(item):
                raise ValueError(f"'{item[:40]}' is not key=value")
        return overrides

    @field_validator("overrides")
    @classmethod
    def _rewards_once(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        for item in overrides:
            key, _, value = item.partition("=")
            if key in ("reward_functions", "reward.reward_functions"):  # split as train_rl.build_reward_fns does
                try:
                    check_reward_names([n.strip() for n in value.split(",") if n.strip()], item)
                except UserError as error:
                    raise ValueError(str(error)) from None
        return overrides

    @field_validator("xla_flags")
    @classmethod
    def _xla_flags(cls, flags: tuple[str, ...]) -> tuple[str, ...]:
        for flag in flags:
            if not XLA_FLAG.match(flag):
                raise ValueError(f"'{flag[:60]}' is not an XLA flag like --xla_tpu_max_hbm_size_mib=26624 "
                                 "(--xla_..., '=', a value without spaces or quotes)")
        return flags

    @model_validator(mode="after")
    def _fitted_keys_are_overridden(self) -> "RlSpec":
        keys = self._set_here()
        for key in self.fitted_from:
            if key not in keys:
                raise ValueError(f"fitted_from names {key}, which rl.overrides (or rl.xla_flags) does not set: set the value "
                                 "that fits there, or drop it from fitted_from")
        return self

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


class Durations(Strict):
    convert: int = Field(ge=1)
    train: int = Field(ge=1)
    export: int = Field(ge=1)


class RecipeEntry(Strict):
    """One [recipes.<name>] table as written in recipes.toml."""

    model_config = ConfigDict(use_enum_values=True)  # capacity holds the modes' plain strings
    description: str
    platform: str  # a name PLATFORMS registers (recipes/platforms/)
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
    # The share of a chip's HBM its plan must leave free, when not recipes/fit MARGIN; only with the why,
    # in fit_margin_why (docs/fit.md, "How the figure is made"). No recipe keeps less today.
    fit_margin: float | None = Field(default=None, ge=0, lt=0.5)
    fit_margin_why: str | None = None

    @field_validator("capacity", mode="before")
    @classmethod
    def _capacity_list(cls, value: object) -> tuple[CapacityMode, ...]:
        return parse_capacity(value)

    @model_validator(mode="after")
    def _margin_with_its_why(self) -> "RecipeEntry":
        if (self.fit_margin is None) != (self.fit_margin_why is None):
            raise ValueError("fit_margin and fit_margin_why go together: a recipe keeps less of a chip free "
                             "than the default margin only with the reason written down")
        return self

    @field_validator("platform")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in PLATFORMS:
            raise ValueError(f"platform takes one of {' or '.join(repr(name) for name in PLATFORMS)}, not "
                             f"{value!r}")
        return value

    @model_validator(mode="after")
    def _platform_facts(self) -> "RecipeEntry":
        rules = PLATFORMS[self.platform]
        if rules.cpu_machine_runs and not self.cpu_machine_type:
            raise ValueError(f"cpu_machine_type is required for platform '{self.platform}' "
                             f"({', '.join(rules.cpu_machine_runs)} run there)")
        mode = TrainMode.PATHWAYS if self.pathways else TrainMode.JAX
        if mode not in rules.train_modes:
            raise ValueError(f"pathways needs platform {_offering(mode)}; a single TPU VM runs JAX directly"
                             if self.pathways else f"pathways is required for platform '{self.platform}'")
        if rules.max_slices is not None and self.tpu.slices > rules.max_slices:
            at_most = "" if rules.max_slices == 1 else "at most "
            raise ValueError(f"tpu.slices must be {at_most}{rules.max_slices} for platform '{self.platform}'")
        if rules.steps_run_as is StepRunner.STARTUP_SCRIPT:  # which exports rl.env into its own shell
            try:
                exportable_on_vm(self.rl.env, "rl.env")
            except ValueError as error:
                raise ValueError(f"rl.env: {error}") from None
        return self
