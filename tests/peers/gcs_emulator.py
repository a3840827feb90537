"""The GCS emulator (gcp-storage-emulator) as the peers run it: in memory, in the test's process, with
two changes to how it serves (start_gcs_emulator), and objects put straight into its store (put_object)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gcs_emulator():
    """(server, url) of an in-memory GCS emulator on a free local port."""
    from gcp_storage_emulator.server import RequestHandler, create_server

    # The emulator serves one connection at a time with no timeout: a client stopped halfway through a
    # request (a driver pod's SIGTERM) held every other client up until its own process ended, after its
    # retries (one test took 127 s). A real front end drops a stalled connection; this one does after 10 s.
    RequestHandler.timeout = 10
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    # Every write re-serializes all objects' metadata to a .meta file the store reads only when it is
    # created (gcp_storage_emulator storage.py _read_config_from_file); in memory nothing reads it again.
    # It was a quarter of the CPU of the CLI tests, whose buckets hold ~80 staged wheels.
    assert callable(server._storage._write_config_to_file), "gcp-storage-emulator changed its store"
    server._storage._write_config_to_file = lambda: None
    server.start()
    return server, f"http://127.0.0.1:{port}"


def put_object(emulator, bucket: str, name: str, content: bytes, metadata: dict[str, str]) -> None:
    """An object in the in-process emulator (server, url) as its multipart upload of `content` with custom
    `metadata` stores it (gcp_storage_emulator handlers/objects.py _multipart_upload)."""
    from gcp_storage_emulator.handlers import objects

    server, url = emulator
    resource = objects._make_object_resource(url, bucket, name, "application/octet-stream", str(len(content)),
                                             {"name": name, "metadata": metadata})
    server._storage.create_file(bucket, name, content, objects._checksums(content, resource))
