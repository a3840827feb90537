"""What the fit check compiles for one run (scripts/fit/maxtext_compile.py reads it): the run's own
train arguments less those that cannot change memory, its TPU topology, and the recipe's source patches
of MaxText's files as the train container runs them. Two runs with the same request compile the same
programs, so it is also the memory shape a sweep compiles once."""

from __future__ import annotations

from tpu_rl.jobs.maxtext import train_command
from tpu_rl.jobs.patches import IMAGE_SOURCE_ROOT, render_patch, resolve_patches
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import Settings
from tpu_rl.recipes.fit import memory_items
from tpu_rl.recipes.runs.spec import RunSpec

# Stand-ins for what changes no buffer's size: the tokenizer's pad id (its existence decides whether the
# model masks pads by segment ids), its end of sequence, and the step count 0.2.3's optimizer takes for
# its schedule.
PAD_ID, EOS_ID, SCHEDULE_STEPS = 0, 1, 1
GIB = 1 << 30


def compile_request(spec: RunSpec, settings: Settings) -> dict:
    recipe = spec.recipe
    items = train_command(recipe, ArtifactPaths(spec, settings)).overrides
    patches = [{"file": patch.path.removeprefix(IMAGE_SOURCE_ROOT), "script": render_patch(patch)}
               for patch in resolve_patches(recipe).apply if patch.path is not None and patch.path.startswith(IMAGE_SOURCE_ROOT)]
    return {"maxtext_version": recipe.maxtext_version, "accelerator": recipe.shape.accelerator_type,
            "slices": recipe.shape.slices, "argv": list(memory_items(items)), "patches": patches,
            "source_root": IMAGE_SOURCE_ROOT, "pad_id": PAD_ID if recipe.model.pad_token else None,
            "eos_id": EOS_ID, "train_steps": SCHEDULE_STEPS,
            "vllm_hbm_bytes": recipe.tpu_facts.vllm_hbm_gib * GIB if recipe.pathways else None,
            **({"compiler_options": recipe.rl.compiler_options} if recipe.rl.xla_flags else {})}
