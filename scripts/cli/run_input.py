"""What one run is, before any cloud is asked: the RunSpec (recipes/runs/spec.py) the settings, --set, --run,
--rewards and --data-processor make, each file checked (scripts/rewards/check.py) with train_rl's config."""

from __future__ import annotations

from typing import Optional

import typer

from tpu_rl.jobs.maxtext import train_command
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.runs.user_files import read_user_files
from tpu_rl.scripts.cli.core import cloud_recipe


def run_recipe(command: str, recipe_name: str, sets: Optional[list[str]], run_name: Optional[str],
               rewards: Optional[str] = None, data_processor: Optional[str] = None,
               unchecked_imports: bool = False, unusual_values: bool = False, allow_example: bool = False):
    """The RunSpec of one run of `command` and the settings `command` needs (core.cloud_recipe); with
    `allow_example` and nothing set, the embedded example's (a dry run's)."""
    recipe, settings = cloud_recipe(command, recipe_name, allow_example)
    # Only `run` starts a run: the others find one by its --set items, as they were given to it.
    usual_only = command == "run" and not unusual_values
    return run_of(recipe, settings, sets, run_name, rewards, data_processor, unchecked_imports, usual_only), settings


def run_of(recipe, settings, sets: Optional[list[str]], run_name: Optional[str], rewards: Optional[str] = None,
           data_processor: Optional[str] = None, unchecked_imports: bool = False, usual_only: bool = False):
    """The run --set, --run, --rewards and --data-processor make of the recipe under `settings`: what `run`
    submits, and what `render` writes with the same options."""
    spec = RunSpec.requested(recipe, sets or (), run_name, usual_only=usual_only)
    if rewards or data_processor:
        spec = checked_user_files(spec, settings, rewards, data_processor, unchecked_imports)
    return spec


def checked_user_files(spec: RunSpec, settings, rewards: Optional[str], data_processor: Optional[str],
                       unchecked_imports: bool = False):
    """The run with the files, each checked (scripts/rewards/check.py) with train_rl's config as the
    train command fills it; with `unchecked_imports`, a file importing a module this Python lacks is
    submitted unchecked, said here and in run.json."""
    import dataclasses

    from tpu_rl.scripts.rewards.check import (UncheckedImport, check_inputs, check_processor, check_rewards,
                                       parse_data_processor, parse_rewards)

    recipe = spec.recipe
    items = train_command(recipe, ArtifactPaths(spec, settings)).overrides
    inputs, rows = check_inputs(recipe, items=items), None
    processor = parse_data_processor(data_processor) if data_processor else None
    option = parse_rewards(rewards) if rewards else None
    files = list(read_user_files(recipe, processor, (option.path, option.functions) if option else None))

    def checked(file, check):
        try:
            return file, check()
        except UncheckedImport as error:
            if not unchecked_imports:
                raise
            # stderr: `render --out -` pipes stdout, the manifests, to kubectl
            typer.echo(f"! {file.option}: not checked, it imports {error.module} (--unchecked-imports)", err=True)
            return dataclasses.replace(file, unchecked=f"imports {error.module}"), None

    if processor:  # files: the processor first, then the rewards
        files[0], rows = checked(files[0], lambda: check_processor(processor, inputs))
    if option:
        files[-1], _ = checked(files[-1], lambda: check_rewards(option, inputs, rows))
    return spec.with_user_files(tuple(files))
