"""pytest fixtures that start the peers on 127.0.0.1 and point `tpu-rl` at them through its settings
and endpoint variables. Import the fixtures you need into a test module."""

from __future__ import annotations

import socket

import pytest

from peers.google_apis import GoogleApis
from peers.kube_api import KubeApi, write_kubeconfig

SETTINGS = {
    "PROJECT": "tpu-rl-test",
    "REGION": "us-east5",
    "ZONE": "us-east5-b",
    "CLUSTER_NAME": "rl-test",
    "GCS_BUCKET": "rl-test-artifacts",
    "RESERVATION": "v6e-reservation",
    "AUTHORIZED_CIDR": "203.0.113.7/32",
}
CONTEXT = "gke_tpu-rl-test_us-east5_rl-test"
TOKEN = "hf_SENTINELtoken0123456789"  # must never show up in output or in what the CLI sends


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_server():
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield server, f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def gcs(gcs_server, monkeypatch):
    """A storage client on the emulator, with the settings' bucket in REGION, empty for each test."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server, url = gcs_server
    server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    client = storage.Client(project=SETTINGS["PROJECT"], credentials=AnonymousCredentials())
    make_bucket(client, SETTINGS["GCS_BUCKET"], SETTINGS["REGION"])
    return client


def make_bucket(client, name: str, region: str):
    """Create a bucket in a region. The emulator ignores the location on insert, so patch it in, in the
    upper case GCS reports (US-EAST5)."""
    bucket = client.create_bucket(name)
    bucket._patch_property("location", region.upper())
    bucket.patch()
    return bucket


@pytest.fixture
def kube(tmp_path, monkeypatch):
    server = KubeApi().start()
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, server.url, CONTEXT)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield server
    server.stop()


@pytest.fixture
def google(monkeypatch):
    """Compute, TPU and Secret Manager with a healthy v6e setup: capacity free, token stored."""
    server = GoogleApis().start()
    zone = SETTINGS["ZONE"]
    server.reservations[(zone, SETTINGS["RESERVATION"])] = ("ct6e-standard-4t", 16, 0)
    server.machine_types.update({(zone, "ct6e-standard-4t"), (zone, "ct6e-standard-8t")})
    server.accelerator_types.update({(zone, "v6e-8"), (zone, "v6e-32"), (zone, "v6e-64")})
    server.secrets["hf-token"] = [{"data": TOKEN.encode(), "state": "ENABLED"}]
    for name in ("TPU_RL_COMPUTE_ENDPOINT", "TPU_RL_TPU_ENDPOINT", "TPU_RL_SECRETMANAGER_ENDPOINT"):
        monkeypatch.setenv(name, server.url)
    yield server
    server.stop()


@pytest.fixture
def settings_env(tmp_path, monkeypatch):
    """The test settings in the environment, fast polling and retries, and no config file around."""
    monkeypatch.chdir(tmp_path)
    for key in ("TPU_RL_CONFIG", "HF_TOKEN", "TPU_NAME", "HF_TOKEN_SECRET", "TF_STATE_BUCKET"):
        monkeypatch.delenv(key, raising=False)
    for key, value in SETTINGS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TPU_RL_POLL_SECONDS", "0")
    monkeypatch.setenv("TPU_RL_RETRY_BASE_SECONDS", "0")
    return dict(SETTINGS)


@pytest.fixture
def cloud(settings_env, gcs, kube, google):
    """Everything `tpu-rl run` talks to, healthy."""
    return {"gcs": gcs, "kube": kube, "google": google}


def peer_settings():
    from recipes import load_settings

    return load_settings(env=SETTINGS)


def _orbax_checkpoint(item_dir: str, items: tuple[str, ...], ocdbt: bool) -> list[tuple[str, bytes]]:
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
    from jobs.paths import ArtifactPaths, split_gs_url

    paths = ArtifactPaths(recipe, peer_settings())
    objects = {
        # to_maxtext: MaxText create_orbax_checkpoint_manager (common/checkpointing.py), item "items".
        "convert": lambda: _orbax_checkpoint(paths.converted_items, ("items",), ocdbt=True),
        # train_rl: tunix CheckpointManager (tunix/sft/checkpoint_manager.py), items model_params and
        # optimizer_state, without OCDBT under Pathways.
        "train": lambda: _orbax_checkpoint(paths.final_params, ("model_params", "optimizer_state"), ocdbt=False),
        "export": lambda: _hf_export(paths.hf_export),
    }[step]()
    for url, data in objects:
        bucket, name = split_gs_url(url)
        client.bucket(bucket).blob(name).upload_from_string(data)
