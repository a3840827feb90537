"""Every cloud client is built here, and only here.

Production uses the user's Application Default Credentials and kubeconfig. Tests (and anyone with a
local emulator) point each API at another endpoint through environment variables; a redirected
client talks REST with anonymous credentials, so no Google credential is ever needed or sent there.

    TPU_RL_COMPUTE_ENDPOINT, TPU_RL_TPU_ENDPOINT, TPU_RL_SECRETMANAGER_ENDPOINT  e.g. http://127.0.0.1:8123
    TPU_RL_LOGGING_ENDPOINT                                                    (Cloud Logging, REST)
    TPU_RL_REGISTRY_ENDPOINT                          (the image registry's /v2/ API, scripts/cloud/registry.py)
    TPU_RL_WHEELS_ENDPOINT              (the driver's locked wheels, scripts/pipeline/gke/driver_image.py)
    HF_ENDPOINT                          (the Hugging Face Hub, huggingface_hub's own; scripts/cloud/hf_hub.py)
    STORAGE_EMULATOR_HOST                                                      (google-cloud-storage's own)
    KUBECONFIG                                                                 (kubectl's own)
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

from tpu_rl.recipes import Settings, UserError
from tpu_rl.recipes.outcome import CredentialsMissing

T = TypeVar("T")

COMPUTE_ENDPOINT_ENV = "TPU_RL_COMPUTE_ENDPOINT"
TPU_ENDPOINT_ENV = "TPU_RL_TPU_ENDPOINT"
SECRETMANAGER_ENDPOINT_ENV = "TPU_RL_SECRETMANAGER_ENDPOINT"
LOGGING_ENDPOINT_ENV = "TPU_RL_LOGGING_ENDPOINT"
REGISTRY_ENDPOINT_ENV = "TPU_RL_REGISTRY_ENDPOINT"
WHEELS_ENDPOINT_ENV = "TPU_RL_WHEELS_ENDPOINT"
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
HUB_ENDPOINT_ENV = "HF_ENDPOINT"
# The default endpoints of the clients whose first contact is bounded (tpu_rl.scripts.cloud.reach.call_within),
# named in what they say: compute_v1's, tpu_v2's and secretmanager_v1's DEFAULT_ENDPOINT.
GOOGLE_APIS = {"compute": "https://compute.googleapis.com", "tpu": "https://tpu.googleapis.com",
               "secretmanager": "https://secretmanager.googleapis.com"}


_LOCAL_HOSTS = ("127.0.0.1", "localhost")
# Where the sandbox keeps its stand-ins (tests/peers/sandbox.py), under its directory: its `npx`, whose `cdktf
# destroy|deploy` is simulated. Any other npx first on PATH runs the real cdktf against the real state bucket
# (Terraform's GCS backend ignores STORAGE_EMULATOR_HOST), so `down` would destroy a real stack.
SANDBOX_BIN = "bin"


def outside_sandbox(env: Mapping[str, str], root: str) -> list[str]:
    """What of `env` would reach beyond a local sandbox (tests/peers/sandbox.py): each endpoint above unset or
    not on this machine, a KUBECONFIG outside the sandbox's directory `root`, and an `npx` first on PATH other
    than the sandbox's own (SANDBOX_BIN), e.g. `HF_ENDPOINT is unset`."""
    outside = []
    for name in (COMPUTE_ENDPOINT_ENV, TPU_ENDPOINT_ENV, SECRETMANAGER_ENDPOINT_ENV, LOGGING_ENDPOINT_ENV,
                 REGISTRY_ENDPOINT_ENV, WHEELS_ENDPOINT_ENV, STORAGE_EMULATOR_ENV, HUB_ENDPOINT_ENV):
        value = env.get(name, "")
        if urllib.parse.urlsplit(value).hostname not in _LOCAL_HOSTS:
            outside.append(f"{name} is {'unset' if not value else value}")
    kubeconfig = os.path.abspath(env.get("KUBECONFIG", ""))
    if not env.get("KUBECONFIG") or os.path.commonpath([kubeconfig, os.path.abspath(root)]) != os.path.abspath(root):
        outside.append(f"KUBECONFIG is {env.get('KUBECONFIG') or 'unset'}")
    npx = shutil.which("npx", path=env.get("PATH", ""))
    if npx is None or os.path.realpath(npx) != os.path.realpath(os.path.join(root, SANDBOX_BIN, "npx")):
        outside.append(f"npx is {npx or 'not on PATH'}")
    return outside


@dataclass(frozen=True)
class Endpoints:
    """Where each API lives; None means the real Google endpoint."""

    compute: str | None = None
    tpu: str | None = None
    secretmanager: str | None = None
    storage: str | None = None
    logging: str | None = None
    registry: str | None = None  # replaces every image's registry host
    wheels: str | None = None  # replaces the host of the driver's locked wheels (PyPI's file host)
    hub: str | None = None  # the Hugging Face Hub instead of huggingface.co (no Google credential goes there)
    kubeconfig: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Endpoints":
        env = os.environ if env is None else env
        return cls(
            compute=_endpoint(env, COMPUTE_ENDPOINT_ENV),
            tpu=_endpoint(env, TPU_ENDPOINT_ENV),
            secretmanager=_endpoint(env, SECRETMANAGER_ENDPOINT_ENV),
            storage=_endpoint(env, STORAGE_EMULATOR_ENV),
            logging=_endpoint(env, LOGGING_ENDPOINT_ENV),
            registry=_endpoint(env, REGISTRY_ENDPOINT_ENV),
            wheels=_endpoint(env, WHEELS_ENDPOINT_ENV),
            hub=_endpoint(env, HUB_ENDPOINT_ENV),
            kubeconfig=env.get("KUBECONFIG") or None,
        )


