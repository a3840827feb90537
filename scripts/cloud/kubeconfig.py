"""Reaching the cluster: the kubeconfig context of exactly the settings' cluster (never whatever context is
current), or the service account of the pod the process runs in (the run's driver), as a kubernetes
ApiClient that tpu_rl.scripts.cloud.retry, not urllib3, retries."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tpu_rl.recipes import Settings, UserError
from tpu_rl.recipes import conventions
from tpu_rl.recipes.errors import NotDeployed
from tpu_rl.scripts.cloud.foreign import describe


def gke_context_name(settings: Settings) -> str:
    return f"gke_{settings.project}_{settings.region}_{settings.cluster_name}"


def get_credentials_command(settings: Settings) -> str:
    return conventions.get_credentials_command(settings.cluster_name, settings.region, settings.project)


def kubeconfig_path(explicit: str | None) -> Path:
    first = (explicit or str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    return Path(first).expanduser()


def api_client_for(settings: Settings, kubeconfig: str | None) -> k8s.ApiClient:
    """An ApiClient for the settings' cluster, never for whatever context happens to be current."""
    path = kubeconfig_path(kubeconfig)
    if not path.is_file():
        raise NotDeployed(f"no kubeconfig at {path}: run `{get_credentials_command(settings)}`")
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=str(path))
    except Exception as error:  # noqa: BLE001 -- YAML, config and file errors alike: the file is unreadable
        raise UserError(f"kubeconfig {path} is unreadable ({describe(error)}): "
                        f"run `{get_credentials_command(settings)}`") from None
    context = _context_for(settings, contexts or [], current)
    if context is None:
        found = f"; the current context is '{current['name']}'" if current else ""
        raise NotDeployed(
            f"kubeconfig {path} has no context for cluster '{settings.cluster_name}' of project "
            f"'{settings.project}' in {settings.region} (looked for '{gke_context_name(settings)}'{found}): "
            f"run `{get_credentials_command(settings)}`"
        )
    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(config_file=str(path), context=context, client_configuration=configuration)
    except k8s_config.ConfigException as error:
        raise UserError(f"kubeconfig context '{context}' cannot be used ({str(error)[:160]}): run "
                        f"`{get_credentials_command(settings)}` (it needs gke-gcloud-auth-plugin)") from None
    configuration.retries = 0  # tpu_rl.scripts.cloud.retry decides what is repeated, not urllib3
    return k8s.ApiClient(configuration)


def in_cluster_api_client() -> k8s.ApiClient:
    """An ApiClient for the cluster the process runs in, as its pod's service account (the run's driver)."""
    configuration = k8s.Configuration()
    k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.retries = 0  # as api_client_for
    return k8s.ApiClient(configuration)


def _context_for(settings: Settings, contexts: list[dict], current: dict | None) -> str | None:
    """The context whose cluster is exactly this project, region and cluster name, or None.

    `gcloud container clusters get-credentials` names both the context and its cluster entry
    gke_<project>_<location>_<name>; a context is accepted only when its cluster entry has exactly that
    name, whatever the context itself is called (renamed contexts keep working). A cluster whose name
    merely ends with CLUSTER_NAME, or lives in another project or region, is never used: `run` writes
    the Hugging Face token into the cluster it talks to.
    """
    wanted = gke_context_name(settings)
    matching = [c["name"] for c in contexts if (c.get("context") or {}).get("cluster") == wanted]
    for preferred in (wanted, (current or {}).get("name")):
        if preferred in matching:
            return preferred
    return matching[0] if matching else None
