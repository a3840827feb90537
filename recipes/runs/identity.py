"""Runs: the name of each training run, the conversion runs share, and the MaxText keys `--set` may change
(their values are checked and spelled one way by recipes/runs/maxtext_values.py).

A run is one training of a recipe with one set of settings (a RunSpec, recipes/runs/spec.py). Its name is
chosen with `--run NAME` or derived from a hash of everything that changes the trained weights
(recipes/runs/spec.py run_identity), so a changed setting
gives a new run and the same settings resume the same one. The run name is train_rl's run_name, so the
run's checkpoints and TensorBoard logs land under trained/<run>/ (MaxText joins base_output_directory and
run_name: research §4), its export under hf-trained/<run>/, and it names the run's JobSets and their
`tpu-rl/run` label. Conversion depends only on the model and the MaxText release, so every run of a recipe
(and every recipe with the same conversion) loads one shared conversion (conversion_identity).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Callable, Iterable

from pydantic import ValidationError

from tpu_rl.recipes.catalog.entry import OVERRIDE, STEPS, RlSpec, same_setting
from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.catalog.said import first_error, shown, takes
from tpu_rl.recipes.conventions import MAX_JOBSET_NAME
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.names import check_name
from tpu_rl.recipes.runs.maxtext_values import (KEY_LIST_DIR, LENGTH_DEFAULTS, MICRO_BATCH_KEYS, check_lengths,
                                                check_micro_batches, check_value, maxtext_keys, parse_override,
                                                spelling)
from tpu_rl.recipes.runs.schedule import schedule_steps
from tpu_rl.recipes.runs.usual_values import check_usual

# --- names ---------------------------------------------------------------------------------------------
# A run name becomes a JobSet name (<run>-<step>, at most MAX_JOBSET_NAME), a label value and a directory
# of the bucket, and reaches MaxText as run_name=<run>: the rule of every name (recipes/names.py), this long.
MAX_RUN_NAME = MAX_JOBSET_NAME - len("-") - max(len(step) for step in STEPS)
HASH_CHARS = 7  # of a run's or a conversion's sha256 in their names, as git shortens commits
_PREFIX_CHARS = MAX_RUN_NAME - len("-") - HASH_CHARS  # of the recipe name in a derived name


def check_run_name(name: str, option: str = "--run") -> str:
    return check_name(name, option, "run", MAX_RUN_NAME, "it names the run's JobSets, its label and its prefix in "
                      "the bucket")


def digest(data: object) -> str:
    """sha256 of the canonical JSON of `data`: the same settings give the same digest in any key order."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def named(recipe: Recipe, data: object) -> str:
    """<recipe, cut to fit>-<7 hex of the data's digest>: a run's or a conversion's name."""
    return f"{recipe.name[:_PREFIX_CHARS].rstrip('-')}-{digest(data)[:HASH_CHARS]}"


def conversion_identity(recipe: Recipe) -> dict:
    """What the converted checkpoint depends on: the Hugging Face repo and MaxText model it is read as, the
    MaxText release, scan_layers, and the storage format, which follows Pathways (jobs/maxtext.py
    _checkpoint_storage: Pathways cannot read zarr3/OCDBT)."""
    model = recipe.model
    return {"hf_repo": model.hf_repo, "maxtext_name": model.maxtext_name, "scan_layers": model.scan_layers,
            "use_multimodal": model.use_multimodal, "maxtext_version": recipe.maxtext_version,
            "pathways": recipe.pathways}


def conversion_directory(recipe: Recipe) -> str:
    """The conversion's directory under max-text-format/: readable, and unique per conversion identity,
    e.g. 0.2.4-scan-5d41c0e."""
    layers = "scan" if recipe.model.scan_layers else "unscanned"
    return f"{recipe.maxtext_version}-{layers}-{digest(conversion_identity(recipe))[:HASH_CHARS]}"


def conversion_key(recipe: Recipe) -> str:
    """What names the shared convert JobSet instead of a run: <recipe>-<7 hex of the conversion identity>."""
    return named(recipe, conversion_identity(recipe))


# --- --set ---------------------------------------------------------------------------------------------
# Keys tpu-rl sets itself: a value from --set would break a path or a step, or be silently ignored.
# The *_dir keys are recomputed from base_output_directory and run_name (configs/types.py
# MaxTextConfig.set_derived_and_validate_values; 0.2.4 also RLConfig.set_derived_values_and_validate);
# checkpoint_storage_* decide how train_rl reads load_parameters_path (0.2.4 model_creation_utils.py from_pretrained).
_MODEL_KEY = ("conversion and export use the recipe's model with the same value; change [recipes.<name>.model] "
              "in recipes.toml")
