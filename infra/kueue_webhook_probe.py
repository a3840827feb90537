"""The hook pod that holds back the queue objects until Kueue's webhook Service answers, and where the
controllers' releases live (<release>-system)."""

from __future__ import annotations

from typing import Any

from tpu_rl.recipes.conventions import KUEUE_RELEASE, on_system_pool

# Kueue's webhook Service can lag its Ready pod (kueue PR #8220), and then creating a queue object fails;
# Cluster Toolkit sleeps 60 s (time_sleep.wait_for_webhook), we hold the queue release back with a Helm
# hook pod in Kueue's own namespace until the Service answers (docs/provenance.md#kueue-webhook-readiness).
# Service "<fullname>-webhook-service", port 443; fullname is the release name when it contains the chart
# name (kueue v0.17.1 charts/kueue/templates/webhook/service.yaml, _helpers.tpl, values.yaml).
KUEUE_WEBHOOK_PORT = 443
KUEUE_WEBHOOK_PROBE = "kueue-webhook-ready"
# busybox 1.37.0 (stable; its nc has -z and -w), pinned by the digest of the tag's image index
# (docker-library/repo-info@01a70542 repos/busybox/remote/1.37.0.md; docs/provenance.md#webhook-probe-image).
WEBHOOK_PROBE_IMAGE = ("docker.io/library/busybox:1.37.0"
                       "@sha256:9db7b59979c38555a39def84a31fb98b5296952f9e3afd4f6f11f05b07adfab0")
# 2-4 s apart: the release fails after about 4 to 8 minutes, inside the queue release's timeout (600 s,
# tpu_rl.infra.cluster_addons), which also covers Kueue's own start now that its release does not wait.
WEBHOOK_PROBE_TRIES = 120
WEBHOOK_PROBE_IN_A_ROW = 3  # both the probe's node and the API server must have seen the endpoint
# The Kueue chart version the probe waits for, on the hook pod. Kueue's release does not wait, so after a
# Kueue upgrade only this hook holds back the queue objects, and Helm runs it only when the queue release
# itself is installed or upgraded (pre-install,pre-upgrade): carrying the version changes the release's
# values with every Kueue version, so the provider upgrades it and the probe runs again.
KUEUE_VERSION_ANNOTATION = "tpu-rl/kueue-chart-version"




def controller_namespace(release: str) -> str:
    return f"{release}-system"


def kueue_webhook_host() -> str:
    return f"{KUEUE_RELEASE}-webhook-service.{controller_namespace(KUEUE_RELEASE)}.svc"


def webhook_probe_script(host: str, port: int) -> str:
    """POSIX sh for busybox: exit 0 once host:port accepted WEBHOOK_PROBE_IN_A_ROW connections in a row."""
    refusal = (f"the Kueue webhook {host}:{port} did not accept connections after $tries tries: "
               f"see kubectl -n {controller_namespace(KUEUE_RELEASE)} get pods,endpointslices")
    return f"""in_a_row=0
tries=0
while [ "$tries" -lt {WEBHOOK_PROBE_TRIES} ]; do
  tries=$((tries + 1))
  if nc -z -w 2 {host} {port}; then in_a_row=$((in_a_row + 1)); else in_a_row=0; fi
  if [ "$in_a_row" -ge {WEBHOOK_PROBE_IN_A_ROW} ]; then exit 0; fi
  sleep 2
done
echo "{refusal}" >&2
exit 1
"""


def kueue_webhook_probe_manifest(kueue_chart_version: str) -> dict[str, Any]:
    """The hook pod that holds back the queue objects until the webhook Service of that Kueue answers."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": KUEUE_WEBHOOK_PROBE,
            "namespace": controller_namespace(KUEUE_RELEASE),
            "annotations": {
                "helm.sh/hook": "pre-install,pre-upgrade",
                # Gone once it succeeded; a failed one stays for `kubectl logs` until the next attempt.
                "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
                KUEUE_VERSION_ANNOTATION: kueue_chart_version,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": on_system_pool(),  # where Kueue runs; never scales a pool up
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": WEBHOOK_PROBE_IMAGE,
                    "command": ["sh", "-c", webhook_probe_script(kueue_webhook_host(), KUEUE_WEBHOOK_PORT)],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                  "limits": {"cpu": "100m", "memory": "32Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
