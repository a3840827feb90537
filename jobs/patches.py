"""The seeds' source patches, rendered as named, readable shell steps (or as settings where MaxText has one).

Each recipes.SourcePatch is applied only on the MaxText versions it names. When the pinned version is at
or after `setting_from`, the patch is replaced by its `setting_env` environment variables. A patch that
finds neither its old text nor its new text, or no file to patch, fails the step loudly, instead of
silently training with the unpatched code as the seeds' one-liners would. The image is the same on every
attempt, so such a failure is a check that no retry can pass: it ends with the `tpu-rl check failed:` line
and CHECK_FAILED_EXIT_CODE (tpu_rl.jobs.checks), on which the restartable train JobSet fails at once instead of
holding the slice for its restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpu_rl.jobs.checks import python_check_failed
from tpu_rl.jobs.maxtext import at_least
from tpu_rl.recipes import Recipe, SourcePatch, UserError

# The image's MaxText source root, where the recipes' patches of MaxText's own files point
# (recipes.toml [patches.*].path; MaxText's Dockerfile copies src/ there, as the seeds' patch paths show).
IMAGE_SOURCE_ROOT = "/deps/src/"


@dataclass(frozen=True)
class ResolvedPatches:
    apply: tuple[SourcePatch, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def resolve_patches(recipe: Recipe) -> ResolvedPatches:
    """Which patches to apply in source and which environment settings replace the others."""
    apply: list[SourcePatch] = []
    env: dict[str, str] = {}
    for patch in recipe.patches:
        if patch.setting_from and at_least(recipe.maxtext_version, patch.setting_from):
            env.update(patch.setting_env)
        elif recipe.maxtext_version in patch.maxtext_versions:
            apply.append(patch)
        else:
            raise UserError(
                f"recipe '{recipe.name}': patch '{patch.name}' is known for MaxText "
                f"{', '.join(patch.maxtext_versions)}, not {recipe.maxtext_version}; check whether it is still "
                f"needed and add the version to [patches.{patch.name}].maxtext_versions, or drop it from rl.patches"
            )
    return ResolvedPatches(tuple(apply), env)


def _target(patch: SourcePatch) -> list[str]:
    """Lines that set `path` to the file to patch, or refuse when there is none."""
    if patch.module:
        return [
            "try:",
            f"    spec = importlib.util.find_spec({patch.module!r})",
            "except ImportError:",
            "    spec = None",
            "if spec is None or not spec.origin:",
            f"    check_failed('patch {patch.name}: module {patch.module} is not installed in this image')",
            "path = pathlib.Path(spec.origin)",
        ]
    return [
        f"path = pathlib.Path({patch.path!r})",
        "if not path.is_file():",
        f"    check_failed(f'patch {patch.name}: {{path}} does not exist in this image')",
    ]


def render_patch(patch: SourcePatch) -> str:
    """One patch as a bash step: a comment naming it, then a short Python program in a quoted heredoc."""
    summary = " ".join(patch.description.split())
    replace = "re.subn(old, new, text)" if patch.regex else "(text.replace(old, new), text.count(old))"
    return "\n".join([
        f"# source patch '{patch.name}': {summary}",
        "python3 - <<'PATCH'",
        "import importlib.util, pathlib, re, sys",
        python_check_failed(),
        *_target(patch),
        "text = path.read_text()",
        f"for old, new in {list(patch.replacements)!r}:",
        f"    text, count = {replace}",
        "    if count == 0 and new not in text:",
        f"        check_failed(f'patch {patch.name}: {{old!r}} not found in {{path}}')",
        "path.write_text(text)",
        f"print('applied patch {patch.name} to', path)",
        "PATCH",
    ])


def patches_table(recipes: list[Recipe]) -> str:
    """The table of source patches in docs/pipeline.md, from the recipe table (a test keeps it in sync)."""
    rows = ["| patch | recipes | MaxText versions patched | replaced by a setting from | why |",
            "| --- | --- | --- | --- | --- |"]
    by_name: dict[str, tuple[SourcePatch, list[str]]] = {}
    for recipe in recipes:
        for patch in recipe.patches:
            by_name.setdefault(patch.name, (patch, []))[1].append(recipe.name)
    for name, (patch, users) in sorted(by_name.items()):
        setting = (f"{patch.setting_from} (`{', '.join(f'{k}={v}' for k, v in patch.setting_env.items())}`)"
                   if patch.setting_from else "-")
        why = " ".join(patch.description.split())
        rows.append(f"| `{name}` | {', '.join(users)} | {', '.join(patch.maxtext_versions)} | {setting} | {why} |")
    return "\n".join(rows)
