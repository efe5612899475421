"""A stand-in Kubernetes API server on 127.0.0.1 for audit tests: lists, paging, namespaces, reports.

It answers as the real API does where the audit depends on it: list items carry no
apiVersion/kind, pages end with `metadata.continue` and `remainingItemCount`, kinds the
cluster does not serve are 404 Status objects, a bearer token is required, and
PolicyReports can be created (409 when present) and replaced (409 on a stale resourceVersion).
It runs its own event loop in a thread because the kubernetes client is synchronous.

Kept for the fast loop (in process, no apiserver start) and for answers a real apiserver does not
give on cue (a 403 on one collection, a kind it does not serve); the same audit against a real
kube-apiserver, the verdicts compared with the running webhook's, is tests/e2e/test_audit_cluster.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

TOKEN = "stub-token"
REPORTS = "wgpolicyk8s.io/v1alpha2"


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


class ApiStub:
    def __init__(self) -> None:
        # "group/version/plural" -> items (each with metadata.namespace when namespaced)
        self.collections: dict[str, list[dict[str, Any]]] = {"v1/namespaces": []}
        self.reports: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self.requests: list[str] = []  # "GET /path?query" in order, for assertions
        self.forbidden: set[str] = set()  # "group/version/plural" the caller may not list (RBAC): 403
        self.port = 0
        self._version = 100

    # -- fixtures --------------------------------------------------------------------------------
    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.collections["v1/namespaces"].append({"metadata": {"name": name, "labels": labels or {}}})

    def add(self, obj: dict[str, Any], plural: str | None = None) -> None:
        """Store an object as the API would list it: apiVersion and kind stripped (plural: kind + s)."""
        obj = json.loads(json.dumps(obj))
        api_version, kind = obj.pop("apiVersion"), obj.pop("kind")
        plural = plural or kind.lower() + "s"
        self.collections.setdefault(f"{api_version}/{plural}", []).append(obj)

    def serve(self, api_version: str, plural: str) -> None:
        """Serve an empty collection (a CRD that is installed but unused)."""
        self.collections.setdefault(f"{api_version}/{plural}", [])

    # -- HTTP ------------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(f"{request.method} {request.path_qs}")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        parts = [p for p in request.path.split("/") if p]
        if parts[:1] == ["api"]:
            group_version, rest = parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return _status(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if group_version == REPORTS:
            return await self._reports(request, rest, namespace or "")
        if len(rest) == 2 and group_version == "v1" and rest[0] == "namespaces":
            for item in self.collections["v1/namespaces"]:
                if item["metadata"]["name"] == rest[1]:
                    return web.json_response({"apiVersion": "v1", "kind": "Namespace", **item})
            return _status(404, "NotFound", f'namespaces "{rest[1]}" not found')
        key = f"{group_version}/{rest[0]}"
        if key in self.forbidden:
            return _status(403, "Forbidden", f"{rest[0]} is forbidden: User cannot list resource {rest[0]!r}")
        if len(rest) != 1 or key not in self.collections or request.method != "GET":
            return _status(404, "NotFound", "the server could not find the requested resource")
        items = [
            item
            for item in self.collections[key]
            if namespace is None or item.get("metadata", {}).get("namespace") == namespace
        ]
        return self._page(request, items, group_version, rest[0])

    def _page(self, request: web.Request, items: list[dict[str, Any]], group_version: str, plural: str) -> web.Response:
        limit = int(request.query.get("limit") or 0) or len(items) or 1
        token = request.query.get("continue")
        start = json.loads(base64.b64decode(token))["start"] if token else 0
        page = items[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
        if start + limit < len(items):
            metadata["continue"] = base64.b64encode(json.dumps({"start": start + limit}).encode()).decode()
            metadata["remainingItemCount"] = len(items) - start - limit
        kind = plural[:-1].capitalize() + "List"
        return web.json_response({"apiVersion": group_version, "kind": kind, "metadata": metadata, "items": page})

    async def _reports(self, request: web.Request, rest: list[str], namespace: str) -> web.Response:
        plural = rest[0]
        if plural not in ("policyreports", "clusterpolicyreports"):
            return _status(404, "NotFound", "the server could not find the requested resource")
        if request.method == "POST" and len(rest) == 1:
            body = await request.json()
            key = (plural, namespace, body["metadata"]["name"])
            if key in self.reports:
                return _status(409, "AlreadyExists", f"{plural} {key[2]!r} already exists")
            return web.json_response(self._store(key, body), status=201)
        if len(rest) != 2:
            return _status(405, "MethodNotAllowed", "not supported by the stub")
        key = (plural, namespace, rest[1])
        if request.method == "GET":
            if key not in self.reports:
                return _status(404, "NotFound", f'{plural} "{rest[1]}" not found')
            return web.json_response(self.reports[key])
        if request.method == "PUT":
            body = await request.json()
            current = self.reports.get(key)
            if current is None:
                return _status(404, "NotFound", f'{plural} "{rest[1]}" not found')
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict", "the object has been modified")
            return web.json_response(self._store(key, body))
        return _status(405, "MethodNotAllowed", "not supported by the stub")

    def _store(self, key: tuple[str, str, str], body: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        body["metadata"]["resourceVersion"] = str(self._version)
        self.reports[key] = body
        return body

    # -- lifecycle -------------------------------------------------------------------------------
    @contextmanager
    def running(self) -> Iterator[ApiStub]:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app, access_log=None)
        ready = threading.Event()

        async def start() -> None:
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
        ready.wait(10)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()

    def kubeconfig(self, path: Path, context: str = "stub") -> Path:
        """A kubeconfig whose context points at this server with the stub's token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "stub", "user": {"token": TOKEN}}],
            "contexts": [{"name": context, "context": {"cluster": "stub", "user": "stub"}}],
            "current-context": context,
        }
        path.write_text(json.dumps(config))
        return path
