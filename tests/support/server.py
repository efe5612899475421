"""The server in process and a client for it: start_server, LiveServer, a TLS client, waits on observable state."""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

from webhook.certs import CA_FILE
from webhook.engine import ClusterContext, RuleSet, load_rules
from webhook.server import Server, ServerConfig

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
EXAMPLES = REPO / "examples"

# A rule that gives a CPU pod a GPU (an init container asking for one): the engine must count what
# the object asks for after each edit, and Decision.accelerators what it asked for as received.
ADDS_A_GPU_INIT_CONTAINER = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: a-add-gpu-init-container}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - merge:
        spec:
          initContainers:
            - name: warmup
              image: nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04
              resources: {limits: {nvidia.com/gpu: "1"}}
---
"""


def load_rule_text(directory: Path, *documents: str) -> RuleSet:
    """The rules of these YAML documents, written to DIRECTORY/rules.yaml and loaded; the test fails if they do not load."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yaml").write_text("---\n".join(documents))
    result = load_rules(directory)
    assert result.ok and result.ruleset is not None, result.errors
    return result.ruleset


def client_ssl(cert_dir: Path) -> ssl.SSLContext:
    """A client that trusts only the test CA and checks the host name, as the apiserver does."""
    context = ssl.create_default_context(cafile=str(cert_dir / CA_FILE))
    context.check_hostname = True
    return context


class LiveServer:
    def __init__(self, server: Server, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.base = f"https://localhost:{server.port}"

    async def review(self, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(f"{self.base}/{endpoint}", json=review) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def post_raw(self, endpoint: str, body: bytes, **kwargs: Any) -> tuple[int, str]:
        async with self.session.post(f"{self.base}/{endpoint}", data=body, **kwargs) as response:
            return response.status, await response.text()

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(f"{self.base}{path}") as response:
            return response.status, await response.text()


async def start_server(cert_dir: Path, rules_dir: Path, namespaces: Any = None, **overrides: Any) -> Server:
    # debug level exercises every logging path (decision logs with traces) in every server test
    logging.getLogger("gpu_webhook").setLevel(logging.DEBUG)
    config = ServerConfig(
        rules=[str(rules_dir)], cert_dir=str(cert_dir), port=0, reload_interval=0.05, shutdown_timeout=5, **overrides
    )
    server = Server(config, namespaces=namespaces)
    await server.start()
    return server


def free_port() -> int:
    """A port nothing listens on right now, for a server started in a subprocess."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_ready(session: aiohttp.ClientSession, url: str, attempts: int = 200) -> None:
    """Poll a /readyz URL until it answers 200 (50 ms apart); fail the test if it never does."""
    for _ in range(attempts):
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectorError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never answered 200")


async def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait until `condition()` (a value, or an awaitable) is true, polling every 10 ms: tests wait
    for state they can observe, never for a guessed number of seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def refuses_connections(port: int) -> bool:
    """True once nothing listens on 127.0.0.1:port any more (a draining server closed its listener)."""
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()  # at once: the server sees a connection that closed without a request
    return False


class HeldBodies:
    """Request bodies that send their first bytes and then wait for `release()`: requests a server
    is in the middle of receiving. `sent` counts bodies whose first chunk has been written (the
    generator resumes only after aiohttp wrote it, so the connection is accepted and past TLS)."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._released = asyncio.Event()
        self.sent = 0

    async def body(self) -> AsyncIterator[bytes]:
        yield self._body[:100]
        self.sent += 1
        await self._released.wait()
        yield self._body[100:]

    def release(self) -> None:
        self._released.set()


class StaticNamespaces:
    """The server's NamespaceSource with fixed Namespaces, synced from the start: a cluster whose
    namespaces never change, without a watch (no PriorityClasses or DRA objects known)."""

    synced = True

    def __init__(self, namespaces: dict[str, dict[str, Any]]) -> None:
        self.namespaces = namespaces

    def synced_for(self, references: frozenset[str]) -> bool:
        return True  # nothing more to list: the rules see no PriorityClasses, as a cluster without any

    def get(self, name: str) -> dict[str, Any] | None:
        return self.namespaces.get(name)

    async def lookup(self, name: str) -> dict[str, Any] | None:
        return self.namespaces.get(name)

    def context(self, namespace: str | None) -> ClusterContext:
        """No cluster context beyond the namespaces."""
        return ClusterContext()

    async def resolve_claims(self, namespace: str, pod: Any) -> None:
        """No claims to look up."""

    def detail(self) -> dict[str, Any]:
        return {"namespace": {"synced": True, "objects": len(self.namespaces)}}

    def start(self) -> None:
        """Nothing to watch."""

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing to stop."""


# A site's own rule beside the pack (a GPU pod without a team label: the pack patches it, this denies it)
SITE_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: site-team-label}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: every pod names its team
"""
