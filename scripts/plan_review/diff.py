"""What differs between two sides' stacks and manifests, field by field (pure: no git, no synth)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tpu_rl.jobs.k8s import CONVERSION_LABEL, RUN_LABEL, SPEC_DIGEST_ANNOTATION
from tpu_rl.scripts.field_diff import MISSING, changed_fields


# --------------------------------------------------------------------------------------------------
# Stacks

def resources(synth: dict) -> dict[str, dict]:
    """Addresses -> configuration for a synthesized stack: resources, data sources and outputs."""
    found: dict[str, dict] = {}
    for kind, blocks in synth.get("resource", {}).items():
        for name, body in blocks.items():
            found[f"{kind}.{name}"] = body
    for kind, blocks in synth.get("data", {}).items():
        for name, body in blocks.items():
            found[f"data.{kind}.{name}"] = body
    for name, body in synth.get("output", {}).items():
        found[f"output.{name}"] = body
    return found


@dataclass
class StackDiff:
    name: str
    status: str  # "added", "removed", "changed"
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[tuple[str, list[tuple[str, str, list[str]]]]] = field(default_factory=list)


def diff_stacks(before: dict[str, dict], after: dict[str, dict]) -> list[StackDiff]:
    diffs = []
    for stack in sorted(before.keys() | after.keys()):
        old, new = resources(before.get(stack, {})), resources(after.get(stack, {}))
        status = "added" if stack not in before else "removed" if stack not in after else "changed"
        diff = StackDiff(stack, status, sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys()))
        for address in sorted(old.keys() & new.keys()):
            fields = changed_fields(old[address], new[address])
            if fields:
                diff.changed.append((address, fields))
        if diff.added or diff.removed or diff.changed or status != "changed":
            diffs.append(diff)
    return diffs


def beyond(diffs: list[StackDiff], shown: list[StackDiff]) -> list[StackDiff]:
    """`diffs` less everything `shown` already says: the same added or removed address, the same changed
    field of the same address (for the capacity-mode build, which repeats the default build's changes)."""
    known = {diff.name: diff for diff in shown}
    out = []
    for diff in diffs:
        seen = known.get(diff.name, StackDiff(diff.name, diff.status))
        seen_fields = {(address, path, text) for address, fields in seen.changed for path, text, _ in fields}
        rest = StackDiff(diff.name, diff.status if diff.name not in known else "changed",
                         [a for a in diff.added if a not in seen.added],
                         [a for a in diff.removed if a not in seen.removed])
        for address, fields in diff.changed:
            new = [f for f in fields if (address, f[0], f[1]) not in seen_fields]
            if new:
                rest.changed.append((address, new))
        if rest.added or rest.removed or rest.changed or (rest.status != "changed" and diff.name not in known):
            out.append(rest)
    return out


# --------------------------------------------------------------------------------------------------
# Manifests

@dataclass
class StepDiff:
    recipe: str
    step: str
    status: str  # "added", "removed", "changed"
    fields: list[tuple[str, str, list[str]]] = field(default_factory=list)


IDENTITY_LABELS = (RUN_LABEL, CONVERSION_LABEL)
IDENTITY_PLACEHOLDER = "<run>"


def without_identity(manifest: object) -> tuple[object, str | None]:
    """The manifest with its run (or conversion) name replaced by a placeholder and its spec digest
    dropped, and that name. Any change of what trains gives a new run name (recipes/runs/identity.py), which then
    appears in the JobSet name, labels and every output path: the review shows it once, not in each."""
    if not isinstance(manifest, dict):  # a VM recipe's startup script
        return manifest, None
    labels = manifest.get("metadata", {}).get("labels", {})
    identity = next((labels[key] for key in IDENTITY_LABELS if key in labels), None)
    text = json.dumps(manifest)
    if identity:
        text = text.replace(identity, IDENTITY_PLACEHOLDER)  # run names are [a-z0-9-]: no JSON escaping
    plain = json.loads(text)
    annotations = plain.get("metadata", {}).get("annotations", {})
    annotations.pop(SPEC_DIGEST_ANNOTATION, None)
    if not annotations:
        plain.get("metadata", {}).pop("annotations", None)
    return plain, identity


def diff_manifests(before: dict[str, dict], after: dict[str, dict]) -> list[StepDiff]:
    diffs = []
    for recipe in sorted(before.keys() | after.keys()):
        old_steps, new_steps = before.get(recipe, {}), after.get(recipe, {})
        for step in [*old_steps.keys(), *(s for s in new_steps if s not in old_steps)]:
            if step not in old_steps:
                diffs.append(StepDiff(recipe, step, "added"))
            elif step not in new_steps:
                diffs.append(StepDiff(recipe, step, "removed"))
            else:
                (old, old_id), (new, new_id) = without_identity(old_steps[step]), without_identity(new_steps[step])
                fields = changed_fields(old, new)
                if old_id != new_id:
                    what = "conversion" if step == "convert" else "run"
                    fields.insert(0, ("", f"{what} {old_id or MISSING} → {new_id or MISSING} (nothing of the old "
                                          f"{what} is reused)", []))
                if fields:
                    diffs.append(StepDiff(recipe, step, "changed", fields))
    return diffs