_DERIVED_DIR = ("MaxText recomputes it from base_output_directory and run_name, so the value would be ignored; "
                "the run's outputs are under trained/<run>/")
_USER_FILE_KEYS = {
    "reward_functions_path": "pass the file with --rewards FILE.py:fn1,fn2, which mounts it where the trainer "
                             "reads it, checks it and makes its content part of the run",
    "reward_functions": "pass the functions with --rewards FILE.py:fn1,fn2",
    "dataset_processor_path": "pass the file with --data-processor FILE.py, which mounts it where the trainer "
                              "reads it and makes its content part of the run",
}
PIPELINE_KEYS: dict[str, str] = {
    "run_name": "it is the run's name; choose it with --run NAME",
    "base_output_directory": "tpu-rl puts each run under its own prefix of the bucket, where the next step and "
                             "`tpu-rl` look for it",
    "load_parameters_path": "training loads the conversion tpu-rl wrote (shared by the runs)",
    "load_full_state_path": "it would replace the converted checkpoint training starts from",
    "checkpoint_dir": _DERIVED_DIR,
    "tensorboard_dir": _DERIVED_DIR,
    "metrics_dir": _DERIVED_DIR,
    "managed_mldiagnostics_dir": _DERIVED_DIR,
    "hf_access_token": "a token on the command line shows in `ps` and the manifest; tpu-rl passes HF_TOKEN from "
                       "Secret Manager",
    "model_name": _MODEL_KEY,
    "scan_layers": _MODEL_KEY,
    "tokenizer_path": _MODEL_KEY,
    "chips_per_vm": "it is derived from the recipe's TPU machine type",
    "checkpoint_storage_use_zarr3": "it decides how train_rl reads the converted checkpoint, whose format "
                                    "tpu-rl picks for the platform",
    "checkpoint_storage_use_ocdbt": "it decides how train_rl reads the converted checkpoint, whose format "
                                    "tpu-rl picks for the platform",
    # The trainer reads these files from its own file system (recipes/runs/user_files.py): the options mount them.
    **{key: _USER_FILE_KEYS[key.rpartition(".")[2]] for key in (
        "reward_functions_path", "reward_functions", "reward.reward_functions_path", "reward.reward_functions",
        "dataset_processor_path")},
}
# Train keys tpu-rl derives from the recipe's [rl] table: --set changes the table's field instead.
RL_FIELDS = ("num_batches", "checkpoint_period")


