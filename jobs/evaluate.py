"""The JobSet that evaluates one saved checkpoint of a run on the held-out set (`tpu-rl eval`). Pure.

MaxText has no evaluation-only entry point (0.2.3 and 0.2.4): train_rl always trains (configs/types.py
`num_batches: int = Field(4, ge=1)`), and its evaluations are the ones around training. What it does
offer: train_rl evaluates the actor it loaded as "Pre RL Training" before training (0.2.4
trainers/post_train/rl/train_rl.py _rl_train_impl: `rl_cluster.rollout.update_params(nnx.state(actor_model,
nnx.Param))`, then `evaluate`), and the actor is loaded from `load_parameters_path`
(utils/model_creation_utils.py create_models_and_meshes -> from_pretrained, which reads an NNX
checkpoint "or NNX-RL with extra 'base' nesting", in 0.2.4 and 0.2.3: the
model_params item tunix's checkpoint manager writes for the TunixMaxTextAdapter actor). So a checkpoint
is evaluated by the train JobSet of a scratch run (eval_run_name) whose load_parameters_path is
`<run>/checkpoints/actor/<step>/model_params/` (RunSpec.load_parameters), with nothing copied. The scratch
run's own checkpoint directory must be empty, or tunix would restore its latest step over those
weights; the CLI clears the scratch run's prefix before and after (scripts/pipeline/gke/evaluate.py).
With no RL checkpoint to resume, tunix starts at step 0 and would train on after the Pre line, so:
- num_batches: the least that gives train_rl one training step (ceil(1 / (num_iterations x
  train_fraction x num_epoch)), Recipe.steps_per_batch; 2 at train_fraction=0.5, since train_rl keeps
  int(num_batches x batch_size x train_fraction) rows, 0.2.4 train_rl.py prepare_datasets), so a JobSet not deleted
  in time trains one step;
- eval_interval=0, so no intermediate evaluation fires.
The CLI stops the JobSet once it has the line (it reads the head's whole log when the line scrolled out
of the tail it polls, and again if the JobSet ended first), gives up after EVAL_WAIT_MINUTES, and
deletes what it created. Everything else is the run's own recipe: the same slice shape, image,
overrides and files (the reference model, which loads the same path here, plays no part in evaluating).
Not confirmed without TPUs: that Pathways' vLLM rollout evaluates the synced actor weights (it is what
the comment on the unconditional update_params in _rl_train_impl says it is for).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.train import train_jobset
from tpu_rl.recipes import Recipe, Settings, UserError
from tpu_rl.recipes.catalog.entry import same_setting
from tpu_rl.recipes.runs.evaluation import evaluates
from tpu_rl.recipes.runs.identity import MAX_RUN_NAME, check_run_name, check_set_key, checked_item, digest
from tpu_rl.recipes.runs.maxtext_values import (config_values, model_base, model_keys, parse_override, release_schema,
                                                spelling)
from tpu_rl.recipes.runs.spec import RunSpec, run_name

# The settings that say how the held-out set is evaluated, not what model is trained: eval's --set may
# change these whatever the run set (rl.yml of 0.2.4, maxtext/configs/post_train/rl.yml, num_test_batches ...
# eval_mode, eval_dataset_name, eval_split; the same keys in 0.2.3). The sampling temperature/top_k/top_p
# are no keys of their own: they sit in rl.yml's generation_configs.<strategy> (0.2.3, 0.2.4), which
# evaluate_rl.py generate_responses picks by eval_sampling_strategy.
EVALUATION_SETTINGS = ("num_test_batches", "eval_batch_size", "test_batch_start_index", "eval_interval",
                       "eval_sampling_strategy", "generation_configs", "num_eval_passes",
                       "eval_corr_lst", "eval_make_lst", "eval_mode", "eval_dataset_name", "eval_split")


def model_items(recipe: Recipe, given: tuple[str, ...]) -> tuple[str, ...]:
    """The items of `given` whose key makes the model (tpu_rl.recipes.runs.maxtext_values.model_keys): eval_sets
    weighs them against the run's own values, once the run's record is read."""
    keys = model_keys(recipe.maxtext_version)
    return tuple(item for item in given if item.partition("=")[0] in keys)


def _check_model_item(recipe: Recipe, run: str, run_sets: tuple[str, ...], item: str) -> None:
    """Refuse an eval item that gives a key making the model another value than the run trained with (its
    --set items, the recipe's overrides, the model's yml, the release's default): the checkpoint holds
    the run's model, and loading it as another fails on the slice, or evaluates something else."""
    key, _, text = item.partition("=")
    version, model = recipe.maxtext_version, recipe.model.maxtext_name
    trained = config_values(version, model, (*recipe.rl.overrides, *run_sets))
    # A key the release's values leave out has a null default (recipes/runs/maxtext_keys/<v>.values.json).
    value = trained.get(key)
    if any(old.partition("=")[0] == key for old in run_sets):
        where = "its --set"
    elif recipe.rl.override(key) is not None:
        where = f"recipe '{recipe.name}'"
    elif key in release_schema(version).get("models", {}).get(model_base(model), {}):
        where = f"configs/models/{model_base(model)}.yml"
    else:
        where = f"MaxText {version}'s own value, rl.yml or types.py"
    if parse_override(key, text) != value:
        raise UserError(f"--set {item}: run {run} was trained with {key}={spelling(value)} ({where}), "
                        f"which makes the model its checkpoint holds ({model_keys(version)[key]}): drop it "
                        "(eval may change only evaluation keys such as num_test_batches)")


def eval_sets(recipe: Recipe, run: str, run_sets: tuple[str, ...], given: tuple[str, ...]) -> tuple[str, ...]:
    """The --set items an evaluation of `run` applies: the run's own, then eval's. An eval item that
    changes a key the run set is refused unless it is an evaluation setting: the checkpoint is the model
    those items trained, and a different value would evaluate another model's shapes and behaviour. So
    is one that changes a key making the model (MaxText's own, model_items) from the value the run trained
    with, whether or not the run set it."""
    models = set(model_items(recipe, given))
    for item in given:
        key = item.partition("=")[0]
        check_set_key(recipe, key)  # a key MaxText does not know (a dotted one too) gets its one line
        if key in EVALUATION_SETTINGS:
            continue
        if item in models:
            _check_model_item(recipe, run, run_sets, item)
        value = checked_item(recipe, item).partition("=")[2]
        for old in run_sets:
            if old.partition("=")[0] in same_setting(key) and checked_item(recipe, old).partition("=")[2] != value:
                raise UserError(f"--set {item}: run {run} was trained with {old}, which shapes the model "
                                "evaluated; drop it (eval may change only evaluation keys such as num_test_batches)")
    return (*run_sets, *given)


def eval_run_name(run: str, step: int) -> str:
    """<as much of the run's name as fits>-e<step>-<5 hex of the run name's sha256>: run names are short
    (recipes/runs/identity.py MAX_RUN_NAME), so the hash keeps two runs' evaluations apart when the name is cut."""
    suffix = f"-e{step}-{digest(run)[:5]}"
    return check_run_name(f"{run[:MAX_RUN_NAME - len(suffix)].rstrip('-')}{suffix}", "the evaluation's run name")


def one_step_batches(recipe: Recipe) -> int:
    """The least num_batches with which train_rl runs one training step (see the module's docstring)."""
    batches = max(1, math.ceil(1 / recipe.steps_per_batch - 1e-9)) if recipe.steps_per_batch > 0 else 1
    while int(batches * recipe.steps_per_batch) < 1 and batches < 1_000_000:  # float rounding
        batches += 1
    return batches


def eval_spec(spec: RunSpec, settings: Settings, step: int) -> RunSpec:
    """The run as the scratch run that evaluates its checkpoint `step` (loaded from its params)."""
    recipe, run = spec.recipe, run_name(spec)
    if not evaluates(recipe):
        raise UserError(f"run {run} evaluates nothing (num_test_batches=0): pass --set num_test_batches=N to "
                        "evaluate N batches of test questions")
    overrides = tuple(item for item in recipe.rl.overrides if item.partition("=")[0] != "eval_interval")
    rl = recipe.rl.model_copy(update={"num_batches": one_step_batches(recipe),
                                      "overrides": (*overrides, "eval_interval=0")})
    source = ArtifactPaths(spec, settings).params_at(step)
    return dataclasses.replace(spec, recipe=recipe.model_copy(update={"rl": rl}), run=eval_run_name(run, step),
                               load_parameters=source)


def eval_jobset(spec: RunSpec, settings: Settings, step: int) -> dict[str, Any]:
    return train_jobset(ArtifactPaths(eval_spec(spec, settings, step), settings))
