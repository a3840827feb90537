"""The local fake APIs (tests/peers) set up for a test, in one place. Two ways in:

- pytest fixtures (settings_env, gcs, kube, hub, google, cloud) that start the peers on 127.0.0.1 and
  point the in-process `tpu-rl` at them through its settings and endpoint variables; import the ones you
  need into a test module;
- `start_peers`, for the hardening tests that run the real entry points as subprocesses
  (test_bad_input.py, test_secret_hygiene.py): the same peers set up from a small description of the
  cloud's state, pointed at by an environment from `clean_environment`, with a snapshot of everything a
  command could have created.
"""

from __future__ import annotations

import os
import queue
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from peers.google_apis import CPU_MACHINES, CPU_QUOTAS, GoogleApis
from peers.hf_hub import HubApi, start_hub
from peers.cluster_access import write_kubeconfig
from peers.kube_api import KubeApi
# Re-exported: the tests import the peers' settings and what each step writes from here
from peers.settings import SETTINGS, peer_settings, spec_of  # noqa: F401
from peers.step_outputs import EXPORT_SHARDS, put_checkpoint, put_step_output  # noqa: F401
from peers.gcs_emulator import free_port as _free_port, start_gcs_emulator  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
TRACEBACK = "Traceback (most recent call last)"

# The sentinel Hugging Face token: it must never show up in output or in what the CLI sends. Built at run
# time so that no token-shaped string sits in the source.
TOKEN = "hf_" + "SENTINEL" + uuid.uuid4().hex
# Every API the CLI could reach points at a closed local port unless a test sets up a peer, so nothing
# can reach Google, and an attempt shows up as a connection error instead of a cloud call.
DEAD_ENDPOINT = "http://127.0.0.1:9"
ENDPOINT_VARIABLES = ("TPU_RL_COMPUTE_ENDPOINT", "TPU_RL_TPU_ENDPOINT", "TPU_RL_SECRETMANAGER_ENDPOINT",
                      "TPU_RL_LOGGING_ENDPOINT", "TPU_RL_REGISTRY_ENDPOINT")
HUB_ENDPOINT = "HF_ENDPOINT"  # the Hugging Face Hub (tests/peers/hf_hub.py)
# PyPI's file host, for the run driver's locked wheels: no peer serves them (tests/peers/driver_files.py
# stages stand-ins in the bucket instead), so a download fails at a closed port, never reaching PyPI.
WHEELS_ENDPOINT = "TPU_RL_WHEELS_ENDPOINT"


def kube_context(settings: dict[str, str]) -> str:
    """The context name gcloud gives the settings' cluster: gke_<project>_<region>_<name>."""
    return f"gke_{settings['PROJECT']}_{settings['REGION']}_{settings['CLUSTER_NAME']}"


CONTEXT = kube_context(SETTINGS)


