"""A watch cache of Namespaces: `namespaceObject` for CEL, read without I/O on the request path.

A background thread lists the namespaces, then watches from the list's resourceVersion,
applying each event to an in-memory map. The request path only reads that map
(`cache.get(name)`), so admission latency never depends on the apiserver.

- A watch ends normally when its `timeoutSeconds` passes: re-watch from the last version seen.
- `410 Gone` (an ERROR event, or the HTTP status) means that version was compacted away:
  list again and replace the whole map, so namespaces deleted meanwhile disappear.
- Any other failure (connection refused, 5xx, a dropped stream): retry with exponential
  backoff and jitter, resuming from the last version seen.

`synced` turns true after the first successful list and stays true: after that the map is
at worst slightly stale, which is better than every rule falling back to onMissingContext.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)


class _Gone(Exception):
    """The resourceVersion we watch from is too old: only a fresh list recovers."""


class NamespaceCache:
    """Namespaces by name, kept current by list + watch in a daemon thread."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self._api = client.CoreV1Api(api_client)
        self._watch_timeout = watch_timeout  # server-side; a watch that ends is simply restarted
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._on_change = on_change  # (event type, name): metrics and tests, never the request path
        # Replaced wholesale on a re-list, updated per key by watch events: a reader's dict.get
        # is atomic under the GIL and never sees a half-built map.
        self._items: dict[str, dict[str, Any]] = {}
        self._resource_version: str | None = None
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._response: Any = None  # the open watch stream, closed by stop() to unblock the thread
        self._thread: threading.Thread | None = None

    # -- the request path ----------------------------------------------------------------------------
    def get(self, name: str) -> dict[str, Any] | None:
        """The Namespace object as the API serves it (without managedFields), or None if unknown."""
        return self._items.get(name)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def __len__(self) -> int:
        return len(self._items)

    # -- life cycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("NamespaceCache already started")
        self._thread = threading.Thread(target=self._run, name="namespace-cache", daemon=True)
        self._thread.start()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            _close(response)
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------------
    def _run(self) -> None:
        delay = self._backoff_initial
        while not self._stopping.is_set():
            try:
                if self._resource_version is None:
                    self._list()
                self._watch()
                delay = self._backoff_initial  # a watch that ran and ended normally: all is well
                continue
            except _Gone:
                gone = True
            except ApiException as error:  # the same 410 may come as the HTTP status
                gone = error.status == 410
                failure: Exception = error
            except Exception as error:  # network, garbage: the thread must never die
                gone = False
                failure = error
            if self._stopping.is_set():
                break
            if gone:
                log.info("namespace watch expired (410 Gone); listing again")
                self._resource_version = None
                continue
            log.warning("namespace cache: %s; retrying in %.1fs", _describe(failure), delay)
            # B311: backoff jitter, not a secret
            if self._stopping.wait(delay * random.uniform(0.8, 1.2)):  # nosec B311
                break
            delay = min(delay * 2, self._backoff_max)

    def _list(self) -> None:
        response = self._api.list_namespace(_preload_content=False, _request_timeout=(5, 30))
        body = orjson.loads(response.data)
        items = {}
        for item in body.get("items") or []:
            namespace = _trim(item)
            items[namespace["metadata"]["name"]] = namespace
        self._items = items
        self._resource_version = body["metadata"]["resourceVersion"]
        self._synced.set()
        self._notify("SYNCED", "")

    def _watch(self) -> None:
        response = self._api.list_namespace(
            watch=True,
            resource_version=self._resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            # read timeout beyond the server's: a silent connection is a dead one
            _request_timeout=(5, self._watch_timeout + 30),
        )
        self._response = response
        try:
            if self._stopping.is_set():
                return
            for line in iter_resp_lines(response):
                self._apply(orjson.loads(line))
                if self._stopping.is_set():
                    return
        finally:
            self._response = None
            _close(response)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone(obj.get("message", ""))
            raise RuntimeError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        metadata = obj.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._items[metadata["name"]] = _trim(obj)
        elif kind == "DELETED":
            self._items.pop(metadata.get("name"), None)
        elif kind != "BOOKMARK":
            raise RuntimeError(f"unknown watch event type {kind!r}")
        if version:
            self._resource_version = version
        self._notify(str(kind), str(metadata.get("name", "")))

    def _notify(self, kind: str, name: str) -> None:
        if self._on_change is not None:
            self._on_change(kind, name)


def _trim(namespace: dict[str, Any]) -> dict[str, Any]:
    """managedFields is most of a Namespace's bytes and no rule reads it."""
    metadata = namespace.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return namespace


def _close(response: Any) -> None:
    # shutdown() interrupts a read blocked in another thread (urllib3 2.3+); close() frees the socket
    for method in ("shutdown", "release_conn", "close"):
        # closing a broken stream may raise anything; the socket is gone either way
        with contextlib.suppress(Exception):
            getattr(response, method, lambda: None)()


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        if error.status == 410:
            return "410 Gone"
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
