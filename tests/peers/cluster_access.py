"""How a client reaches the fake Kubernetes API (peers/kube_api.py), as the real ones reach GKE's:

- a person's `tpu-rl`, through a kubeconfig as `gcloud container clusters get-credentials` writes it
  (write_kubeconfig);
- the run's driver in its pod (start_as_pod), through what the kubelet gives every pod: the variables
  KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, and the projected volume with the pod's service-account
  token and the cluster's CA certificate (kubernetes.io/docs/reference/access-authn-authz/
  service-accounts-admin, "Bound service account token volume mechanism"). The Kubernetes client reads those
  files from fixed paths and speaks only https to that host (kubernetes 37.0.3, config/incluster_config.py:
  SERVICE_TOKEN_FILENAME, SERVICE_CERT_FILENAME, `"https://" + ...`): here the fake API answers over TLS with
  a certificate made for 127.0.0.1, and the client's two paths name files in the test's directory, so the
  driver's own client (scripts/cloud/kubeconfig.py in_cluster_api_client) is the one that asks.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from peers.kube_api import KubeApi

HOST = "127.0.0.1"
KUBECONFIG_TOKEN = "not-a-real-token"  # the user's bearer token in every kubeconfig written here


def write_kubeconfig(path, server_url: str, context: str, cluster: str | None = None) -> None:
    """A kubeconfig as gcloud writes it: context and cluster entry share the gke_<project>_<loc>_<name>
    name, unless `cluster` names the entry (a renamed context)."""
    cluster = cluster or context
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": cluster, "cluster": {"server": server_url}}],
        "users": [{"name": "tester", "user": {"token": KUBECONFIG_TOKEN}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": "tester"}}],
    }))


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST and its key, as PEM files: the cluster's CA is the server's own."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.now(timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    cert, private = directory / "ca.crt", directory / "server.key"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert, private


def start_as_pod(directory: Path, monkeypatch, token: str) -> KubeApi:
    """The fake API over TLS, and this process set up as a pod whose service account's token is `token`."""
    from kubernetes.config import incluster_config

    directory.mkdir(parents=True, exist_ok=True)
    cert, key = _certificate(directory)
    server = KubeApi()
    server.serve_tls(str(cert), str(key)).start()
    (directory / "token").write_text(token)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(directory / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setenv(incluster_config.SERVICE_HOST_ENV_NAME, HOST)
    monkeypatch.setenv(incluster_config.SERVICE_PORT_ENV_NAME, str(server.httpd.server_address[1]))
    return server
