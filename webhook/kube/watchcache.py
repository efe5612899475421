"""A watch cache of one resource (Namespaces, PriorityClasses, DRA claims), read without I/O per request.

A background thread lists the objects, then watches from the list's resourceVersion,
applying each event to an in-memory map. The request path only reads that map
(`cache.get(name)`, `cache.in_namespace(ns)`), so admission latency never depends on the apiserver.

- A watch ends normally when its `timeoutSeconds` passes: re-watch from the last version seen.
- `410 Gone` (an ERROR event, or the HTTP status) means that version was compacted away:
  list again and replace the whole map, so namespaces deleted meanwhile disappear.
- Any other failure (connection refused, 5xx, a dropped stream): retry with exponential
  backoff and jitter, resuming from the last version seen.

`synced` turns true after the first successful list and stays true: after that the map is
at worst slightly stale, which is better than every rule falling back to onMissingContext.

A watch can also go quiet without failing (a half-open connection, a stuck apiserver watch):
`stale` turns true when nothing (list, watch start, event, BOOKMARK) was seen for
`stale_after` seconds. Watches ask for bookmarks (allowWatchBookmarks), but the API promises
no interval ("Clients should not assume bookmarks are returned at any specific interval",
Kubernetes API reference, common parameters); a healthy watch at least ends and is restarted
every `watch_timeout` seconds, so the default bound is watch_timeout + 60 s.

On a miss, `lookup(name)` (async) GETs one object, once at a time per name, bounded in time,
and keeps the answer (a 404 for `negative_ttl` seconds): a namespace created after the watch
broke is still found, and the event loop never waits longer than `lookup_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from . import rest

log = logging.getLogger(__name__)


class _Gone(Exception):
    """The resourceVersion we watch from is too old: only a fresh list recovers."""


class WatchCache:
    """Objects of one resource by (namespace, name), kept current by list + watch in a daemon thread.

    `collection` is the path that lists the resource (all namespaces for a namespaced one);
    `item` the path of one object, with `{namespace}` and `{name}` in it, for `lookup` on a miss.
    """

    kind = "object"
    keep_status = True  # False: drop `status` too (DRA claims: allocation results no rule reads)

    def __init__(
        self,
        api_client: ApiClient,
        collection: str,
        *,
        item: str | None = None,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        stale_after: float | None = None,
        lookup_timeout: float = 2.0,
        negative_ttl: float = 5.0,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self._api = api_client
        self._collection = collection
        self._item = item
        self._watch_timeout = watch_timeout  # server-side; a watch that ends is simply restarted
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self.stale_after = stale_after if stale_after is not None else watch_timeout + 60.0
        self._lookup_timeout = lookup_timeout
        self._negative_ttl = negative_ttl
        self._on_change = on_change  # (event type, name): metrics and tests, never the request path
        # namespace ("" for cluster-scoped) -> name -> object. Replaced wholesale on a re-list,
        # updated per key by watch events: a reader's dict.get is atomic under the GIL and never
        # sees a half-built map.
        self._items: dict[str, dict[str, dict[str, Any]]] = {}
        self._resource_version: str | None = None
        self._last_error: str | None = None
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._response: Any = None  # the open watch stream, closed by stop() to unblock the thread
        self._thread: threading.Thread | None = None
        self._last_seen: float | None = None  # time.monotonic() of the last sign of life
        self._lookups: dict[tuple[str, str], asyncio.Future[dict[str, Any] | None]] = {}
        self._missing: dict[tuple[str, str], float] = {}  # 404s of lookups, until when they count
        self.lookups = 0  # GETs made (tests and metrics)

    # -- the request path ----------------------------------------------------------------------------
    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object as the API serves it (without managedFields), or None if unknown."""
        found = self._items.get(namespace)
        return found.get(name) if found is not None else None

    def in_namespace(self, namespace: str) -> dict[str, dict[str, Any]]:
        """Every object of one namespace by name (the live map: read it, do not change it)."""
        return self._items.get(namespace) or _EMPTY

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def age(self) -> float | None:
        """Seconds since the last list, watch start, event or bookmark; None before the first."""
        return None if self._last_seen is None else time.monotonic() - self._last_seen

    @property
    def stale(self) -> bool:
        age = self.age
        return self.synced and age is not None and age > self.stale_after

    def status(self) -> dict[str, Any]:
        """For /readyz: whether the cache is usable and whether its watch still shows signs of life."""
        age = self.age
        return {
            "synced": self.synced,
            "stale": self.stale,
            "lastEventAgeSeconds": None if age is None else round(age, 1),
            "staleAfterSeconds": self.stale_after,
            "objects": len(self),
            # the last resourceVersion seen (list, event or bookmark): where the cache stands
            "resourceVersion": self._resource_version,
            # why the last list or watch failed (a 403 names the missing RBAC); None once one succeeds
            "lastError": self._last_error,
        }

    def __len__(self) -> int:
        return sum(len(found) for found in self._items.values())

    async def lookup(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        """get(), else one GET of the object (bounded, shared by concurrent callers, its answer kept)."""
        found = self.get(name, namespace)
        if found is not None or self._item is None:
            return found
        key = (namespace, name)
        if self._missing.get(key, 0.0) > time.monotonic():
            return None  # looked up a moment ago: not there
        pending = self._lookups.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(name, namespace))
            self._lookups[key] = pending
            pending.add_done_callback(lambda _: self._lookups.pop(key, None))
        try:
            return await asyncio.wait_for(asyncio.shield(pending), self._lookup_timeout)
        except TimeoutError:
            log.warning(
                "%s cache: GET %s/%s took over %.1fs; deciding without it",
                self.kind,
                namespace,
                name,
                self._lookup_timeout,
            )
            return None

    async def _fetch(self, name: str, namespace: str) -> dict[str, Any] | None:
        self.lookups += 1
        try:
            obj = await asyncio.to_thread(self._read, name, namespace)
        except ApiException as error:
            if error.status == 404:
                now = time.monotonic()
                if len(self._missing) > _MAX_MISSING:  # names a tenant made up: keep the map bounded
                    self._missing = {k: until for k, until in self._missing.items() if until > now}
                    if len(self._missing) > _MAX_MISSING:
                        self._missing.clear()
                self._missing[(namespace, name)] = now + self._negative_ttl
            else:
                log.warning("%s cache: GET %s/%s: %s", self.kind, namespace, name, _describe(error))
            return None
        except Exception as error:  # network: decide without it, as on a plain miss
            log.warning("%s cache: GET %s/%s: %s", self.kind, namespace, name, _describe(error))
            return None
        if self.get(name, namespace) is None:  # the watch may have caught up meanwhile: it wins
            self._items.setdefault(namespace, {})[name] = obj
        return self.get(name, namespace)

    def _read(self, name: str, namespace: str) -> dict[str, Any]:
        assert self._item is not None
        path = self._item.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))
        response = rest.get(self._api, path, timeout=(2, 5))
        return _trim(orjson.loads(response.data), self.keep_status)

    # -- life cycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-cache", daemon=True)
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
                    self._last_error = None
                self._watch()
                delay = self._backoff_initial  # a watch that ran and ended normally: all is well
                self._last_error = None
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
                log.info("%s watch expired (410 Gone); listing again", self.kind)
                self._resource_version = None
                continue
            self._last_error = _describe(failure)
            log.warning("%s cache: %s; retrying in %.1fs", self.kind, self._last_error, delay)
            # B311: backoff jitter, not a secret
            if self._stopping.wait(delay * random.uniform(0.8, 1.2)):  # nosec B311
                break
            delay = min(delay * 2, self._backoff_max)

    def _list(self, collection: str | None = None, limit: int | None = None) -> None:
        """List the collection (in pages of `limit` when given) and replace the whole map with it.

        Every page of a list is served from the same snapshot, so the last page's resourceVersion
        is the list's: the watch resumes from it. An expired `continue` token is a 410 (list again).
        """
        items: dict[str, dict[str, dict[str, Any]]] = {}
        continue_from = ""
        while True:
            query: rest.Query = [("limit", limit)] if limit else []
            if continue_from:
                query.append(("continue", continue_from))
            response = rest.get(self._api, collection or self._collection, query, timeout=(5, 30))
            body = orjson.loads(response.data)
            for item in body.get("items") or []:
                obj = _trim(item, self.keep_status)
                metadata = obj["metadata"]
                items.setdefault(metadata.get("namespace") or "", {})[metadata["name"]] = obj
            version = body["metadata"]["resourceVersion"]
            continue_from = body["metadata"].get("continue") or ""
            if not continue_from:
                break
        self._items = items
        self._resource_version = version
        self._last_seen = time.monotonic()
        self._synced.set()
        self._notify("SYNCED", "")

    # -- a one-shot door (audit --cluster): the same map, filled once, no thread -----------------------
    def list_once(self, collection: str | None = None, limit: int | None = None) -> None:
        """List once, without watching: the map, the trimming and `synced` as the watch's first list gives.

        `collection` narrows the list (one namespace's claims); `limit` reads it in pages. Raises the
        kubernetes client's ApiException on any status but 2xx (urllib3's errors on the network).
        """
        self._list(collection, limit)

    def read_once(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        """GET one object into the map (a one-shot door scoped to it), as `lookup` does on a miss; None on 404."""
        try:
            obj = self._read(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        self._items.setdefault(namespace, {})[name] = obj
        self._last_seen = time.monotonic()
        self._synced.set()
        return obj

    def _watch(self) -> None:
        query = [
            ("watch", "true"),
            ("resourceVersion", self._resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self._watch_timeout),
        ]
        # read timeout beyond the server's: a silent connection is a dead one
        response = rest.get(self._api, self._collection, query, timeout=(5, self._watch_timeout + 30))
        self._response = response
        self._last_seen = time.monotonic()
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
        namespace = metadata.get("namespace") or ""
        if kind in ("ADDED", "MODIFIED"):
            self._items.setdefault(namespace, {})[metadata["name"]] = _trim(obj, self.keep_status)
        elif kind == "DELETED":
            self._items.get(namespace, {}).pop(metadata.get("name") or "", None)
        elif kind != "BOOKMARK":
            raise RuntimeError(f"unknown watch event type {kind!r}")
        self._last_seen = time.monotonic()
        if version:
            self._resource_version = version
        self._notify(str(kind), str(metadata.get("name", "")))

    def _notify(self, kind: str, name: str) -> None:
        if self._on_change is not None:
            self._on_change(kind, name)


_EMPTY: dict[str, dict[str, Any]] = {}
_MAX_MISSING = 10_000


def _trim(obj: dict[str, Any], keep_status: bool = True) -> dict[str, Any]:
    """managedFields is most of an object's bytes and no rule reads it."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    if not keep_status:
        obj.pop("status", None)
    return obj


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
