"""What one connection may cost the admission port, and how many there may be.

The port must be reachable by the apiserver, whose source address is not predictable, so in
practice any pod can connect. Every accepted connection costs memory before it sends a byte:
asyncio gives each TLS connection a 256 KiB read buffer at accept time, and holds a connection
that never starts TLS for its 60 s handshake timeout. So:

- the TLS read buffer is 16 KiB (one TLS record; a 3 MiB body is read in more, smaller reads);
- a TLS handshake must finish within `handshake_timeout` (the apiserver's takes milliseconds);
- at most `max_connections` are open; at the limit, idle connections (no request in progress,
  oldest first) are closed to make room, and if none is idle the new connection is refused
  with an HTTP 503 that says why.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import ssl
import time

from aiohttp import web

from webhook.server.metrics import Metrics

log = logging.getLogger("gpu_webhook.connections")
# One TLS record is at most 16 KiB of plaintext; asyncio's default (256 KiB per connection,
# allocated at accept) made 3,000 silent TCP connections cost ~970 MiB.
TLS_READ_BUFFER = 16 * 1024


def _refusal() -> bytes:
    body = b'{"error":"gpu-webhook: connection limit reached and no connection is idle; retry"}'
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Retry-After: 1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def shrink_tls_buffers() -> None:
    """asyncio's SSLProtocol reads the socket into a per-connection buffer of `max_size` bytes."""
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class _Refused(asyncio.Protocol):
    """Answers 503 and closes: the client learns why instead of seeing a reset."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_refusal())
        transport.close()


class ConnectionGuard:
    """Protocol factory in front of aiohttp's: counts connections, makes room, refuses past the limit."""

    def __init__(self, server: web.Server, max_connections: int, metrics: Metrics) -> None:
        self.server = server
        self.max_connections = max_connections
        self.metrics = metrics
        self.listener: asyncio.AbstractServer | None = None  # set once listening
        self._last_warning = 0.0

    def count(self) -> int:
        """Open connections, TLS handshakes in progress included; O(1), safe from any thread.

        asyncio's Server counts every transport it made (handshaking or not) in _active_count;
        aiohttp only learns of a connection once its handshake is done. Other loops (uvloop)
        have no such count: there, connections count once connected.
        """
        active = getattr(self.listener, "_active_count", None)
        return active if isinstance(active, int) else len(self.server._connections)

    def unanswered(self) -> int:
        """Connections accepted that have not yet started a request: a handshake in progress, or
        connected without a request so far. On SIGTERM their requests are still to come."""
        connections = self.server.connections
        handshaking = max(0, self.count() - len(connections))
        fresh = sum(
            1
            for handler in connections
            if getattr(handler, "_request_count", 1) == 0 and not getattr(handler, "_request_in_progress", False)
        )
        return handshaking + fresh

    def __call__(self) -> asyncio.BaseProtocol:
        # called once per accepted socket, before its transport exists (count() does not include it yet)
        if self.count() >= self.max_connections and not self._make_room():
            self.metrics.connections_refused.labels("limit").inc()
            self._warn()
            return _Refused()
        return self.server()

    def _make_room(self) -> bool:
        """Close the oldest idle connection; False when every connection has a request in progress."""
        for handler in self.server.connections:  # accept order: oldest first
            # aiohttp has no public "is idle": _request_in_progress is True from the first header
            # byte to the end of the response (default True: never close what cannot be read)
            if not getattr(handler, "_request_in_progress", True) and not getattr(handler, "_force_close", False):
                handler.close()
                self.metrics.connections_refused.labels("idle_closed").inc()
                return True
        return False

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._last_warning > 10:  # one line per 10 s, however many are refused
            self._last_warning = now
            log.warning(
                "connection limit reached: refusing new connections",
                extra={"max_connections": self.max_connections, "open": self.count()},
            )


class GuardedSite(web.TCPSite):
    """aiohttp's TCPSite, with the guard as protocol factory and TLS handshake/shutdown timeouts
    (aiohttp 3.14's TCPSite does not pass them to loop.create_server)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        reuse_port: bool | None,
        guard_limits: tuple[int, float],
        metrics: Metrics,
    ) -> None:
        # backlog stays aiohttp's 128: asyncio accepts up to `backlog` sockets in one callback, and
        # 1,024 accepts in one go held the loop for ~0.5 s under a connection flood
        super().__init__(runner, host, port, ssl_context=ssl_context, reuse_port=reuse_port)
        self._guard_limits = guard_limits
        self._metrics = metrics
        self.guard: ConnectionGuard | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        max_connections, handshake_timeout = self._guard_limits
        self.guard = ConnectionGuard(server, max_connections, self._metrics)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=handshake_timeout,
            ssl_shutdown_timeout=handshake_timeout,
        )
        self.guard.listener = self._server
        self._bound_port = self._server.sockets[0].getsockname()[1]
