"""Compute Engine, Cloud TPU, Secret Manager and Cloud Logging REST APIs, just the calls `tpu-rl` makes, in
their JSON shapes (int64 as strings, Google error envelopes with the canonical status), and Artifact
Registry's OCI distribution API for manifests (opencontainers/distribution-spec @987425f6 spec.md: end-3
answers 200 with Docker-Content-Digest, or 404 with the MANIFEST_UNKNOWN error body)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Optional

from peers.http import PeerServer, Reply

_STATUS = {400: "FAILED_PRECONDITION", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

_ZONAL = re.compile(r"^/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/(?P<kind>reservations|machineTypes|instances)"
                    r"/(?P<name>[^/]+)(?P<serial>/serialPort)?$")
_REGION = re.compile(r"^/compute/v1/projects/(?P<p>[^/]+)/regions/(?P<r>[^/]+)$")
_ACCEL = re.compile(r"^/v2/projects/(?P<p>[^/]+)/locations/(?P<z>[^/]+)/acceleratorTypes/(?P<name>[^/]+)$")
_MANIFEST = re.compile(r"^/v2/(?P<repository>.+)/manifests/(?P<reference>[^/]+)$")
# An OCI image index, the shape of a multi-platform tag (opencontainers/image-spec image-index.md).
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_SECRET = re.compile(r"^/v1/projects/(?P<p>[^/]+)/secrets/(?P<s>[^/:]+)(?P<rest>/versions|:addVersion|/versions/[^/:]+:access|/versions/[^/:]+)?$")


# machineTypes.get answers a MachineType (Compute Engine API reference, "Method: machineTypes.get" and the
# MachineType resource: kind, name, description, guestCpus, memoryMb, isSharedCpu, zone as its name,
# selfLink, ...), its size as the machine series pages give it (vCPUs, GB of memory as MiB x 1024): "N4
# machine series", "C4D machine series" and Cloud TPU "v6e" (ct6e), read 2026-11.
MACHINE_SIZES = {"n4-standard-64": (64, 256), "c4d-standard-96": (96, 372), "ct6e-standard-1t": (44, 176),
                 "ct6e-standard-4t": (180, 720), "ct6e-standard-8t": (180, 1440)}

CPU_MACHINES = ("n4-standard-64", "c4d-standard-96")  # the recipes' CPU pools
# A region's CPU quotas with room for the CPU pool (regions.get quotas[]: metric -> (limit, usage)): CPUS,
# and the N4 and C4D series' own (recipes.toml [machines.*] cpu_quota).
CPU_QUOTAS = {"CPUS": (24, 0), "N4_CPUS": (200, 0), "C4D_CPUS": (200, 0)}


def machine_type_resource(project: str, zone: str, name: str) -> dict:
    cpus, gb = MACHINE_SIZES[name]
    return {"kind": "compute#machineType", "id": str(1000 + cpus), "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": name, "description": f"{cpus} vCPUs, {gb} GB RAM", "guestCpus": cpus, "memoryMb": gb * 1024,
            "maximumPersistentDisks": 128, "maximumPersistentDisksSizeGb": "263168", "zone": zone,
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/machineTypes/{name}",
            "isSharedCpu": False, "architecture": "X86_64"}


# The serial console's buffer: 1 MB (the API reference's "buffer (1 MB)"), taken as 2**20 bytes here.
SERIAL_BUFFER = 1 << 20


def google_error(code: int, message: str) -> Reply:
    return Reply(code, {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN"),
                                  "errors": [{"message": message, "domain": "global", "reason": "notFound"
                                              if code == 404 else "error"}]}})


@dataclass
class GoogleApis(PeerServer):
    reservations: dict = field(default_factory=dict)  # (zone, name) -> (machine type, count, in use)
    machine_types: set = field(default_factory=set)  # (zone, name)
    accelerator_types: set = field(default_factory=set)  # (zone, type)
    instances: dict = field(default_factory=dict)  # (zone, name) -> status
    serial: dict = field(default_factory=dict)  # (zone, name) -> console text
    metadata: dict = field(default_factory=dict)  # (zone, name) -> {key: value}, the instance's metadata items
    # (zone, name) -> {"creationTimestamp": ..., "lastStartTimestamp": ...}: when the instance was created and
    # last started (Compute Engine API, Instance, RFC 3339 text); not served when not set.
    boots: dict = field(default_factory=dict)
    secrets: dict = field(default_factory=dict)  # secret id -> [{"data": bytes, "state": str}]
    # The Secret Manager permissions the caller lacks (e.g. "secretmanager.versions.get"): such a call is
    # answered 403 PERMISSION_DENIED with the API's message, "Permission '<permission>' denied for resource
    # '<name>' (or it may not exist)." (as google.api_core reports it, googleapis/python-secret-manager#389).
    denied: set = field(default_factory=set)
    # region -> {metric: (limit, usage)}: the regional quotas regions.get lists (Compute Engine's
    # Region.quotas[], each {metric, limit, usage} with the numbers as JSON doubles)
    regions: dict = field(default_factory=dict)
    # The VM's life as the test scripts it: each serial-port read first runs the next of these (boot
    # output, a step starting, markers written, ...), so progress unfolds one poll at a time.
    on_serial_read: list = field(default_factory=list)
    # Cloud Logging: the LogEntry objects (container_log_entry builds them) entries:list answers from, and
    # the request bodies it was sent. A page holds at most the request's pageSize entries.
    log_entries: list = field(default_factory=list)
    log_queries: list = field(default_factory=list)
    # The same for each instance GET (a stopped VM's console is not read, so a test moves time on here).
    on_instance_get: list = field(default_factory=list)
    # The registry: "repository:tag" (the image without its host) of every manifest it holds.
    images: set = field(default_factory=set)
    # Called with (zone, name) on each read of an instance or its console, before it is answered: the
    # sandbox's VM follows its stack's state and boots when first read (peers/sandbox_vm.py).
    on_read: Optional[Callable[[tuple], None]] = None

    def __post_init__(self) -> None:
        PeerServer.__init__(self)

    def error_body(self, status: int) -> object:
        return google_error(status, f"injected {status}").body

    def route(self, method: str, path: str, query: dict, body: bytes) -> Reply:
        if match := _ZONAL.match(path):
            return self._compute(match, query)
        if match := _REGION.match(path):
            return self._region(match)
        if match := _ACCEL.match(path):
            if (match["z"], match["name"]) not in self.accelerator_types:
                return google_error(404, f"Resource '{path[4:]}' was not found")
            return Reply(200, {"name": path[4:], "type": match["name"],
                               "acceleratorConfigs": [{"type": "V6E", "topology": "4x8"}]})
        if match := _SECRET.match(path):
            return self._secret(method, match, body)
        if method in ("GET", "HEAD") and (match := _MANIFEST.match(path)):
            return self._manifest(match)
        if method == "POST" and path == "/v2/entries:list":
            return self._entries(json.loads(body or b"{}"))
        return google_error(404, f"no route {method} {path}")

    def _manifest(self, match) -> Reply:
        repository, reference = match["repository"], match["reference"]
        if f"{repository}:{reference}" not in self.images:
            return Reply(404, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown",
                                           "detail": {"Tag": reference}}]})
        manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [],
                               "annotations": {"org.opencontainers.image.ref.name": f"{repository}:{reference}"}}).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        return Reply(200, manifest, {"Content-Type": OCI_INDEX, "Docker-Content-Digest": digest})

    def _entries(self, request: dict) -> Reply:
        """entries.list: the entries whose resource labels and text the filter's clauses name, oldest first.
        Only the clauses tpu-rl writes are understood (resource.type=, label = / : / =~, textPayload:
        alternatives, timestamp>=) and orderBy timestamp asc|desc."""
        self.log_queries.append(request)
        if not request.get("resourceNames"):
            return google_error(400, "resourceNames is required")
        query = request.get("filter", "")
        wanted = re.findall(r'resource\.labels\.(\w+)(=~|=|:)("(?:[^"\\]|\\.)*")', query)
        types = [json.loads(text) for text in re.findall(r'resource\.type=("(?:[^"\\]|\\.)*")', query)]
        texts = [json.loads(text) for text in re.findall(r'textPayload:("(?:[^"\\]|\\.)*")', query)]
        since = [datetime.fromisoformat(json.loads(text)) for text in re.findall(r'timestamp>=("[^"]*")', query)]
        order = request.get("orderBy", "timestamp asc")  # the API's default order (entries.list)
        if order not in ("timestamp asc", "timestamp desc"):
            return google_error(400, f"orderBy {order!r} is not supported")

        def matches(entry: dict) -> bool:
            labels = entry["resource"]["labels"]
            if types and entry["resource"]["type"] != types[0]:
                return False
            for key, op, value in wanted:
                value, label = json.loads(value), labels.get(key, "")
                # ':' is the query language's case-insensitive "has"; '=~' an RE2 search
                if ((op == "=" and labels.get(key) != value) or (op == ":" and value.lower() not in label.lower())
                        or (op == "=~" and not re.search(value, label))):
                    return False
            if since and datetime.fromisoformat(entry["timestamp"]) < since[0]:
                return False
            return not texts or any(text in entry.get("textPayload", "") for text in texts)

        found = sorted((entry for entry in self.log_entries if matches(entry)), key=lambda e: e["timestamp"],
                       reverse=order == "timestamp desc")
        start = int(request.get("pageToken") or 0)
        size = int(request.get("pageSize") or 50)
        page = {"entries": found[start:start + size]} if found[start:start + size] else {}
        if start + size < len(found):
            page["nextPageToken"] = str(start + size)
        return Reply(200, page)

    def _compute(self, match, query: dict) -> Reply:
        zone, name, kind = match["z"], match["name"], match["kind"]
        base = f"https://www.googleapis.com/compute/v1/projects/{match['p']}/zones/{zone}"
        missing = google_error(404, f"The resource 'projects/{match['p']}/zones/{zone}/{kind}/{name}' was not found")
        if kind == "reservations":
            if (zone, name) not in self.reservations:
                return missing
            machine_type, count, in_use = self.reservations[(zone, name)]
            return Reply(200, {"kind": "compute#reservation", "name": name, "zone": base, "status": "READY",
                               "specificReservationRequired": True,
                               "specificReservation": {"count": str(count), "inUseCount": str(in_use),
                                                       "instanceProperties": {"machineType": machine_type}}})
        if kind == "machineTypes":
            if (zone, name) not in self.machine_types:
                return missing
            return Reply(200, machine_type_resource(match["p"], zone, name))
        if self.on_read is not None:
            self.on_read((zone, name))
        if (zone, name) not in self.instances:
            return missing
        if match["serial"]:
            if self.instances[(zone, name)] != "RUNNING":
                # "Serial port output is accessible ... only while the VM instance is running" (Compute Engine
                # docs, compute/docs/troubleshooting/viewing-serial-port-output); the error itself is not
                # documented, so tests assert the console is not read then rather than what this says.
                return google_error(400, f"The resource 'projects/{match['p']}/zones/{zone}/instances/{name}' "
                                         "is not running: no serial port output")
            if self.on_serial_read:  # (a step that stops the VM does so after this read)
                self.on_serial_read.pop(0)()
            text = self.serial.get((zone, name), "")
            # "Returns the last 1 MB of serial port output": a start before the oldest byte kept is adjusted
            # to it and returned as `start` (Compute Engine API, instances.getSerialPortOutput, `start`).
            start = max(int(query.get("start", 0)), len(text) - SERIAL_BUFFER)
            return Reply(200, {"kind": "compute#serialPortOutput", "contents": text[start:], "start": str(start),
                               "next": str(len(text))})
        if self.on_instance_get:
            self.on_instance_get.pop(0)()
        items = [{"key": key, "value": value} for key, value in self.metadata.get((zone, name), {}).items()]
        return Reply(200, {"kind": "compute#instance", "name": name, "status": self.instances[(zone, name)],
                           "zone": base, "machineType": f"{base}/machineTypes/ct6e-standard-8t",
                           "metadata": {"kind": "compute#metadata", "fingerprint": "ZmFrZQ==", "items": items},
                           **self.boots.get((zone, name), {})})

    def _region(self, match) -> Reply:
        project, region = match["p"], match["r"]
        if region not in self.regions:
            return google_error(404, f"The resource 'projects/{project}/regions/{region}' was not found")
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/regions/{region}"
        return Reply(200, {"kind": "compute#region", "id": "1000", "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
                           "name": region, "description": region, "status": "UP", "selfLink": base,
                           "zones": [f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{region}-{z}"
                                     for z in "abc"],
                           "quotas": [{"metric": metric, "limit": float(limit), "usage": float(usage)}
                                      for metric, (limit, usage) in self.regions[region].items()],
                           "supportsPzs": False})

    def _secret(self, method: str, match, body: bytes) -> Reply:
        secret, rest = match["s"], match["rest"]
        name = f"projects/{match['p']}/secrets/{secret}"
        if secret not in self.secrets:
            return google_error(404, f"Secret [{name}] not found or has no versions.")
        versions = self.secrets[secret]
        rest = rest or ""
        permission = ("secretmanager.secrets.get" if not rest else "secretmanager.versions.list" if rest == "/versions"
                      else "secretmanager.versions.add" if rest == ":addVersion" else "secretmanager.versions.access"
                      if rest.endswith(":access") else "secretmanager.versions.get")
        if permission in self.denied:
            resource = f"{name}{rest}".removesuffix(":access").removesuffix(":addVersion")
            return google_error(403, f"Permission '{permission}' denied for resource '{resource}' (or it may not exist).")
        if rest == ":addVersion" and method == "POST":
            payload = json.loads(body)["payload"]
            versions.append({"data": base64.b64decode(payload["data"]), "state": "ENABLED"})
            return Reply(200, {"name": f"{name}/versions/{len(versions)}", "state": "ENABLED",
                               "createTime": "2026-11-30T00:00:00Z"})
        if rest == "/versions":
            return Reply(200, {"versions": [{"name": f"{name}/versions/{i + 1}", "state": v["state"],
                                             "createTime": "2026-11-30T00:00:00Z"}
                                            for i, v in reversed(list(enumerate(versions)))],
                               "totalSize": len(versions)})
        if rest == "/versions/latest":  # the alias names the newest version, whatever its state
            if not versions:
                return google_error(404, f"Secret Version [{name}/versions/latest] not found.")
            return Reply(200, {"name": f"{name}/versions/{len(versions)}", "state": versions[-1]["state"],
                               "createTime": "2026-11-30T00:00:00Z"})
        if rest and rest.endswith(":access"):
            if not versions:
                return google_error(404, f"Secret Version [{name}/versions/latest] not found.")
            latest = versions[-1]
            if latest["state"] != "ENABLED":
                return google_error(400, f"Secret Version [{name}/versions/{len(versions)}] is in DISABLED state.")
            return Reply(200, {"name": f"{name}/versions/{len(versions)}",
                               "payload": {"data": base64.b64encode(latest["data"]).decode()}})
        return google_error(404, f"no route {method} {match.string}")


def container_log_entry(project: str, location: str, cluster: str, pod: str, container: str, line: str,
                        timestamp: str, namespace: str = "default") -> dict:
    """A container's line as GKE's logging agent writes it to Cloud Logging: a LogEntry on the
    k8s_container resource (Cloud Logging API v2 LogEntry; stderr lines get severity ERROR)."""
    return {"logName": f"projects/{project}/logs/stderr",
            "resource": {"type": "k8s_container",
                         "labels": {"project_id": project, "location": location, "cluster_name": cluster,
                                    "namespace_name": namespace, "pod_name": pod, "container_name": container}},
            "textPayload": line + "\n", "timestamp": timestamp, "receiveTimestamp": timestamp,
            "severity": "ERROR", "insertId": f"{abs(hash((pod, line, timestamp))):x}"}
