"""A threaded HTTP server on 127.0.0.1 with scripted faults, shared by the API peers."""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Fault:
    """Answer the next `times` matching requests with `status` instead of the real answer.

    status: an HTTP code, "timeout" (answer after `delay` seconds, past the client's timeout), "drop"
    (close the connection without an answer) or "cut" (send the real answer's headers and half of its
    body, then close: a stream broken midway). With `apply` the request is carried out first, so the
    client sees an error for something that happened (the ambiguous create). The first `after` matching
    requests pass untouched.
    """

    method: str
    path: str  # substring of the path
    status: int | str
    times: int = 1
    apply: bool = False
    delay: float = 2.0
    headers: dict | None = None
    after: int = 0  # let this many matching requests through first
    hits: int = 0
    seen: int = 0


@dataclass
class Reply:
    status: int
    body: object = None  # dict -> JSON, str/bytes -> text
    headers: dict | None = None


class PeerServer:
    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, bytes]] = []
        self._lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body go out as two writes: without TCP_NODELAY the body waits for the
            # client's delayed ACK of the headers (about 40 ms on Linux) on every kept-alive request.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                query = {key: values[-1] for key, values in parse_qs(split.query).items()}
                with peer._lock:
                    peer.requests.append((self.command, self.path, body))
                    if not peer.authorized(self.headers):
                        peer._write(self, Reply(401, peer.error_body(401)))
                        return
                    fault = peer._take_fault(self.command, split.path)
                if fault is not None and fault.status == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault is not None and fault.status == "timeout":
                    time.sleep(fault.delay)
                if fault is None or fault.apply or fault.status in ("timeout", "cut"):
                    with peer._lock:
                        reply = peer.route(self.command, split.path, query, body)
                if fault is not None and fault.status == "cut":
                    self.close_connection = True
                    peer._write(self, reply, cut=True)
                    return
                if fault is not None and isinstance(fault.status, int):
                    reply = Reply(fault.status, peer.error_body(fault.status), fault.headers)
                try:
                    peer._write(self, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                # Connections a fault dropped or a client abandoned end here; keep them off stderr
                # (CliRunner captures it) but keep them for a test that wants to look.
                import sys

                peer.errors.append(sys.exc_info()[1])

        self.errors: list[BaseException] = []
        self.httpd = Server(("127.0.0.1", 0), Handler)
        # stop() waits for the server's next poll: 10 ms, as most tests start and stop two of these.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    scheme = "http"

    def serve_tls(self, certfile: str, keyfile: str) -> "PeerServer":
        """Answer over TLS with this certificate, for a client that speaks only https (the Kubernetes client
        in a pod, peers/cluster_access.py); before start()."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile, keyfile)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https"
        return self

    def start(self) -> "PeerServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and fault.path in path and fault.hits < fault.times:
                fault.seen += 1
                if fault.seen <= fault.after:
                    continue
                fault.hits += 1
                return fault
        return None

    @staticmethod
    def _write(handler: BaseHTTPRequestHandler, reply: Reply, cut: bool = False) -> None:
        if isinstance(reply.body, (dict, list)):
            data, kind = json.dumps(reply.body).encode(), "application/json"
        else:
            text = reply.body or ""
            data, kind = (text if isinstance(text, bytes) else text.encode()), "text/plain"
        handler.send_response(reply.status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (reply.headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        if handler.command != "HEAD":  # a HEAD answer carries the headers of the GET, without its body
            handler.wfile.write(data[:len(data) // 2] if cut else data)

    def sent(self, method: str, path_part: str) -> list[bytes]:
        """Bodies of the requests seen so far that match."""
        return [body for m, path, body in self.requests if m == method and path_part in path]

    def authorized(self, headers) -> bool:
        return True

    # Subclasses answer here (called under the lock).
    def route(self, method: str, path: str, query: dict, body: bytes) -> Reply:
        raise NotImplementedError

    def error_body(self, status: int) -> object:
        return {"error": {"code": status, "message": f"injected {status}"}}
