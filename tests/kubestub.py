"""A stand-in Kubernetes API server on 127.0.0.1 for namespaces: list and watch, as the real one answers.

What it reproduces, because the watch cache depends on it:
- `GET /api/v1/namespaces` returns a NamespaceList whose `metadata.resourceVersion` is the
  version to watch from.
- `GET /api/v1/namespaces?watch=1&resourceVersion=N` answers 200 with chunked JSON lines,
  one `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}` per line, for every
  change after N, then waits for more until `timeoutSeconds` passes.
- A resourceVersion older than the retained history gets, like etcd compaction, a 200
  response carrying one ERROR event with a 410 `Expired` Status, then the stream ends.

Tests drive it: `add`, `modify`, `delete`, `compact` (forget history), `expire_watches`
(send 410 into open watches), `drop_watches` (cut connections), `fail_next` (answer 500).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class KubeStub:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._version = 100
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._oldest = self._version  # watches from before this version get 410
        self._generation = 0  # bumped to end (drop) or expire every open watch
        self._expire = False
        self._failures = 0
        self.requests: list[str] = []  # "list" / "watch rv=N" / "fail", in arrival order
        self.open_watches = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="kubestub", daemon=True
        )

    # -- life cycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> KubeStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._generation += 1
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- cluster changes -------------------------------------------------------------------------
    def add(self, name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> None:
        metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": labels or {}}
        if annotations:
            metadata["annotations"] = annotations
        self._change("ADDED", name, {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})

    def modify(
        self, name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
    ) -> None:
        with self._lock:
            current = json.loads(json.dumps(self._namespaces[name]))
        if labels is not None:
            current["metadata"]["labels"] = labels
        if annotations is not None:
            current["metadata"]["annotations"] = annotations
        self._change("MODIFIED", name, current)

    def delete(self, name: str) -> None:
        with self._lock:
            current = self._namespaces[name]
        self._change("DELETED", name, current)

    def _change(self, kind: str, name: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._version += 1
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self._version)
            obj["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
            if kind == "DELETED":
                self._namespaces.pop(name, None)
            else:
                self._namespaces[name] = obj
            self._history.append((self._version, kind, obj))
            self._lock.notify_all()

    def forget(self, name: str) -> None:
        """Delete a namespace with no event, as if its DELETED event had been compacted away."""
        with self._lock:
            self._version += 1
            self._namespaces.pop(name, None)
            self._history.clear()
            self._oldest = self._version

    # -- failure injection -----------------------------------------------------------------------
    def compact(self) -> None:
        """Forget the history, as etcd compaction does: older resourceVersions now get 410."""
        with self._lock:
            self._history.clear()
            self._oldest = self._version

    def expire_watches(self) -> None:
        """Send a 410 ERROR event into every open watch (and compact, so a resume also fails)."""
        with self._lock:
            self.compact()
            self._expire = True
            self._generation += 1
            self._lock.notify_all()

    def drop_watches(self) -> None:
        """End every open watch abruptly, as a load balancer or apiserver restart does."""
        with self._lock:
            self._expire = False
            self._generation += 1
            self._lock.notify_all()

    def fail_next(self, count: int) -> None:
        """Answer the next `count` requests with HTTP 500."""
        with self._lock:
            self._failures = count

    # -- HTTP --------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if url.path != "/api/v1/namespaces":
                    self._json(404, _status(404, "NotFound", f"the server could not find {url.path}"))
                    return
                with stub._lock:
                    failing = stub._failures > 0
                    stub._failures -= 1 if failing else 0
                if failing:
                    stub.requests.append("fail")
                    self._json(500, _status(500, "InternalError", "injected failure"))
                elif query.get("watch") in ("1", "true"):
                    self._watch(query)
                else:
                    stub.requests.append("list")
                    with stub._lock:
                        body = {
                            "kind": "NamespaceList",
                            "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(stub._version)},
                            "items": sorted(stub._namespaces.values(), key=lambda n: n["metadata"]["name"]),
                        }
                    self._json(200, body)

            def _json(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, query: dict[str, str]) -> None:
                since = int(query.get("resourceVersion") or 0)
                timeout = float(query.get("timeoutSeconds") or 30)
                stub.requests.append(f"watch rv={since}")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with stub._lock:
                    stub.open_watches += 1
                    generation = stub._generation
                try:
                    if since < stub._oldest:
                        self._event({"type": "ERROR", "object": _expired(since, stub._oldest)})
                    else:
                        self._stream(since, generation, timeout)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with stub._lock:
                        stub.open_watches -= 1
                    self.close_connection = True

            def _stream(self, since: int, generation: int, timeout: float) -> None:
                sent = since
                deadline = threading.Event()
                timer = threading.Timer(timeout, deadline.set)
                timer.start()
                try:
                    while not deadline.is_set():
                        with stub._lock:
                            if stub._generation != generation:
                                if stub._expire:
                                    self._event({"type": "ERROR", "object": _expired(sent, stub._oldest)})
                                return  # dropped
                            pending = [(v, k, o) for v, k, o in stub._history if v > sent]
                            if not pending:
                                stub._lock.wait(0.05)
                                continue
                        for version, kind, obj in pending:
                            self._event({"type": kind, "object": obj})
                            sent = version
                finally:
                    timer.cancel()

            def _event(self, event: dict[str, Any]) -> None:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()

        return Handler


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _expired(requested: int, oldest: int) -> dict[str, Any]:
    return _status(410, "Expired", f"too old resource version: {requested} ({oldest})")
