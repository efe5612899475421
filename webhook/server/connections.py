"""What one connection may cost the admission port, and how many there may be.

The port must be reachable by the apiserver, whose source address is not predictable, so in
practice any pod can connect. Every accepted connection costs memory before it sends a byte:
asyncio gives each TLS connection a 256 KiB read buffer at accept time, and holds a connection
that never starts TLS for its 60 s handshake timeout. So:

- the TLS read buffer is 16 KiB (one TLS record; a 3 MiB body is read in more, smaller reads);
- a TLS handshake must finish within `handshake_timeout` of the accept (the apiserver's takes
  milliseconds);
- the TLS state (asyncio's SSLProtocol, an SSL object, two memory BIOs, the read buffer) is made
  when the client's first bytes arrive, and aiohttp's request handler (parser, buffers, timers)
  when the handshake is done: a socket that never sends costs an accepted socket, a small
  protocol and a timer, and leaves nothing for the garbage collector when it is dropped. asyncio's
  own TLS server makes all of it at accept and drops a silent socket by raising into the accept
  task (a reference cycle per socket): 1,000 silent sockets reconnecting every few seconds then
  made full collections of ~150 ms on the event loop, and their time-outs came in bursts;
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
from collections.abc import Callable
from typing import cast

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
        writer = cast(asyncio.WriteTransport, transport)  # asyncio's or uvloop's
        writer.write(_refusal())
        writer.close()


class _UntilFirstBytes(asyncio.Protocol):
    """An accepted socket before the client has sent anything: a timer and nothing else. Its first
    bytes (a TLS ClientHello) start TLS on it; silence past the deadline drops it."""

    __slots__ = ("_deadline", "_make_app", "_timer", "_tls", "_transport")

    def __init__(self, tls: TlsOnFirstBytes, make_app: Callable[[], asyncio.BaseProtocol]) -> None:
        self._tls = tls
        self._make_app = make_app
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's socket transport, or uvloop's (which has its methods without subclassing it)
        self._transport = plain = cast(asyncio.Transport, transport)
        loop = self._tls.loop
        self._deadline = loop.time() + self._tls.handshake_timeout
        self._timer = loop.call_at(self._deadline, plain.abort)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None and self._timer is not None
        self._timer.cancel()
        # the handshake gets what is left of the time since the accept, not a fresh allowance
        left = max(self._deadline - self._tls.loop.time(), 0.001)
        self._tls.start(self._transport, data, self._make_app(), left)

    def eof_received(self) -> bool:
        return False  # closed before a byte: close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()


class TlsOnFirstBytes:
    """Starts server-side TLS on a plain transport whose first bytes were read already."""

    def __init__(self, loop: asyncio.AbstractEventLoop, context: ssl.SSLContext, handshake_timeout: float) -> None:
        self.loop = loop
        self.context = context
        self.handshake_timeout = handshake_timeout

    def start(self, transport: asyncio.Transport, first: bytes, app: asyncio.BaseProtocol, timeout: float) -> None:
        # what loop.start_tls does, plus the bytes already read (start_tls wants none pending)
        protocol = asyncio.sslproto.SSLProtocol(
            self.loop,
            app,
            self.context,
            None,  # type: ignore[arg-type]  # no waiter (asyncio accepts None): the application protocol learns of the handshake
            server_side=True,
            ssl_handshake_timeout=timeout,  # type: ignore[arg-type]  # typeshed says int; a float works
            ssl_shutdown_timeout=self.handshake_timeout,
        )
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        view = memoryview(first)
        while view and not transport.is_closing():
            buffer = protocol.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            view = view[size:]
            protocol.buffer_updated(size)


class _AfterHandshake(asyncio.Protocol):
    """Stands in for aiohttp's handler until the TLS handshake is done, then hands the
    transport to a handler made at that moment (asyncio calls the application protocol's
    connection_made only after the handshake; a failed or timed-out handshake never reaches it)."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], asyncio.BaseProtocol]) -> None:
        self._make = make

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        handler = self._make()
        transport.set_protocol(handler)
        handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:  # never called: the handler replaces this first
        raise RuntimeError("data before connection_made")


class ConnectionGuard:
    """Protocol factory in front of aiohttp's: counts connections, makes room, refuses past the limit."""

    def __init__(self, server: web.Server, max_connections: int, metrics: Metrics, tls: TlsOnFirstBytes) -> None:
        self.server = server
        self.tls = tls
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
            return _UntilFirstBytes(self.tls, _Refused)
        return _UntilFirstBytes(self.tls, lambda: _AfterHandshake(self.server))

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
    """aiohttp's TCPSite, with the guard as protocol factory, TLS started on a socket's first bytes
    and the handshake/shutdown timeouts (aiohttp 3.14's TCPSite does not pass them to loop.create_server)."""

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
        loop = asyncio.get_running_loop()
        assert self._ssl_context is not None
        tls = TlsOnFirstBytes(loop, self._ssl_context, handshake_timeout)
        self.guard = ConnectionGuard(server, max_connections, self._metrics, tls)
        # a plain TCP server: the guard's protocols start TLS themselves (TlsOnFirstBytes)
        self._server = await loop.create_server(
            self.guard,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self.guard.listener = self._server
        self._bound_port = self._server.sockets[0].getsockname()[1]