class GcsEmulators:
    """GCS emulators lent to runs side by side (start_peers wipes the one it gets): starting one takes
    milliseconds, but stopping one waits out its server's half-second poll, so they are stopped once, at
    the end."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._all: list = []

    @contextmanager
    def lend(self):
        try:
            emulator = self._free.get_nowait()
        except queue.Empty:
            emulator = start_gcs_emulator()
            self._all.append(emulator)
        try:
            yield emulator
        finally:
            self._free.put(emulator)

    def stop(self) -> None:
        for server, _ in self._all:
            server.stop()


def storage_client(project: str, url: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": url})


def make_bucket(client, name: str, region: str):
    """Create a bucket in a region. The emulator ignores the location on insert, so patch it in, in the
    upper case GCS reports (US-EAST5)."""
    bucket = client.create_bucket(name)
    bucket._patch_property("location", region.upper())
    bucket.patch()
    return bucket


def make_artifacts_bucket(emulator, client, name: str, region: str):
    """The settings' bucket as a GKE stack and an earlier `run` left it, in the emulator (server, url): the
    driver's locked wheels staged (peers/driver_files.py), so a test's `run` stages only this package's
    runtime and downloads nothing."""
    from peers.driver_files import seed_locked_wheels

    bucket = make_bucket(client, name, region)
    seed_locked_wheels(emulator, name)
    return bucket


def deploy_vm(server: GoogleApis, settings: dict[str, str], status: str = "RUNNING",
              recipe_name: str = "llama31-v6e8", run: str | None = None) -> tuple[str, str]:
    """The settings' TPU VM as its stack creates it: in `status`, with the recipe's startup script in its
    metadata (infra/tpu_vm.py); with `run`, the script of that run (a stack deployed before the recipe
    changed). Returns its (zone, name)."""
    from tpu_rl.jobs import render_startup_script
    from tpu_rl.recipes import get_recipe, load_settings
    from tpu_rl.recipes.runs.spec import RunSpec

    loaded = load_settings(env=settings)
    vm = (settings["ZONE"], loaded.vm_name)
    server.instances[vm] = status
    spec = RunSpec.of_catalog(loaded.recipe(get_recipe(recipe_name))).with_run(run)
    server.metadata[vm] = {"startup-script": render_startup_script(spec, loaded),
                           "enable-oslogin": "TRUE"}
    return vm


def power_off_vm(server: GoogleApis, vm: tuple[str, str]) -> None:
    """The guest's own power-off as Compute Engine shows it: the instance TERMINATED, its lastStopTimestamp set."""
    server.instances[vm] = "TERMINATED"
    server.boots[vm] = {"creationTimestamp": "2026-11-29T00:00:00.000-08:00",
                        "lastStopTimestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}


def start_google(settings: dict[str, str], token: str, state: dict | None = None) -> GoogleApis:
    """Compute, TPU and Secret Manager with a healthy v6e setup (capacity free, token stored), changed
    where `state` says: reservation (absent | [machine type, count, in use]), accelerators (absent),
    cpu_machine (absent: the zone lacks the CPU pools' machines), secret (absent | empty), vm (the status of
    the settings' TPU VM, e.g. RUNNING; absent without it), vm_script (other: another run's startup script)."""
    from tpu_rl.recipes.settings.specs import DEFAULT_HF_TOKEN_SECRET

    state = state or {}
    server = GoogleApis().start()
    zone = settings["ZONE"]
    if (reservation := state.get("reservation", ["ct6e-standard-4t", 16, 0])) != "absent":
        server.reservations[(zone, settings["RESERVATION"])] = tuple(reservation)
    cpu = () if state.get("cpu_machine") == "absent" else CPU_MACHINES
    server.machine_types.update((zone, name) for name in ("ct6e-standard-4t", "ct6e-standard-8t", *cpu))
    server.regions[settings["REGION"]] = dict(CPU_QUOTAS)
    if state.get("accelerators") != "absent":
        server.accelerator_types.update({(zone, "v6e-8"), (zone, "v6e-32"), (zone, "v6e-64")})
    if "vm" in state:  # vm_script: other = the script of another run than the recipe's
        deploy_vm(server, settings, state["vm"], run="older" if state.get("vm_script") == "other" else None)
    from tpu_rl.recipes import all_recipes

    for recipe in all_recipes().values():  # healthy: every image a recipe pulls is in the registry
        pathways = [recipe.pathways_images.server, recipe.pathways_images.proxy] if recipe.pathways else []
        server.images.update(image.split("/", 1)[1] for image in [recipe.maxtext.image, *pathways])
    secret = state.get("secret", "present")
    if secret != "absent":
        server.secrets[DEFAULT_HF_TOKEN_SECRET] = [] if secret == "empty" else [{"data": token.encode(), "state": "ENABLED"}]
    return server


def start_kube(kubeconfig: Path, context: str) -> KubeApi:
    """The fake Kubernetes API, and a kubeconfig whose current context `context` points at it."""
    server = KubeApi().start()
    write_kubeconfig(kubeconfig, server.url, context)
    return server


# --------------------------------------------------------------------------------------------------
# pytest fixtures: the in-process CLI against the peers

@pytest.fixture(scope="session")
def gcs_server():
    server, url = start_gcs_emulator()
    yield server, url
    server.stop()


@pytest.fixture
def gcs(gcs_server, monkeypatch):
    """A storage client on the emulator, with the settings' bucket in REGION, empty for each test."""
    server, url = gcs_server
    server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    client = storage_client(SETTINGS["PROJECT"], url)
    make_bucket(client, SETTINGS["GCS_BUCKET"], SETTINGS["REGION"])
    return client


@pytest.fixture(scope="module")
def gcs_emulators():
    """GCS emulators lent to one module's entry-point runs (start_peers), stopped at its end."""
    lent = GcsEmulators()
    yield lent
    lent.stop()


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """The fake Kubernetes API; the run's driver Job runs on a thread of the test (peers/kubelet.py)."""
    from peers.kubelet import InProcessKubelet

    server = start_kube(tmp_path / "kubeconfig", CONTEXT)
    server.kubelet = InProcessKubelet()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    yield server
    if server.kubelet is not None:
        server.kubelet.close()
    server.stop()


@pytest.fixture
def hub(monkeypatch):
    """The Hugging Face Hub, where the sentinel token reads every recipe's model."""
    server = start_hub(TOKEN)
    monkeypatch.setenv(HUB_ENDPOINT, server.url)
    yield server
    server.stop()


@pytest.fixture
def google(monkeypatch, hub):
    """Compute, TPU and Secret Manager with a healthy v6e setup: capacity free, token stored (and the Hub,
    where that token reads the recipes' models)."""
    server = start_google(SETTINGS, TOKEN)
    for name in ENDPOINT_VARIABLES:
        monkeypatch.setenv(name, server.url)
    yield server
    server.stop()


@pytest.fixture
def settings_env(tmp_path, monkeypatch):
    """The test settings in the environment, fast polling and retries, and no config file around."""
    monkeypatch.chdir(tmp_path)
    for key in ("TPU_RL_CONFIG", "HF_TOKEN", "TPU_NAME", "HF_TOKEN_SECRET", "TF_STATE_BUCKET", "VM_AFTER_RUN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in SETTINGS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TPU_RL_POLL_SECONDS", "0")
    monkeypatch.setenv("TPU_RL_RETRY_BASE_SECONDS", "0")
    monkeypatch.setenv("TPU_RL_REACH_NOTICE_SECONDS", QUIET_REACH)
    # Without the `google` peer (which points every API at itself), Cloud Logging reads fail at a closed
    # port instead of looking for credentials or reaching Google.
    if not os.environ.get("TPU_RL_LOGGING_ENDPOINT"):
        monkeypatch.setenv("TPU_RL_LOGGING_ENDPOINT", DEAD_ENDPOINT)
    if not os.environ.get(HUB_ENDPOINT):  # nor does a token check reach huggingface.co
        monkeypatch.setenv(HUB_ENDPOINT, DEAD_ENDPOINT)
    if not os.environ.get(WHEELS_ENDPOINT):  # nor the driver's staging PyPI
        monkeypatch.setenv(WHEELS_ENDPOINT, DEAD_ENDPOINT)
    return dict(SETTINGS)


@pytest.fixture
def cloud(settings_env, gcs_server, gcs, kube, google):
    """Everything `tpu-rl run` talks to, healthy (the bucket with the driver's locked wheels staged)."""
    from peers.driver_files import seed_locked_wheels

    seed_locked_wheels(gcs_server, SETTINGS["GCS_BUCKET"])
    return {"gcs": gcs, "kube": kube, "google": google}


# --------------------------------------------------------------------------------------------------
# The real entry points as subprocesses against the peers (the hardening tests)

QUIET_REACH = "600"  # no "reaching ..." line in compared outputs on a loaded machine (test_cli_unreachable's)
def clean_environment(home: Path) -> dict[str, str]:
    """Nothing of the caller's: no HF_TOKEN, kubeconfig, credentials or settings; this checkout's code."""
    return {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),  # this checkout's code, not whichever one the venv's editable install names
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CHECKPOINT_DISABLE": "1",
        "KUBECONFIG": str(home / "no-kubeconfig"),
        "STORAGE_EMULATOR_HOST": DEAD_ENDPOINT,
        **{name: DEAD_ENDPOINT for name in (*ENDPOINT_VARIABLES, HUB_ENDPOINT, WHEELS_ENDPOINT)},
        "TPU_RL_RETRY_BASE_SECONDS": "0",
        "TPU_RL_POLL_SECONDS": "0",
        "TPU_RL_REACH_NOTICE_SECONDS": QUIET_REACH,
    }


