"""The three MaxText command lines, derived from a recipe. Shared by the GKE manifests and the VM script.

A command is data (module, key=value overrides, --flags) so that tests can check every key against the
pinned MaxText wheel and compare it with the seeds; `shell()` renders it one argument per line, which is
what a reviewer reads in the manifest.

The Hugging Face token is never an argument: MaxText reads the HF_TOKEN environment variable when
hf_access_token is not given (pyconfig, 0.2.3 and 0.2.4), and `hf_access_token=` on the command line
is deprecated because it shows up in `ps`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Recipe, Step, UserError
from tpu_rl.recipes.platforms.facts import CpuStepsHost, registered
from tpu_rl.recipes.runs.schedule import SCHEDULE_KEY, derived_schedule, explicit_schedule

TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"
TRAIN_RL = "maxtext.trainers.post_train.rl.train_rl"
TO_HUGGINGFACE = "maxtext.checkpoint_conversion.to_huggingface"


@dataclass(frozen=True)
class CpuStepArgs:
    """What convert's and export's commands add where they run (PlatformFacts.cpu_steps_on)."""
    convert_flags: tuple[str, ...]
    export_overrides: tuple[str, ...]
    export_flags: tuple[str, ...]


CPU_STEP_ARGS: dict[CpuStepsHost, CpuStepArgs] = {
    # A shared CPU pool's RAM: tensors load lazily. Export without a JAX cluster, where MaxText's
    # architecture wins over the checkpoint's.
    CpuStepsHost.CPU_POOL: CpuStepArgs(("--lazy_load_tensors=True",),
                                       ("skip_jax_distributed_system=true", "hardware=cpu"),
                                       ("--override_model_architecture",)),
    # A TPU host's 1.4 TB loads eagerly (seed 002), and exports on its TPUs.
    CpuStepsHost.TPU_HOST: CpuStepArgs(("--lazy_load_tensors=False",), (), ()),
}


def _cpu_step_args(recipe: Recipe) -> CpuStepArgs:
    return registered(CPU_STEP_ARGS, recipe.platform_facts.cpu_steps_on, "CPU_STEP_ARGS of jobs/maxtext.py",
                      "CPU steps host")


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.2.4' -> (0, 2, 4); enough for MaxText's plain release numbers."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        raise UserError(f"MaxText version '{version}' is not a plain release number like 0.2.4") from None


def at_least(version: str, minimum: str) -> bool:
    return version_tuple(version) >= version_tuple(minimum)


def _shell_word(arg: str) -> str:
    """Quote one argument for bash so that it stays readable: JSON-ish values keep their inner quotes."""
    if "'" not in arg:
        return shlex.quote(arg)
    escaped = "".join("\\" + char if char in '\\"$`' else char for char in arg)
    return f'"{escaped}"'


@dataclass(frozen=True)
class MaxTextCommand:
    module: str
    overrides: tuple[str, ...]  # key=value, checked by MaxText's config schema
    flags: tuple[str, ...] = ()  # --flag or --flag=value, parsed by the module itself (argparse/absl)

    @property
    def argv(self) -> list[str]:
        return ["python3", "-m", self.module, *self.overrides, *self.flags]

    def value(self, key: str) -> str:
        for item in self.overrides:
            name, _, value = item.partition("=")
            if name == key:
                return value
        raise KeyError(key)

    def shell(self, indent: str = "    ", expand: dict[str, str] | None = None) -> str:
        """One argument per line, as in the seeds; bash parses it back into exactly `argv`. `expand` gives
        some override keys a value that bash expands at run time (double-quoted, e.g. "${STEP}"), for a
        script that reads it then; its text must hold no other shell syntax."""
        expand = expand or {}

        def word(arg: str) -> str:
            key = arg.partition("=")[0]
            return f'"{key}={expand[key]}"' if "=" in arg and key in expand else _shell_word(arg)

        head = " ".join(self.argv[:3])
        rest = [f"{indent}{word(arg)}" for arg in self.argv[3:]]
        return " \\\n".join([head, *rest])


def _bool(value: bool) -> str:
    return "True" if value else "False"


def _checkpoint_storage(recipe: Recipe) -> tuple[str, ...]:
    # Pathways cannot read zarr3/OCDBT checkpoints (seeds 000/001 pass 0); the single VM keeps
    # MaxText's own format (seed 002: 1 - USE_PATHWAYS).
    use = "0" if recipe.pathways else "1"
    return (f"checkpoint_storage_use_zarr3={use}", f"checkpoint_storage_use_ocdbt={use}")


def _unique(recipe: Recipe, step: Step, overrides: list[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    for item in overrides:
        key = item.split("=", 1)[0]
        if key in seen:
            raise UserError(
                f"recipe '{recipe.name}': {step} sets '{key}' twice; remove it from rl.overrides "
                "(tpu-rl derives it from the recipe)"
            )
        seen.add(key)
    return tuple(overrides)


def convert_command(recipe: Recipe, paths: ArtifactPaths) -> MaxTextCommand:
    """Hugging Face checkpoint -> MaxText checkpoint at paths.converted (to_maxtext writes 0/items)."""
    overrides = [
        f"model_name={recipe.model.maxtext_name}",
        f"base_output_directory={paths.converted}",
        f"scan_layers={_bool(recipe.model.scan_layers)}",
        f"use_multimodal={_bool(recipe.model.use_multimodal)}",
        "skip_jax_distributed_system=true",
        *_checkpoint_storage(recipe),
        "hardware=cpu",
    ]
    flags = (f"--hf_model_path={recipe.model.hf_repo}", *_cpu_step_args(recipe).convert_flags)
    return MaxTextCommand(TO_MAXTEXT, _unique(recipe, "convert", overrides), flags)


def train_command(recipe: Recipe, paths: ArtifactPaths) -> MaxTextCommand:
    """GRPO with train_rl: loads exactly what convert wrote, writes checkpoints under paths.trained."""
    derived = [
        f"run_name={paths.run_name}",
        f"base_output_directory={paths.trained}",
        f"model_name={recipe.model.maxtext_name}",
        f"scan_layers={_bool(recipe.model.scan_layers)}",
        f"load_parameters_path={paths.train_loads}",
        f"tokenizer_path={recipe.model.tokenizer}",
        f"chips_per_vm={recipe.shape.chips_per_vm}",
        f"num_batches={recipe.rl.num_batches}",
        f"checkpoint_period={recipe.rl.checkpoint_period}",
    ]
    if explicit_schedule(recipe) is None:
        # The schedule follows the run's steps under both releases (recipes/runs/schedule.py).
        derived.append(f"{SCHEDULE_KEY}={derived_schedule(recipe)}")
    return MaxTextCommand(TRAIN_RL, _unique(recipe, "train", [*derived, *recipe.rl.overrides]))


def export_command(recipe: Recipe, paths: ArtifactPaths) -> MaxTextCommand:
    """A trained checkpoint (paths.final_params: the step `run` read, or the computed last step) -> Hugging
    Face safetensors at paths.hf_export."""
    overrides = [
        f"model_name={recipe.model.maxtext_name}",
        f"load_parameters_path={paths.final_params}",
        f"base_output_directory={paths.hf_export}",
        f"scan_layers={_bool(recipe.model.scan_layers)}",  # must match training
        f"use_multimodal={_bool(recipe.model.use_multimodal)}",
        "weight_dtype=bfloat16",
    ]
    host = _cpu_step_args(recipe)
    overrides += host.export_overrides
    flags = list(host.export_flags)
    if recipe.maxtext.export_takes_hf_model_path:
        flags.append(f"--hf_model_path={recipe.model.hf_repo}")
    return MaxTextCommand(TO_HUGGINGFACE, _unique(recipe, "export", overrides), tuple(flags))


def maxtext_commands(recipe: Recipe, paths: ArtifactPaths) -> dict[Step, MaxTextCommand]:
    """Every MaxText command of a recipe, in step order."""
    return {
        "convert": convert_command(recipe, paths),
        "train": train_command(recipe, paths),
        "export": export_command(recipe, paths),
    }
