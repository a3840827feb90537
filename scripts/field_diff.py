"""What differs between two JSON values, field by field: nested values flattened to dotted paths, scripts and
argument lists by their key=value arguments (pure). Plan review shows stacks' and manifests' changes with it,
and the pipeline a stored run's changed manifest."""

from __future__ import annotations

import difflib
import json
import re
import shlex

import yaml

MISSING = "(none)"
MAX_VALUE_CHARS = 80
MAX_TEXT_LINES = 12

Leaf = object  # a scalar, a list of scalars, or an empty container


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _object_name(item: object) -> str | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("name"), str):
        return item["name"]
    metadata = item.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):  # a Kubernetes object
        return f"{item.get('kind', '')}/{metadata['name']}".lstrip("/")
    return None


def _list_keys(items: list) -> list[str]:
    """Lists of named objects (containers, env, replicatedJobs, Kubernetes objects) are keyed by name,
    others by index."""
    names = [_object_name(item) for item in items]
    if all(names) and len(set(names)) == len(names):
        return [f"[{name}]" for name in names]
    return [f".{index}" for index in range(len(items))]


def _structured(value: object) -> dict | list | None:
    """JSON or YAML embedded in a string (Helm values, Kubernetes manifests), parsed; None otherwise."""
    if not isinstance(value, str) or ("\n" not in value and not value.lstrip().startswith(("{", "["))):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return None
    return parsed if isinstance(parsed, (dict, list)) and parsed else None


def flatten(value: object, path: str = "") -> dict[str, Leaf]:
    """Nested JSON to dotted paths, e.g. {"placement_policy": {"tpu_topology": "4x8"}} ->
    {"placement_policy.tpu_topology": "4x8"}. JSON or YAML inside strings is flattened too. Lists of
    plain scalars stay whole (they diff as sets of arguments); keys starting with "//" (cdktf metadata)
    are dropped."""
    parsed = _structured(value)
    if parsed is not None:
        return flatten(parsed, path)
    if isinstance(value, dict) and value:
        flat: dict[str, Leaf] = {}
        for key, child in value.items():
            if str(key).startswith("//"):
                continue
            flat.update(flatten(child, f"{path}.{key}" if path else str(key)))
        return flat
    if isinstance(value, list) and value and not all(_is_scalar(i) and _structured(i) is None for i in value):
        flat = {}
        for key, child in zip(_list_keys(value), value):
            flat.update(flatten(child, f"{path}{key}" if path else key.lstrip(".")))
        return flat
    return {path: value}


def _show(value: Leaf) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split()) if "\n" not in text else text
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


_KEY_VALUE = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.DOTALL)


def _tokens(value: Leaf) -> list[str]:
    """Shell words of a script, or of each item of an argument list (a whole key=value item is one word)."""
    if isinstance(value, list):
        return [token for item in value for token in
                ([str(item)] if _KEY_VALUE.match(str(item)) or not str(item).split() else _tokens(str(item)))]
    try:
        return shlex.split(str(value))
    except ValueError:  # unbalanced quotes in a script: fall back to whitespace
        return str(value).split()


def _split_arguments(tokens: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """key=value arguments (a key may repeat, e.g. in several commands of a script) and the rest."""
    pairs: dict[str, list[str]] = {}
    rest: list[str] = []
    for token in tokens:
        match = _KEY_VALUE.match(token)
        if match:
            pairs.setdefault(match.group(1), []).append(match.group(2))
        else:
            rest.append(token)
    return pairs, rest


def _argument_changes(old: dict[str, list[str]], new: dict[str, list[str]]) -> list[str]:
    changes: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is not None and after is not None:
            changes.append(f"{key} {_show(', '.join(before))} → {_show(', '.join(after))}")
        elif after is not None:
            changes.extend(f"+ {key}={_show(v)}" for v in after)
        elif before is not None:
            changes.extend(f"- {key}={_show(v)}" for v in before)
    return changes


def _item_changes(old: list[str], new: list[str]) -> list[str]:
    removed = [item for item in old if item not in new]
    added = [item for item in new if item not in old]
    changes = [f"+ {_show(item)}" for item in added] + [f"- {_show(item)}" for item in removed]
    return changes or ["reordered"]


def describe(old: Leaf, new: Leaf) -> tuple[str, list[str]]:
    """One changed value as (inline text, extra lines). Argument lists and scripts diff as key=value
    sets; other multi-line text as changed lines; everything else as old → new."""
    textual = all(isinstance(v, (str, list)) and not (isinstance(v, list) and not all(_is_scalar(i) for i in v))
                  for v in (old, new))
    if textual:
        old_pairs, old_rest = _split_arguments(_tokens(old))
        new_pairs, new_rest = _split_arguments(_tokens(new))
        if (old_pairs or new_pairs) and old_rest == new_rest:
            return "; ".join(_argument_changes(old_pairs, new_pairs)) or "reordered", []
        if isinstance(old, list) and isinstance(new, list):
            return "; ".join(_item_changes([str(i) for i in old], [str(i) for i in new])), []
        if "\n" in f"{old}{new}":
            lines = [
                line for line in difflib.unified_diff(str(old).splitlines(), str(new).splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and not line.startswith(("+++", "---"))
            ]
            shown = [f"`{line}`" for line in lines[:MAX_TEXT_LINES]]
            if len(lines) > MAX_TEXT_LINES:
                shown.append(f"… {len(lines) - MAX_TEXT_LINES} more changed lines")
            return f"{len(lines)} lines changed", shown
    return f"{_show(old)} → {_show(new)}", []


def changed_fields(before: object, after: object) -> list[tuple[str, str, list[str]]]:
    """(path, description, extra lines) for every flattened field that differs, in path order."""
    old, new = flatten(before), flatten(after)
    out = []
    for path in sorted(old.keys() | new.keys()):
        if old.get(path, MISSING) != new.get(path, MISSING):
            text, extra = describe(old.get(path), new.get(path))
            out.append((path, text, extra))
    return out
