"""Typed recipes. The TOML table is parsed once, here, and every rule is checked at load time.

Code further down (stacks, manifests, the CLI) trusts these types and only reads derived properties;
it never recomputes chips or hosts itself. The parts live by what they describe: recipes/catalog/facts.py (TPU
generations, machines, MaxText releases, patches), recipes/catalog/entry.py (one recipe table as written),
recipes/catalog/shape.py (chips and hosts), recipes/capacity/modes.py (capacity modes and their rules).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tpu_rl.recipes.capacity.modes import CapacityMode, check_capacity
from tpu_rl.recipes.catalog.entry import TRAIN_STEP_FACTORS, Durations, ModelSpec, RecipeEntry, RlSpec, same_setting
from tpu_rl.recipes.catalog.facts import (MachineSize, MaxTextRelease, PathwaysImages, PathwaysRepositories,
                                          SourcePatch, TpuGeneration)
from tpu_rl.recipes.catalog.shape import Shape, derive_shape
from tpu_rl.recipes.catalog.said import first_error
from tpu_rl.recipes.catalog.strict import Strict
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.fit import MARGIN
from tpu_rl.recipes.names import check_name
from tpu_rl.recipes.platforms import PlatformFacts, facts_of
from tpu_rl.recipes.runs.datasets import trained_steps

MAX_RECIPE_NAME = 20  # a stack's name, which prefixes the names of its resources


class Recipe(BaseModel):
    """A validated recipe with its shape, MaxText release and patches resolved: the catalog entry. What one
    run of it asks for (--set, --run, the user files) is a RunSpec (recipes/runs/spec.py)."""

    model_config = ConfigDict(frozen=True, use_enum_values=True)  # capacity holds the modes' plain strings

    name: str
    description: str
    platform: str  # a name recipes/platforms PLATFORMS registers
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
    rl: RlSpec  # in a RunSpec's recipe, with its --set and files merged: the builders read only this
    patches: tuple[SourcePatch, ...]

    tpu_facts: TpuGeneration
    flex_start_max_run_hours: int | None = None
    fit_margin: float = MARGIN  # of a chip's HBM its plan leaves free (recipes/fit)
    fit_margin_why: str | None = None

    @property
    def platform_facts(self) -> PlatformFacts:
        """What the recipe's platform is, as facts (recipes/platforms/)."""
        return facts_of(self.platform)

    @property
    def cpu_pool_machine(self) -> tuple[str, MachineSize]:
        """The CPU pool's machine type and size. Only a platform with a CPU pool asks, and RecipeEntry refuses
        a recipe of one without cpu_machine_type."""
        if self.cpu_machine_type is None or self.cpu_machine is None:
            raise ValueError(f"recipe '{self.name}' names no cpu_machine_type: its platform has no CPU pool")
        return self.cpu_machine_type, self.cpu_machine

    def with_capacity(self, capacity: tuple[CapacityMode, ...], source: str) -> "Recipe":
        """This recipe with another capacity list, checked against its platform and TPU generation."""
        check_capacity(self.name, self.platform_facts, capacity, self.tpu_facts, self.flex_start_max_run_hours, source)
        # The plain strings, as validation keeps them (use_enum_values).
        return self.model_copy(update={"capacity": tuple(CapacityMode(mode).value for mode in capacity)})

    def eval_setting(self, key: str) -> float:
        """A key that sizes the held-out evaluation or a batch (its release's eval_defaults) as this run's
        overrides set it, or else rl.yml's default."""
        given = self.rl.override(key)
        return float(given) if given is not None else float(self.maxtext.eval_defaults[key])

    def step_factor(self, key: str) -> float:
        """One of TRAIN_STEP_FACTORS as this run sets it (under either spelling), or its release's default."""
        spellings = [name for name in same_setting(key) if self.rl.override(name) is not None]
        if len(spellings) > 1:
            raise UserError(f"recipe '{self.name}': rl.overrides sets {key} twice ({' and '.join(spellings)}); "
                            "keep one")
        given = self.rl.override(spellings[0]) if spellings else None
        try:
            return float(given) if given is not None else self.maxtext.train_step_defaults[key]
        except ValueError:
            raise UserError(f"recipe '{self.name}': rl.overrides sets {key}={given}, which is not a number") from None

    @property
    def steps_per_batch(self) -> float:
        """rl.num_iterations x train_fraction x num_epoch: train_steps is int(num_batches x this)."""
        product = 1.0
        for key in TRAIN_STEP_FACTORS:
            product *= self.step_factor(key)
        return product

    @property
    def train_steps(self) -> int:
        """The steps train_rl runs: int(num_batches x rl.num_iterations x train_fraction x num_epoch).

        As MaxText computes it (0.2.4: configs/types.py, RLConfig's train_steps; 0.2.3:
        trainers/post_train/rl/train_rl.py, get_max_train_steps), with each factor from rl.overrides or
        else the release's config default: what the settings ask for. The data may allow fewer (last_step).
        An upper bound: train_rl takes num_batches x batch_size rows counting the long prompts it drops
        (grain's filter yields None for them), so it trains on fewer and can stop below (scripts/cloud/gcs.py
        TrainedCheckpoint); tunix saves the step it reached on close, whatever checkpoint_period is."""
        product = float(self.rl.num_batches) * self.steps_per_batch
        steps = int(product)
        if steps < 1:
            raise UserError(f"recipe '{self.name}': num_batches x {' x '.join(TRAIN_STEP_FACTORS)} gives {steps} "
                            "training steps; raise num_batches or train_fraction")
        return steps

    @property
    def last_step(self) -> int:
        """The last step train_rl can reach (an upper bound): train_steps, which it passes as max_steps, capped
        by the steps its training data makes (recipes/runs/datasets.py trained_steps: train_rl cuts the split
        to num_batches x batch_size x train_fraction rows, and tunix stops and saves when they run out, below
        max_steps). Export converts the step training did reach."""
        return trained_steps(self)


