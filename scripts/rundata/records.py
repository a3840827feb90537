"""What a run's record (run.json, written by scripts/pipeline/record.py) says about the run, for `tpu-rl runs`
and `tpu-rl metrics` alike."""

from __future__ import annotations

from recipes import Recipe


def record_differences(recipe: Recipe, record: dict) -> tuple[str, ...]:
    """What a run changed from its recipe, by its record: the --set items, the reward and data files
    (--rewards, --data-processor) and the capacity its train step ran on when not the recipe's first."""
    changes = [*((record.get("overrides") or {}).get("set") or [])]
    for kind, entry in (record.get("files") or {}).items():
        changes.append(f"{kind} {entry.get('name')}" + (f":{entry['functions']}" if entry.get("functions") else ""))
    capacity = ((record.get("steps") or {}).get("train") or {}).get("capacity")
    if capacity and capacity != recipe.capacity[0]:
        changes.append(f"capacity {capacity}")
    return tuple(changes)
