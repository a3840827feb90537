"""What a run's record (run.json, written by scripts/pipeline/record.py) says about the run, for `tpu-rl runs`
and `tpu-rl metrics` alike."""

from __future__ import annotations

from tpu_rl.jobs.paths import RUN_RECORD
from tpu_rl.recipes import Recipe
from tpu_rl.recipes.outcome import ApiError


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


def records_under(storage, trained: str) -> dict[str, dict | None]:
    """Every run directory under a `trained/` prefix, with its record (None without one; a record that is
    not JSON is marked unreadable). No bucket: no run."""
    from google.api_core import exceptions as gexc

    from tpu_rl.scripts.cloud import gcs
    from tpu_rl.scripts.rundata.events import runs_under

    try:
        names = runs_under(storage, trained)
    except gexc.NotFound:
        return {}
    except gexc.GoogleAPIError as error:
        raise ApiError(f"listing the runs under {trained} failed: {error}") from None
    records: dict[str, dict | None] = {}
    for name in names:
        try:
            records[name] = gcs.read_json(storage, f"{trained}{name}/{RUN_RECORD}")
        except ApiError:
            records[name] = {"status": "unreadable run.json"}
    return records