def _endpoint(env: Mapping[str, str], name: str) -> str | None:
    """A redirected endpoint, checked where it is read: an http(s) URL with a host, or unset."""
    raw = env.get(name) or None
    if raw is None:
        return None
    parsed = urllib.parse.urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UserError(f"{name}='{raw}' is not an http(s) URL with a host, e.g. http://127.0.0.1:8123: fix it or "
                        "unset it to use Google's endpoint")
    return raw


def _google_kwargs(endpoint: str | None) -> dict:
    if endpoint is None:
        return {}
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return {
        "credentials": AnonymousCredentials(),
        "transport": "rest",
        "client_options": ClientOptions(api_endpoint=endpoint),
    }


class Clients:
    """Lazily built clients for one settings object; construct once per command."""

    def __init__(self, settings: Settings, endpoints: Endpoints | None = None,
                 reach_seconds: float = 20.0) -> None:
        self.settings = settings
        self.endpoints = endpoints or Endpoints.from_env()
        self.reach_seconds = reach_seconds  # one Compute or Secret Manager call in all (TPU_RL_REACH_SECONDS)
        # The run's driver in its pod: its service account's token, not a kubeconfig (`tpu-rl drive` only;
        # any other command names its cluster through the user's kubeconfig, never the one it runs in).
        self.in_cluster = False
        self._cache: dict[str, object] = {}

    def within(self, what: str, api: str, call: Callable[[float], T], fix: str | None = None) -> T:
        """`call(timeout)` against `api` (a key of GOOGLE_APIS), bounded and said (tpu_rl.scripts.cloud.reach)."""
        from tpu_rl.scripts.cloud.reach import NETWORK_FIX, call_within

        endpoint = getattr(self.endpoints, api) or GOOGLE_APIS[api]
        return call_within(what, endpoint, self.reach_seconds, call, fix or NETWORK_FIX)

    def _get(self, name: str, build):
        if name not in self._cache:
            from google.auth.exceptions import DefaultCredentialsError

            try:
                self._cache[name] = build()
            except DefaultCredentialsError as error:
                cause = f"no Google credentials ({type(error).__name__})"
                raise CredentialsMissing(f"{cause}: run `gcloud auth application-default login` (or set "
                                         "GOOGLE_APPLICATION_CREDENTIALS)", cause=cause) from None
        return self._cache[name]

    def reservations(self):
        from google.cloud import compute_v1

        return self._get("reservations", lambda: compute_v1.ReservationsClient(**_google_kwargs(self.endpoints.compute)))

    def machine_types(self):
        from google.cloud import compute_v1

        return self._get("machine_types", lambda: compute_v1.MachineTypesClient(**_google_kwargs(self.endpoints.compute)))

    def regions(self):
        """Compute Engine regions: each region's quotas (metric, limit, usage)."""
        from google.cloud import compute_v1

        return self._get("regions", lambda: compute_v1.RegionsClient(**_google_kwargs(self.endpoints.compute)))

    def instances(self):
        from google.cloud import compute_v1

        return self._get("instances", lambda: compute_v1.InstancesClient(**_google_kwargs(self.endpoints.compute)))

    def tpu(self):
        from google.cloud import tpu_v2

        return self._get("tpu", lambda: tpu_v2.TpuClient(**_google_kwargs(self.endpoints.tpu)))

    def secrets(self):
        from google.cloud import secretmanager_v1

        return self._get(
            "secrets",
            lambda: secretmanager_v1.SecretManagerServiceClient(**_google_kwargs(self.endpoints.secretmanager)),
        )

    def storage(self):
        from google.cloud import storage

        def build():
            if self.endpoints.storage:
                from google.auth.credentials import AnonymousCredentials

                return storage.Client(project=self.settings.project, credentials=AnonymousCredentials())
            return storage.Client(project=self.settings.project)

        return self._get("storage", build)

    def logging(self):
        """Cloud Logging's entries.list (scripts/cloud/cloud_logging.py)."""
        from tpu_rl.scripts.cloud.cloud_logging import reader

        return self._get("logging", lambda: reader(self.settings.project, self.endpoints.logging))

    def access_token(self) -> str | None:
        """The user's ADC access token, for a registry that asks for credentials; None without ADC."""
        import google.auth
        import google.auth.transport.requests
        from google.auth.exceptions import GoogleAuthError

        try:
            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            credentials.refresh(google.auth.transport.requests.Request())
        except GoogleAuthError:
            return None
        return credentials.token

    def kube(self):
        """A kubernetes ApiClient for this settings' cluster (see tpu_rl.scripts.cloud.kubeconfig.api_client_for)."""
        from tpu_rl.scripts.cloud.kubeconfig import api_client_for, in_cluster_api_client

        if self.in_cluster:
            return self._get("kube", in_cluster_api_client)
        return self._get("kube", lambda: api_client_for(self.settings, self.endpoints.kubeconfig))