def check_set_key(recipe: Recipe, key: str) -> None:
    """One line naming the key and why, for a key tpu-rl owns or one MaxText does not know."""
    owned = next((name for name in (key, key.split(".", 1)[0]) if name in PIPELINE_KEYS), None)
    if owned:
        raise UserError(f"--set {key} is refused: {PIPELINE_KEYS[owned]}")
    keys = maxtext_keys(recipe.maxtext_version)
    if key not in keys:
        close = difflib.get_close_matches(key, sorted(keys), n=3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UserError(f"--set {key}: not a key MaxText {recipe.maxtext_version}'s train_rl accepts{hint} "
                        f"(recipes/runs/{KEY_LIST_DIR}/{recipe.maxtext_version}.toml lists them)")


def check_one_key(recipe: Recipe, item: str) -> None:
    """A --set item sets one key: a whole group (`rl={"num_generations": 8}`) would pass MaxText, but the price,
    the checks of keys read together and the run's identity read each key on its own, and would miss it."""
    key, _, text = item.partition("=")
    inner = sorted(name.removeprefix(f"{key}.") for name in maxtext_keys(recipe.maxtext_version)
                   if name.startswith(f"{key}."))
    if not inner:
        return
    value = parse_override(key, text)
    name, example = next(iter(value.items())) if isinstance(value, dict) and value else (inner[0], "VALUE")
    raise UserError(f"--set {item[:60]}: {key} is a group of keys, and a whole group is not checked or priced key by "
                    f"key: set each key on its own, e.g. --set {key}.{name}={spelling(example)}")


def checked_item(recipe: Recipe, item: str, sets: Iterable[str] = ()) -> str:
    """A --set item as MaxText will read it, spelled one way (recipes/runs/maxtext_values.py): 2.0e-5 and 0.00002
    become 2e-5, True becomes true; a value equal to the recipe's own for that setting keeps the recipe's
    spelling. So equal values give one command line, one spec and one run name. A key the model's yml sets
    must keep its value there unless the overrides or `sets` turn on override_model_config."""
    key, _, text = item.partition("=")
    model = None if _overrides_model_config(recipe, sets) else recipe.model.maxtext_name
    checked = check_value(recipe.maxtext_version, key, text, model)
    for old in recipe.rl.overrides:
        name, _, old_text = old.partition("=")
        if name in same_setting(key) and _same_value(recipe, name, old_text, checked.value):
            return old
    return checked.item


def _overrides_model_config(recipe: Recipe, sets: Iterable[str]) -> bool:
    """Whether the last override_model_config among the recipe's overrides and `sets` is true."""
    given = [item.partition("=")[2] for item in (*recipe.rl.overrides, *sets)
             if item.partition("=")[0] == "override_model_config"]
    return bool(given) and _same_value(recipe, "override_model_config", given[-1], True)


def _same_value(recipe: Recipe, key: str, text: str, value: object) -> bool:
    try:
        return check_value(recipe.maxtext_version, key, text).value == value
    except UserError:
        return False


def with_sets(recipe: Recipe, sets: Iterable[str], usual_only: bool = False) -> Recipe:
    """The recipe with --set KEY=VALUE items joined to its train overrides, later wins (a key the recipe
    sets keeps its place with the new value). num_batches and checkpoint_period change the [rl] fields they
    come from. A RunSpec keeps the copy (recipes/runs/spec.py), which everything downstream (the run name,
    the train command, train_steps, export's last step) reads. `usual_only`: a value MaxText takes but no
    run means is refused (recipes/runs/usual_values.py), as `run` and `render` do without --unusual-values."""
    sets = tuple(sets)
    if not sets:
        return recipe
    overrides = list(recipe.rl.overrides)
    fields: dict[str, str] = {}
    for item in sets:
        if not OVERRIDE.match(item):
            raise UserError(f"--set '{item[:40]}' is not KEY=VALUE: pass a MaxText key and its value, e.g. "
                            "--set learning_rate=1e-5")
        key = item.partition("=")[0]
        if key in RL_FIELDS:
            fields[key] = item.partition("=")[2]
            continue
        check_set_key(recipe, key)
        check_one_key(recipe, item)
        given, item = item, checked_item(recipe, item, sets)
        if usual_only:
            check_usual(recipe.maxtext_version, given, parse_override(key, given.partition("=")[2]))
        names = same_setting(key)
        kept = [i for i, old in enumerate(overrides) if old.partition("=")[0] in names]
        overrides = [old for old in overrides if old.partition("=")[0] not in names]
        overrides.insert(kept[0] if kept else len(overrides), item)
    _check_together(recipe, overrides, sets, ("batch_size", *MICRO_BATCH_KEYS), check_micro_batches)
    _check_together(recipe, overrides, sets, tuple(LENGTH_DEFAULTS), check_lengths)
    try:
        rl = RlSpec.model_validate({**recipe.rl.model_dump(), **fields, "overrides": tuple(overrides)})
    except ValidationError as error:
        location = error.errors()[0]["loc"]
        field = str(location[0]) if location else ""
        if field in fields:  # the [rl] field this --set item changes: its rule and the recipe's own value
            own = getattr(recipe.rl, field)
            raise UserError(f"--set {field}={fields[field]}: {field} takes {takes(RlSpec, field)}, not "
                            f"{shown(fields[field], quoted=False)}: give one, e.g. --set {field}={own} (the recipe's "
                            "own)") from None
        raise UserError(f"--set: {first_error(error)}") from None
    changed = recipe.model_copy(update={"rl": rl})
    try:
        changed.train_steps  # noqa: B018 -- a step factor that is not a number, or no step at all
        schedule_steps(changed)  # a schedule length that is not a whole number
    except UserError as error:
        raise UserError(f"--set: {error}") from None
    return changed


def _check_together(recipe: Recipe, overrides: list[str], sets: tuple[str, ...], keys: tuple[str, ...],
                    check: Callable[[str, dict, str], None]) -> None:
    """Keys the trainer reads together (batch_size and the micro batches, the two lengths), checked as one
    when --set touches one of them."""
    touched = [item for item in sets if item.partition("=")[0] in keys]
    if not touched:
        return
    values = {old.partition("=")[0]: check_value(recipe.maxtext_version, *old.split("=", 1)).value
              for old in overrides if old.partition("=")[0] in keys}
    check(recipe.maxtext_version, values, touched[-1])
