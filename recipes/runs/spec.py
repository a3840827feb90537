"""What a command asks for: a RunSpec is one run of a catalog Recipe, with its `--set` items, its
`--rewards`/`--data-processor` files, its name and the sweep it belongs to; and that run's identity and name.

The Recipe (recipes/catalog/recipe.py) stays the catalog entry. A RunSpec's `recipe` is that entry as the run trains
it, `--set` and the files already merged into `rl`: every builder of a command line or a manifest reads
`recipe.rl`, so they read the run's without a second argument. `catalog_rl` keeps the [rl] table as
recipes.toml has it, the run its durations were measured on (recipes/costs/train_time.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from pydantic import TypeAdapter

from tpu_rl.recipes.catalog.entry import RlSpec
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.runs.identity import check_run_name, named, with_sets
from tpu_rl.recipes.runs.reward_names import check_reward_names
from tpu_rl.recipes.runs.schedule import SCHEDULE_KEY, schedule_steps
from tpu_rl.recipes.runs.user_files import UserFile, check_together


@dataclass(frozen=True)
class RunSpec:
    """One run as a command asks for it. Build it with RunSpec.requested (the CLI's --set and --run) or
    RunSpec.of_catalog (the recipe as recipes.toml defines it), then the `with_` methods."""

    recipe: Recipe  # the catalog entry as this run trains it: capacity from the settings, rl merged
    catalog_rl: RlSpec  # the [rl] table as recipes.toml has it, before --set and the files
    sets: tuple[str, ...] = ()  # the --set items as given, in order (merged into recipe.rl)
    run: str | None = None  # the name --run chose; None: derived from the run's identity (run_name)
    user_files: tuple[UserFile, ...] = ()  # mounted in the train head (recipes/runs/user_files.py)
    sweep: str | None = None  # the sweep the run belongs to (recipes/runs/sweeps.py): recorded, not trained
    # What the train step loads instead of the conversion (jobs/evaluate.py: `tpu-rl eval` loads the
    # evaluated run's checkpoint params); None: the conversion (jobs/paths.py converted_items).
    load_parameters: str | None = None
    # What the TPU compiler said of the run before it was submitted (scripts/fit: Fit.record), for its
    # run.json; it changes nothing the run does.
    fit: dict | None = None

    @classmethod
    def of_catalog(cls, recipe: Recipe) -> RunSpec:
        """The run of the recipe as recipes.toml defines it: no --set, no files, the derived name."""
        return cls(recipe, recipe.rl)

    @classmethod
    def in_bucket(cls, recipe: Recipe, run: str) -> RunSpec:
        """The run named `run` as the bucket holds it: the name taken as given, unchecked (a run written
        before today's run-name rule is read as it is)."""
        return cls(recipe, recipe.rl, run=run)

    @classmethod
    def requested(cls, recipe: Recipe, sets: Iterable[str] = (), run: str | None = None,
                  usual_only: bool = False) -> RunSpec:
        """The run as the user's `--set` and `--run` make it: the one place the CLI applies them."""
        return cls.of_catalog(recipe).with_sets(sets, usual_only).with_run(run)

    def with_sets(self, sets: Iterable[str], usual_only: bool = False) -> RunSpec:
        """These --set items joined to the run's (recipes/runs/identity.py with_sets says how and what it refuses)."""
        sets = tuple(sets)
        if not sets:
            return self
        return dataclasses.replace(self, recipe=with_sets(self.recipe, sets, usual_only), sets=(*self.sets, *sets))

    def with_run(self, run: str | None) -> RunSpec:
        """The run named `run` (checked as --run is); None keeps the name it has."""
        return dataclasses.replace(self, run=check_run_name(run)) if run is not None else self

    def with_sweep(self, sweep: str | None) -> RunSpec:
        return dataclasses.replace(self, sweep=sweep)

    def with_fit(self, fit: dict | None) -> RunSpec:
        return dataclasses.replace(self, fit=fit)

    def with_user_files(self, files: tuple[UserFile, ...], recorded: bool = False) -> RunSpec:
        """The run with the files and the overrides that point train_rl at their mounted paths; `recorded`:
        the files of a run's record, whose reward names are kept as the run trained with them."""
        if not files:
            return self
        check_together(files)
        overrides = list(self.recipe.rl.overrides)
        for file in files:
            if file.kind == "rewards":
                if not recorded:  # a run.json written before the rule: evaluated as trained (repeat kept)
                    check_reward_names(file.functions, f"--rewards {file.option}")
                overrides += [f"reward_functions_path={file.mounted_path}",
                              f"reward_functions={','.join(file.functions)}"]
            else:
                overrides.append(f"dataset_processor_path={file.mounted_path}")
        rl = self.recipe.rl.model_copy(update={"overrides": tuple(overrides)})
        return dataclasses.replace(self, recipe=self.recipe.model_copy(update={"rl": rl}), user_files=tuple(files))

    def as_recorded(self) -> dict:
        """The run as run.json's recipe_as_run keeps it: the recipe, then the run's own fields."""
        return {**self.recipe.model_dump(mode="json"), "run": self.run, "sets": list(self.sets),
                "user_files": _USER_FILES.dump_python(self.user_files, mode="json"),
                "load_parameters": self.load_parameters}


_USER_FILES = TypeAdapter(tuple[UserFile, ...])


def run_identity(spec: RunSpec) -> dict:
    """Everything that changes the trained weights: the model, the MaxText release and what runs it, the
    source patches, the TPU shape, num_batches, every train override (the recipe's and --set, merged) and
    the content of the --rewards and --data-processor files (so a changed reward is a new run).
    Not in it: capacity, durations, checkpoint_period and the settings, which change where and how often,
    not what is trained, nor the model's vision_parts, which export carries over untrained."""
    recipe, shape = spec.recipe, spec.recipe.shape
    files = {"user_files": [file.identity() for file in spec.user_files]} if spec.user_files else {}
    return {
        **files,
        # vision_parts only say what export carries over unchanged from hf_repo: training never sees them
        "model": recipe.model.model_dump(mode="json", exclude={"vision_parts"}),
        "maxtext_version": recipe.maxtext_version,
        "image": recipe.maxtext.image,
        "pip": recipe.maxtext.pip,
        "patches": [patch.model_dump(mode="json") for patch in recipe.patches],
        "tpu": {"generation": shape.generation, "topology": shape.topology, "machine_type": shape.machine_type,
                "slices": shape.slices},
        "num_batches": recipe.rl.num_batches,
        # Keys are unique, so the order changes nothing. The schedule length tpu-rl derives counts as an
        # override too (a recipe that set it the same way keeps its run names).
        "overrides": sorted({*recipe.rl.overrides, f"{SCHEDULE_KEY}={schedule_steps(recipe)}"}),
    }


def default_run_name(spec: RunSpec) -> str:
    """<recipe>-<7 hex of the run identity's sha256>, e.g. qwen3-v6e32-3f2a1b9."""
    return named(spec.recipe, run_identity(spec))


def run_name(spec: RunSpec) -> str:
    return spec.run or default_run_name(spec)
