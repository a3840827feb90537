"""A run.json in the GCS emulator, for the tests that start the peers with `record` in their state."""

from __future__ import annotations

import json


def put_run_record(gcs_client, env: dict[str, str], state: dict) -> None:
    """A run.json of run `record` of `recipe` (qwen3-v6e32 unless told), holding only the --set items
    `record_set` (and its recipe and `record_status`, when the state gives one)."""
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from tpu_rl.recipes import get_recipe, load_settings
    from tpu_rl.recipes.runs.spec import RunSpec

    spec = RunSpec.requested(get_recipe(state.get("recipe", "qwen3-v6e32")), (), state["record"])
    bucket_name, name = split_gs_url(ArtifactPaths(spec, load_settings(env=env)).run_record)
    status = {"recipe": spec.recipe.name, "status": state["record_status"]} if "record_status" in state else {}
    gcs_client.bucket(bucket_name).blob(name).upload_from_string(
        json.dumps({"overrides": {"set": list(state.get("record_set", ()))}, **status}))