@dataclass
class Peers:
    kube: KubeApi | None
    google: GoogleApis
    hub: HubApi
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
        if self.kube is not None and self.kube.kubelet is not None:
            self.kube.kubelet.close()
        for server in (self.kube, self.google, self.hub):
            if server is not None:
                server.stop()


def start_peers(state: dict, env: dict[str, str], home: Path, token: str, gcs_emulator) -> Peers:
    """Healthy fake APIs for env's settings, changed where `state` says; env is pointed at them.

    state keys: bucket (absent | a region), tf_state (own | other | leftover-other: the recipe stack's state in
    TF_STATE_BUCKET, holding the settings' cluster, another project's, or a failed destroy's network of
    another project), kube (absent | no-jobset-crd | other-context), stale ([step,
    phase] of a JobSet left from an earlier run, of `recipe` as `stale_set` (--set items) and `stale_run`
    (--run) make it), record (the name of a run whose run.json holds only its --set items, record_set, and
    its recipe and status record_status when given),
    and those of `start_google` and `start_hub`.
    """
    server, url = gcs_emulator
    server.wipe()
    env["STORAGE_EMULATOR_HOST"] = url
    gcs_client = storage_client(env["PROJECT"], url)
    bucket = state.get("bucket", "present")
    if bucket != "absent":
        region = env["REGION"] if bucket == "present" else bucket
        make_artifacts_bucket(gcs_emulator, gcs_client, env["GCS_BUCKET"], region)

    if "tf_state" in state:  # `tpu-rl down`: peers/tf_state.py put_state
        from peers.tf_state import put_state

        put_state(gcs_client, env, state.get("recipe", "qwen3-v6e32"), state["tf_state"])
    if "record" in state:
        from peers.run_records import put_run_record

        put_run_record(gcs_client, env, state)
    google = start_google(env, token, state)
    for name in ENDPOINT_VARIABLES:
        env[name] = google.url
    hub = start_hub(token, state)
    env[HUB_ENDPOINT] = hub.url

    kube = None
    cluster = state.get("kube", "healthy")
    if cluster != "absent":
        context = "gke_someone-else_us-central1_other" if cluster == "other-context" else kube_context(env)
        kube = start_kube(home / "kubeconfig", context)
        kube.crd_installed = cluster != "no-jobset-crd"
        env["KUBECONFIG"] = str(home / "kubeconfig")
        from peers.kubelet import ProcessKubelet

        kube.kubelet = ProcessKubelet(env)  # the run's driver as a process, with what the commands get
        if "stale" in state:
            from tpu_rl.jobs import render_manifests
            from tpu_rl.recipes import get_recipe, load_settings
            from tpu_rl.recipes.runs.spec import RunSpec

            step, phase = state["stale"]
            recipe = RunSpec.requested(get_recipe(state.get("recipe", "qwen3-v6e32")), state.get("stale_set", ()),
                             state.get("stale_run"))
            kube.put_jobset(render_manifests(recipe, load_settings(env=env))[step], phase=phase)
            kube.requests.clear()
    peers = Peers(kube, google, hub, gcs_client)
    peers.before = peers.state()
    return peers


def jobset_of(recipe_name: str, step: str) -> str:
    """The name of the JobSet `tpu-rl run RECIPE` submits for a step (the recipe's own run, no --set)."""
    from tpu_rl.jobs.k8s import jobset_name
    from tpu_rl.recipes import get_recipe

    return jobset_name(spec_of(get_recipe(recipe_name)), step)