class RecipeFile(Strict):
    tpu: dict[str, TpuGeneration]
    maxtext: dict[str, MaxTextRelease]
    pathways: PathwaysRepositories
    recipes: dict[str, RecipeEntry]
    patches: dict[str, SourcePatch] = Field(default_factory=dict)
    machines: dict[str, MachineSize] = Field(default_factory=dict)


def build_recipes(table: dict, source: str = "recipes.toml") -> dict[str, Recipe]:
    """Validate a parsed recipe table and return the recipes by name.

    Raises :class:`UserError` naming the recipe, the field and the rule on the first problem.
    """
    try:
        parsed = RecipeFile.model_validate(table)
    except ValidationError as error:
        raise UserError(f"{source}: {first_error(error)}") from None

    recipes: dict[str, Recipe] = {}
    for name, entry in parsed.recipes.items():
        where = f"{source}: recipe '{name}'"
        check_name(name, f"{source}: recipe", "recipe", MAX_RECIPE_NAME, "it is the name of its stack")
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
        named = (("tpu.machine_type", entry.tpu.machine_type), ("cpu_machine_type", entry.cpu_machine_type))
        for field, machine_type in named:
            if machine_type is not None and machine_type not in parsed.machines:
                raise UserError(f"{where}: {field} '{machine_type}' has no [machines.\"{machine_type}\"] entry "
                                "(its vcpus and memory_gib size the Kueue quota)")
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
            cpu_machine=parsed.machines[entry.cpu_machine_type] if entry.cpu_machine_type else None,
            tpu_host=parsed.machines[entry.tpu.machine_type],
            durations_minutes=entry.durations_minutes,
            model=entry.model,
            shape=shape,
            rl=entry.rl,
            patches=tuple(patches),
            tpu_facts=parsed.tpu[entry.tpu.generation],
            flex_start_max_run_hours=entry.tpu.flex_start_max_run_hours,
            fit_margin=MARGIN if entry.fit_margin is None else entry.fit_margin,
            fit_margin_why=entry.fit_margin_why,
        )
        check_capacity(name, facts_of(entry.platform), entry.capacity, parsed.tpu[entry.tpu.generation],
                       entry.tpu.flex_start_max_run_hours, f"{source}: capacity")
        recipes[name].train_steps  # noqa: B018 -- refuses overrides that leave no training step, at load
    return recipes
