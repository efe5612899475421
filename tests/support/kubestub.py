"""A stand-in Kubernetes API server on 127.0.0.1: list, watch and get, as the real one answers.

Kept for what a real kube-apiserver cannot do on cue: compact its history, expire or cut watches,
answer 500, fall silent, hide an object from its watch. A healthy apiserver's behaviour (the
watch caches fed by a real list and watch) is tested against the real one in tests/e2e.

Namespaces at /api/v1/namespaces, and any other collection a test `put`s objects into
(PriorityClasses, ResourceClaimTemplates: `COLLECTIONS`); a namespaced collection is listed and
watched across all namespaces, and one object is read at .../namespaces/NS/<plural>/NAME.

What it reproduces, because the watch cache depends on it:
- `GET /api/v1/namespaces` returns a NamespaceList whose `metadata.resourceVersion` is the
  version to watch from.
- `GET /api/v1/namespaces?watch=1&resourceVersion=N` answers 200 with chunked JSON lines,
  one `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}` per line, for every
  change after N, then waits for more until `timeoutSeconds` passes.
- A resourceVersion older than the retained history gets, like etcd compaction, a 200
  response carrying one ERROR event with a 410 `Expired` Status, then the stream ends.

Tests drive it: `add`, `modify`, `delete`, `compact` (forget history), `expire_watches`
(send 410 into open watches), `drop_watches` (cut connections), `fail_next` (answer 500),
`put`/`remove` (other collections), `hide` (an object a GET finds but no list or watch shows:
what a broken watch misses), `bookmarks(interval)` (BOOKMARK events into watches that allow
them), `silence()` (open watches send nothing more, not even bookmarks, and do not end).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NAMESPACES = "/api/v1/namespaces"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
CLAIM_TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
COLLECTIONS = {
    NAMESPACES: "Namespace",
    PRIORITY_CLASSES: "PriorityClass",
    CLAIM_TEMPLATES: "ResourceClaimTemplate",
    CLAIMS: "ResourceClaim",
}
NAMESPACED = {CLAIM_TEMPLATES, CLAIMS}


class KubeStub:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._version = 100
        self._namespaces: dict[str, dict[str, Any]] = {}
        # collection path -> "namespace/name" (or name) -> object; NAMESPACES is self._namespaces
        self._objects: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in COLLECTIONS if c != NAMESPACES}
        self._objects[NAMESPACES] = self._namespaces
        self._hidden: dict[str, dict[str, Any]] = {}  # path of one object -> object only a GET finds
        self._history: list[tuple[int, str, dict[str, Any]]] = []  # (version, type, object) of NAMESPACES
        self._other_history: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, collection, type, obj)
        self._bookmark_interval: float | None = None
        self._silent = False
        self._oldest = self._version  # watches from before this version get 410
        self._generation = 0  # bumped to end (drop) or expire every open watch
        self._expire = False
        self._failures = 0
        self._read_delay = 0.0  # seconds a GET of one object waits before its answer
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

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig that points at this stand-in (token auth, plain HTTP) and return its path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": self.url}}],
            "users": [{"name": "webhook", "user": {"token": "t"}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "webhook"}}],
            "current-context": "stub",
        }
        path.write_text(json.dumps(config))  # JSON is YAML: every kubeconfig reader takes it
        return path

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

    def put(self, collection: str, obj: dict[str, Any]) -> None:
        """Create or replace an object of another collection (ADDED/MODIFIED to its watches)."""
        with self._lock:
            self._version += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("kind", COLLECTIONS[collection])
            obj["metadata"]["resourceVersion"] = str(self._version)
            key = _key(obj)
            kind = "MODIFIED" if key in self._objects[collection] else "ADDED"
            self._objects[collection][key] = obj
            self._other_history.append((self._version, collection, kind, obj))
            self._lock.notify_all()

    def remove(self, collection: str, name: str, namespace: str = "") -> None:
        with self._lock:
            self._version += 1
            obj = self._objects[collection].pop(f"{namespace}/{name}" if namespace else name)
            self._other_history.append((self._version, collection, "DELETED", obj))
            self._lock.notify_all()

    def hide(self, path: str, obj: dict[str, Any]) -> None:
        """An object that GET finds at `path` but no list or watch shows (the watch missed it)."""
        with self._lock:
            self._hidden[path] = json.loads(json.dumps(obj))

    def bookmarks(self, interval: float | None) -> None:
        """Send a BOOKMARK every `interval` seconds into watches that allow them (None: never)."""
        with self._lock:
            self._bookmark_interval = interval
            self._lock.notify_all()

    def silence(self) -> None:
        """Open and future watches send nothing more and do not end: a watch gone quiet."""
        with self._lock:
            self._silent = True
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

    def delay_reads(self, seconds: float) -> None:
        """Answer GETs of single objects only after `seconds`: an apiserver that does not answer in time."""
        with self._lock:
            self._read_delay = seconds

    def _single(self, path: str) -> tuple[int, dict[str, Any]] | None:
        """GET of one object: (status, body), or None when the path is no object path (caller holds the lock)."""
        if path in self._hidden:
            return 200, self._hidden[path]
        for collection in COLLECTIONS:
            if collection in NAMESPACED:
                group_version, plural = collection.rsplit("/", 1)
                head = f"{group_version}/namespaces/"
                if path.startswith(head) and path.count("/") == head.count("/") + 2:
                    namespace, found_plural, name = path[len(head) :].split("/")
                    if found_plural == plural:
                        key = f"{namespace}/{name}"
                        break
            elif path.startswith(collection + "/") and path.count("/") == collection.count("/") + 1:
                key = path[len(collection) + 1 :]
                break
        else:
            return None
        obj = self._objects[collection].get(key)
        if obj is None:
            return 404, _status(404, "NotFound", f"{COLLECTIONS[collection]} {key!r} not found")
        return 200, obj

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
                collection = url.path if url.path in COLLECTIONS else None
                if collection is None and stub._read_delay:
                    time.sleep(stub._read_delay)
                with stub._lock:
                    failing = stub._failures > 0
                    stub._failures -= 1 if failing else 0
                    single = stub._single(url.path) if collection is None else None
                if collection is None and single is None:
                    self._json(404, _status(404, "NotFound", f"the server could not find {url.path}"))
                    return
                if failing:
                    stub.requests.append("fail")
                    self._json(500, _status(500, "InternalError", "injected failure"))
                elif single is not None:
                    stub.requests.append(f"get {url.path}")
                    code, body = single
                    self._json(code, body)
                elif query.get("watch") in ("1", "true"):
                    self._watch(collection, query)
                else:
                    stub.requests.append("list" if collection == NAMESPACES else f"list {collection}")
                    with stub._lock:
                        body = {
                            "kind": COLLECTIONS[collection] + "List",
                            "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(stub._version)},
                            "items": [o for _, o in sorted(stub._objects[collection].items())],
                        }
                    self._json(200, body)

            def _json(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, collection: str, query: dict[str, str]) -> None:
                since = int(query.get("resourceVersion") or 0)
                timeout = float(query.get("timeoutSeconds") or 30)
                bookmarks = query.get("allowWatchBookmarks") in ("true", "1", "True")
                prefix = "" if collection == NAMESPACES else f"{collection} "
                stub.requests.append(f"watch {prefix}rv={since}")
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
                        self._stream(collection, since, generation, timeout, bookmarks)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with stub._lock:
                        stub.open_watches -= 1
                    self.close_connection = True

            def _stream(self, collection: str, since: int, generation: int, timeout: float, bookmarks: bool) -> None:
                sent = since
                deadline = threading.Event()
                timer = threading.Timer(timeout, deadline.set)
                timer.start()
                last_bookmark = time.monotonic()
                try:
                    while not deadline.is_set() or stub._silent:
                        with stub._lock:
                            if stub._generation != generation:
                                if stub._expire:
                                    self._event({"type": "ERROR", "object": _expired(sent, stub._oldest)})
                                return  # dropped
                            if stub._silent:
                                stub._lock.wait(0.05)
                                continue
                            if collection == NAMESPACES:
                                pending = [(v, k, o) for v, k, o in stub._history if v > sent]
                            else:
                                pending = [
                                    (v, k, o) for v, c, k, o in stub._other_history if c == collection and v > sent
                                ]
                            interval = stub._bookmark_interval
                            due = bookmarks and interval is not None and time.monotonic() - last_bookmark >= interval
                            if not pending and not due:
                                stub._lock.wait(0.05)
                                continue
                            version = stub._version
                        for version_of, kind, obj in pending:
                            self._event({"type": kind, "object": obj})
                            sent = version_of
                        if due:
                            last_bookmark = time.monotonic()
                            marker = {"kind": COLLECTIONS[collection], "metadata": {"resourceVersion": str(version)}}
                            self._event({"type": "BOOKMARK", "object": marker})
                finally:
                    timer.cancel()

            def _event(self, event: dict[str, Any]) -> None:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()

        return Handler


def _key(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]


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
