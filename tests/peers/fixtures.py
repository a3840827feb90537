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


def put_step_output(client, recipe, step: str) -> None:
    """Write what a finished step leaves in the bucket (what the container would write)."""
    from jobs.paths import ArtifactPaths, split_gs_url

    paths = ArtifactPaths(recipe, peer_settings())
    objects = {
        "convert": [paths.converted_items + "manifest.ocdbt"],
        "train": [paths.final_params + "_METADATA"],
        "export": [paths.hf_export + "config.json", paths.hf_export + "model-00001-of-00001.safetensors"],
    }[step]
    for url in objects:
        bucket, name = split_gs_url(url)
        client.bucket(bucket).blob(name).upload_from_string(b"{}")
