"""What each step of a run writes to the bucket, as MaxText and orbax lay it out, for the fake pods and the
tests to put in the GCS emulator (the layouts' sources: ../shared/notes/runtime-facts.md)."""

from __future__ import annotations

from peers.settings import peer_settings, spec_of

def orbax_checkpoint(item_dir: str, items: tuple[str, ...], ocdbt: bool) -> list[tuple[str, bytes]]:
    """A checkpoint as orbax-checkpoint 0.12.x's CheckpointManager leaves it on GCS, in write order.

    On gs:// orbax writes in place and finalizes with CommitFileTemporaryPath
    (orbax/checkpoint/_src/path/atomicity_defaults.py): each item directory, then the step directory, gets
    `commit_success.txt` with this text (_src/path/atomicity.py; name in atomicity_types.py). The step
    directory holds `_CHECKPOINT_METADATA` (_src/metadata/checkpoint.py), a PyTree item `_METADATA`
    (_src/path/format_utils.py) and, with OCDBT, `manifest.ocdbt`.
    """
    step_dir = item_dir.rstrip("/").rpartition("/")[0] + "/"
    objects = [(step_dir + "_CHECKPOINT_METADATA", b"{}")]
    for item in items:
        objects += [(f"{step_dir}{item}/_METADATA", b"{}")]
        objects += [(f"{step_dir}{item}/manifest.ocdbt", b"\0")] if ocdbt else []
        objects += [(f"{step_dir}{item}/commit_success.txt",
                     f"Checkpoint commit was successful to {step_dir}{item}".encode())]
    return objects + [(step_dir + "commit_success.txt",
                       f"Checkpoint commit was successful to {step_dir.rstrip('/')}".encode())]


# What MaxText's to_huggingface leaves for a model over 3 GB (save_model_files and shard_checkpoint in
# maxtext/checkpoint_conversion/utils/utils.py, 0.2.3 and 0.2.4): the tokenizer files that
# transformers 5.x save_pretrained writes for a tokenizers-backed tokenizer (tokenization_utils_base.py,
# tokenization_utils_tokenizers.py), chat_template.jinja when the model has one, config.json, the
# shards model-0000i-of-0000N.safetensors, and last model.safetensors.index.json naming each tensor's shard.
EXPORT_SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _hf_export(export_dir: str) -> list[tuple[str, bytes]]:
    import json

    weight_map = {"lm_head.weight": EXPORT_SHARDS[1], "model.embed_tokens.weight": EXPORT_SHARDS[0]}
    index = {"metadata": {"total_size": 2 * 3 * 1024**3}, "weight_map": weight_map}
    return [(export_dir + "tokenizer_config.json", b"{}"), (export_dir + "chat_template.jinja", b""),
            (export_dir + "tokenizer.json", b"{}"), (export_dir + "config.json", b"{}"),
            *((export_dir + shard, b"\0") for shard in EXPORT_SHARDS),
            (export_dir + "model.safetensors.index.json", json.dumps(index, indent=2).encode())]


def put_step_output(client, recipe, step: str) -> None:
    """Write what a finished step leaves in the bucket (what the container would write)."""
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url

    paths = ArtifactPaths(spec_of(recipe), peer_settings())
    objects = {
        # to_maxtext: MaxText create_orbax_checkpoint_manager (common/checkpointing.py), item "items".
        "convert": lambda: orbax_checkpoint(paths.converted_items, ("items",), ocdbt=True),
        # train_rl: tunix CheckpointManager (tunix/sft/checkpoint_manager.py), items model_params and
        # optimizer_state, without OCDBT under Pathways.
        "train": lambda: orbax_checkpoint(paths.final_params, ("model_params", "optimizer_state"), ocdbt=False),
        "export": lambda: _hf_export(paths.hf_export),
    }[step]()
    for url, data in objects:
        bucket, name = split_gs_url(url)
        client.bucket(bucket).blob(name).upload_from_string(data)


def put_checkpoint(client, paths, step: int) -> None:
    """A finished train_rl checkpoint of `step` under the run's checkpoints/actor/ (as put_step_output's)."""
    from tpu_rl.jobs.paths import split_gs_url

    for url, data in orbax_checkpoint(f"{paths.actor_checkpoints}{step}/model_params/",
                                       ("model_params", "optimizer_state"), ocdbt=False):
        bucket, name = split_gs_url(url)
        client.bucket(bucket).blob(name).upload_from_string(data)
