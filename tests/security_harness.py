"""Shared by the hardening tests (test_bad_input.py, test_secret_hygiene.py): a clean environment for
the real entry points, a sentinel token, and the local fake APIs (tests/peers) set up from a small
description of the cloud's state, with a snapshot of everything a command could have created."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from peers.google_apis import GoogleApis
from peers.kube_api import KubeApi, write_kubeconfig

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
TRACEBACK = "Traceback (most recent call last)"
# Every API the CLI could reach points at a closed local port unless a test sets up a peer, so nothing
# can reach Google, and an attempt shows up as a connection error instead of a cloud call.
DEAD_ENDPOINT = "http://127.0.0.1:9"
ENDPOINT_VARIABLES = ("TPU_RL_COMPUTE_ENDPOINT", "TPU_RL_TPU_ENDPOINT", "TPU_RL_SECRETMANAGER_ENDPOINT")


def sentinel_token() -> str:
    # Built at run time so that no token-shaped string sits in the source.
    return "hf_" + "SENTINEL" + uuid.uuid4().hex


def clean_environment(home: Path) -> dict[str, str]:
    """Nothing of the caller's: no HF_TOKEN, no kubeconfig, no credentials, no settings."""
    return {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CHECKPOINT_DISABLE": "1",
        "KUBECONFIG": str(home / "no-kubeconfig"),
        "STORAGE_EMULATOR_HOST": DEAD_ENDPOINT,
        **{name: DEAD_ENDPOINT for name in ENDPOINT_VARIABLES},
        "TPU_RL_RETRY_BASE_SECONDS": "0",
        "TPU_RL_POLL_SECONDS": "0",
    }


def start_gcs_emulator():
    from gcp_storage_emulator.server import create_server

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    return server, f"http://127.0.0.1:{port}"


@dataclass
class Peers:
    kube: KubeApi | None
    google: GoogleApis
    gcs_client: object
    before: dict = field(default_factory=dict)

    def gcs_objects(self) -> set[tuple[str, str]]:
        return {(bucket.name, blob.name) for bucket in self.gcs_client.list_buckets()
                for blob in bucket.list_blobs()}

    def state(self) -> dict:
        """What the fake APIs hold: anything a command created, changed or deleted shows up here."""
        kube = self.kube
        return {
            "jobsets": sorted(kube.jobsets) if kube else [],
            "jobsets created": list(kube.created) if kube else [],
            "jobsets deleted": list(kube.deleted) if kube else [],
            "kubernetes secrets": sorted(kube.secrets) if kube else [],
            "secret versions": {name: len(versions) for name, versions in self.google.secrets.items()},
            "gcs objects": self.gcs_objects(),
        }

    def stop(self) -> None:
        for server in (self.kube, self.google):
            if server is not None:
                server.stop()


def start_peers(state: dict, env: dict[str, str], home: Path, token: str, gcs_emulator) -> Peers:
    """Healthy fake APIs for env's settings, changed where `state` says; env is pointed at them.

    state keys: bucket (absent | a region), reservation (absent | [machine type, count, in use]),
    accelerators (absent), secret (absent | empty; otherwise it holds `token`), kube (absent |
    no-jobset-crd | other-context), stale ([step, phase] of a JobSet left from an earlier run).
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from peers.fixtures import make_bucket

    server, url = gcs_emulator
    server.wipe()
    env["STORAGE_EMULATOR_HOST"] = url
    gcs_client = storage.Client(project=env["PROJECT"], credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": url})
    bucket = state.get("bucket", "present")
    if bucket != "absent":
        make_bucket(gcs_client, env["GCS_BUCKET"], env["REGION"] if bucket == "present" else bucket)

    google = GoogleApis().start()
    zone = env["ZONE"]
    reservation = state.get("reservation", ["ct6e-standard-4t", 16, 0])
    if reservation != "absent":
        google.reservations[(zone, env["RESERVATION"])] = tuple(reservation)
    google.machine_types.update({(zone, "ct6e-standard-4t"), (zone, "ct6e-standard-8t")})
    if state.get("accelerators") != "absent":
        google.accelerator_types.update({(zone, "v6e-8"), (zone, "v6e-32"), (zone, "v6e-64")})
    secret = state.get("secret", "present")
    if secret != "absent":
        google.secrets["hf-token"] = [] if secret == "empty" else [{"data": token.encode(), "state": "ENABLED"}]
    for name in ENDPOINT_VARIABLES:
        env[name] = google.url

    kube = None
    cluster = state.get("kube", "healthy")
    if cluster != "absent":
        kube = KubeApi().start()
        kube.crd_installed = cluster != "no-jobset-crd"
        context = f"gke_{env['PROJECT']}_{env['REGION']}_{env['CLUSTER_NAME']}"
        if cluster == "other-context":
            context = "gke_someone-else_us-central1_other"
        kubeconfig = home / "kubeconfig"
        write_kubeconfig(kubeconfig, kube.url, context)
        env["KUBECONFIG"] = str(kubeconfig)
        if "stale" in state:
            from jobs import render_manifests
            from recipes import get_recipe, load_settings

            step, phase = state["stale"]
            recipe = get_recipe(state.get("recipe", "qwen3-v6e32"))
            kube.put_jobset(render_manifests(recipe, load_settings(env=env))[step], phase=phase)
            kube.requests.clear()
    peers = Peers(kube, google, gcs_client)
    peers.before = peers.state()
    return peers
