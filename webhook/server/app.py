"""The HTTPS door: aiohttp carries AdmissionReviews to the engine and answers.

POST /mutate and /validate speak AdmissionReview v1; GET /healthz, /readyz and
/metrics serve operators. All per-request work is parse -> evaluate -> serialise,
with no I/O: rules, certificates and namespace context are refreshed in the
background and read here as plain references.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from webhook.certs import CERT_FILE, KEY_FILE
from webhook.engine import Limits, Mode, Phase
from webhook.policies import admission as policy_admission
from webhook.server.build import BuildGuard
from webhook.server.connections import GuardedSite, shrink_tls_buffers
from webhook.server.context import NamespaceSource
from webhook.server.memory import settle, trim_periodically
from webhook.server.metrics import Metrics
from webhook.server.offload import Offload
from webhook.server.pipeline import Pipeline
from webhook.server.recorder import ReviewRecorder
from webhook.server.reload import CertificateStore, PolicySource, RuleStore, watch
from webhook.server.sequence import Problem

log = logging.getLogger("gpu_webhook.server")
http_log = logging.getLogger("gpu_webhook.http")  # aiohttp's per-connection errors, see _HttpErrors
MAX_BODY = 3 * 1024 * 1024  # the apiserver's own limit on a request body
# TLS 1.2 suites with forward secrecy and AEAD only; TLS 1.3 suites are all modern already.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# On SIGTERM, how long a connection accepted before the listener closed may take to start its
# request (a TLS handshake plus the headers: milliseconds from the apiserver).
FRESH_CONNECTION_GRACE = 2.0


class RegistrationSource(Protocol):
    """Keeps (or only checks) the live webhook configurations against the loaded rules from its own
    thread (webhook.server.registration_sync); the server starts and stops it and shows `status()` on /readyz."""

    def status(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...


@dataclass
class ServerConfig:
    rules: list[str]
    cert_dir: str
    host: str = "127.0.0.1"
    port: int = 8443
    mode: Mode = Mode.ENFORCE
    reload_interval: float = 1.0
    body_timeout: float = 10.0  # a client that trickles its body is cut off after this
    # A connection with no request in progress (idle, or still sending its headers) is closed
    # after this; aiohttp's own default is an hour, which lets stalled clients pile up.
    idle_timeout: float = 30.0
    rule_time_budget: float | None = 0.5  # CPU seconds of rule evaluation per request; past it rules error
    max_collection: int = 1000  # larger lists/maps in a pod spec are not handed to CEL (rule error)
    shutdown_timeout: float = 25.0  # in-flight requests get this long to finish on SIGTERM
    drain_delay: float = 0.0  # after SIGTERM, keep serving while endpoints are removed
    client_ca: str | None = None  # require client certificates signed by this CA (the apiserver's)
    metrics_host: str | None = None  # serve /metrics and health on plain HTTP here as well
    metrics_port: int | None = None
    reuse_port: bool = False
    # Connections on the admission port (handshakes included): ~30 KiB each once the TLS read
    # buffer is shrunk (webhook.server.connections), so 4,096 stay within ~120 MiB.
    max_connections: int = 4096
    handshake_timeout: float = 5.0  # a TLS handshake not finished this long after the accept is dropped (asyncio: 60 s)
    # Bodies larger than this are parsed and evaluated in a child process (webhook.server.offload), so
    # a 3 MiB object (~0.5 s of CPU) does not stall the small ones; below it the answer stays on
    # the event loop (a hop costs more than a 3 KB pod's whole evaluation).
    offload_threshold: int = 64 * 1024
    # Large requests (declared over offload_threshold, or of unknown length: chunked) admitted at
    # once, reading, queued or evaluating; more get a 429 at once, so a flood of 3 MiB bodies
    # holds at most ~48 MiB of bodies (only the one being evaluated is parsed).
    max_large_requests: int = 16
    # serve --record-reviews: write received AdmissionReviews here (debugging aid; webhook.server.recorder)
    record_reviews: str | None = None
    record_reviews_max: int = 100
    # GPUPolicyExceptions applied per namespace (webhook/engine/policyresources.py MAX_EXCEPTIONS_PER_NAMESPACE)
    max_exceptions_per_namespace: int = 64
    # `/policies` (webhook/policies/admission.py): checks waiting behind the running one, past which a 429;
    # seconds a check may take (None: the registration's timeoutSeconds less a margin)
    policy_check_queue: int = 4
    policy_check_deadline: float | None = None


@dataclass
class ServerState:
    config: ServerConfig
    rules: RuleStore
    certs: CertificateStore | None
    metrics: Metrics
    namespaces: NamespaceSource | None = None
    registration: RegistrationSource | None = None
    stopping: bool = False
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    large_in_progress: int = 0
    offload: Offload = field(default_factory=Offload)
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    recorder: ReviewRecorder | None = None

    def pipeline(self, phase: Phase, endpoint: str) -> Pipeline:
        config = self.config
        return Pipeline(
            phase,
            endpoint,
            self.rules,
            config.mode,
            Limits(config.rule_time_budget, config.max_collection),
            config.offload_threshold,
            self.offload,
            self.namespaces,
        )

    @contextlib.contextmanager
    def request_in_flight(self) -> Iterator[None]:
        """Counts the request for draining (Server.stop waits until none is in flight)."""
        self.in_flight += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.idle.set()

    @contextlib.contextmanager
    def large_request(self, declared: int | None) -> Iterator[None]:
        """Admits a large body (declared over the offload threshold, or of unknown length: chunked)
        while fewer than max_large_requests are in progress; more are refused at once (429)."""
        config = self.config
        if declared is not None and declared <= config.offload_threshold:
            yield
            return
        if self.large_in_progress >= config.max_large_requests:
            raise _Refused(
                429,
                f"{config.max_large_requests} requests over {config.offload_threshold} bytes "
                "are already being evaluated; retry",
                retry_after=True,
            )
        self.large_in_progress += 1
        try:
            yield
        finally:
            self.large_in_progress -= 1


STATE = web.AppKey("state", ServerState)


def tls_context(cert_dir: str, client_ca: str | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(Path(cert_dir) / CERT_FILE, Path(cert_dir) / KEY_FILE)
    if client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context


def _admission_handler(pipeline: Pipeline) -> Callable[[web.Request], Any]:
    """The transport of one endpoint: read the body, call the pipeline, map its answer to HTTP and metrics."""
    endpoint = pipeline.endpoint

    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        started = time.perf_counter()
        with state.request_in_flight():
            try:
                body = await _read_body(request, state)
            except _Refused as refused:
                state.metrics.rejected.labels(refused.code).inc()
                return _closing(state, _problem(refused.status, refused.message, refused.retry_after))
            if state.recorder is not None:
                state.recorder.record(endpoint, body)
            result = await pipeline(body)
        if result.offloaded:
            state.metrics.offloaded.inc()
        if isinstance(result, Problem):
            state.metrics.rejected.labels(str(result.status)).inc()
            return _closing(state, _problem(result.status, result.message))
        state.metrics.observe_rules(result.rule_results, result.rule_errors)
        if result.exceptions_used:
            state.metrics.observe_exceptions(result.exceptions_used)
        state.metrics.observe(endpoint, result.operation, result.kind, result.outcome, time.perf_counter() - started)
        return _closing(state, web.Response(body=result.answer, content_type="application/json"))

    return handle


class _Refused(Exception):
    """A request refused before its body reached the pipeline: HTTP status, metric code, message."""

    def __init__(self, status: int, message: str, code: str | None = None, retry_after: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.retry_after = status, message, code or str(status), retry_after


async def _read_body(request: web.Request, state: ServerState) -> bytes:
    """The body, within the limits that keep a replica up: size, large requests at once, time to send it."""
    config = state.config
    declared = request.content_length
    if (declared or 0) > MAX_BODY:  # refused from the header, without waiting for the body
        raise _Refused(413, f"request body exceeds {MAX_BODY} bytes")
    with state.large_request(declared):
        try:
            if request.content.is_eof():
                return await request.read()  # already all here (the usual case): no timer needed
            # asyncio.timeout, not wait_for: wait_for wraps the read in a task of its own (3.11)
            async with asyncio.timeout(config.body_timeout):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _Refused(413, f"request body exceeds {MAX_BODY} bytes") from None
        except TimeoutError:
            raise _Refused(408, f"request body not received within {config.body_timeout:g}s") from None
        except ConnectionError:
            # the client went away mid-body (nginx calls this 499): nothing to answer, nothing broken here
            raise _Refused(400, "client closed the connection before sending the whole body", code="499") from None


def _closing(state: ServerState, response: web.Response) -> web.Response:
    if state.stopping:
        response.force_close()  # while draining, no connection is kept for a next request
    return response


class _HttpErrors(logging.Filter):
    """aiohttp logs every malformed HTTP message at ERROR with a traceback: any client could
    fill the logs with fake alarms. A malformed message is the client's fault: log it at info,
    one line, no traceback. Errors of any other kind keep their level and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg, record.args = "malformed HTTP request from %s: %s", (*record.args[:1], error.message)  # type: ignore[index,misc]
            record.levelno, record.levelname, record.exc_info, record.exc_text = logging.INFO, "INFO", None, None
        return True


def _problem(status: int, message: str, retry_after: bool = False) -> web.Response:
    headers = {"Retry-After": "1"} if retry_after else None
    return web.Response(
        status=status, body=orjson.dumps({"error": message}), content_type="application/json", headers=headers
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def readiness(state: ServerState) -> tuple[bool, dict[str, Any]]:
    rules = state.rules
    detail: dict[str, Any] = {
        "rules": {
            "loaded": rules.ruleset is not None,
            "generation": rules.generation,
            "count": len(rules.ruleset.rules) if rules.ruleset else 0,
            "lastReloadErrors": [str(e) for e in rules.errors],
        },
        "stopping": state.stopping,
    }
    ready = rules.ruleset is not None and not state.stopping
    if rules.cluster is not None:
        # serve --policies cluster|both: ready once a load has read the listed policy objects and every
        # policy kind has been listed (a 403, 404 or no answer names the kind under `unavailable`). A
        # broken object does not make the replica unready: it alone is left out (`rejected`, its status
        # says why); neither does access lost after the first list (`degraded`: the last objects serve)
        detail["policies"] = rules.cluster_detail()
        ready = ready and rules.cluster_loaded and not detail["policies"]["unavailable"]
    if state.namespaces is not None:
        # until the first list, rules that read namespaceObject fall back to onMissingContext;
        # a stale watch is reported (and counted) but keeps the replica ready: failing every
        # replica's readiness at once would turn a quiet watch into a cluster-wide outage
        caches = state.namespaces.detail()
        references = rules.ruleset.references if rules.ruleset is not None else frozenset()
        synced = state.namespaces.synced_for(references)  # the namespaces, and what else the rules read
        detail["namespaces"] = {"synced": synced, "caches": caches}
        ready = ready and synced
    if state.registration is not None:
        # a drifting registration is detail only: it still sends most requests, and an unready webhook
        # (every replica, at once) would refuse or skip them all; but a replica that just started waits
        # (bounded) until the registration sends what its rules need (registration_sync.RegistrationSync.ready)
        registration = state.registration.status()
        detail["registration"] = registration
        ready = ready and registration.get("ready", True) is not False
    if state.certs is not None:
        detail["certificate"] = {
            "notAfter": state.certs.not_after,
            "valid": state.certs.valid,
            "error": state.certs.error,
        }
        ready = ready and state.certs.valid
    detail["ready"] = ready
    return ready, detail


async def readyz(request: web.Request) -> web.Response:
    ready, detail = readiness(request.app[STATE])
    return web.Response(
        status=200 if ready else 503,
        body=orjson.dumps(detail, option=orjson.OPT_INDENT_2),
        content_type="application/json",
    )


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.Response(body=await state.metrics.render_async(), headers={"Content-Type": state.metrics.content_type})


def build_app(state: ServerState, admission: bool = True) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[STATE] = state
    if admission:
        for phase, endpoint in ((Phase.MUTATE, "mutate"), (Phase.VALIDATE, "validate")):
            app.router.add_post(f"/{endpoint}", _admission_handler(state.pipeline(phase, endpoint)))
        observe = functools.partial(state.metrics.observe, "policies")
        limits = policy_admission.limits_of(state.config)
        exceptions = getattr(state.namespaces, "exceptions", None)  # ClusterCaches' GPUPolicyException cache
        policy_admission.install(app, state.rules, observe, limits, exceptions)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


class Server:
    """Owns the sites and background tasks of one process; start() then stop() (or run())."""

    def __init__(
        self, config: ServerConfig, namespaces: NamespaceSource | None = None, policies: PolicySource | None = None
    ) -> None:
        self.config = config
        self.metrics = Metrics()
        self.build = BuildGuard(self.metrics.registry)
        rules = RuleStore(paths=list(config.rules), metrics=self.metrics, cluster=policies, build=self.build)
        if not rules.load():
            raise ValueError("\n".join(str(e) for e in rules.errors))
        context = tls_context(config.cert_dir, config.client_ca)
        certs = CertificateStore(cert_dir=config.cert_dir, context=context, metrics=self.metrics)
        certs.load()
        self.state = ServerState(config=config, rules=rules, certs=certs, metrics=self.metrics, namespaces=namespaces)
        if config.record_reviews:
            self.state.recorder = ReviewRecorder(Path(config.record_reviews), config.record_reviews_max)
        self._runners: list[web.AppRunner] = []
        self._site: GuardedSite | None = None
        self.port = config.port

    async def start(self) -> None:
        config = self.config
        if not any(isinstance(f, _HttpErrors) for f in http_log.filters):
            http_log.addFilter(_HttpErrors())
        runner = web.AppRunner(
            build_app(self.state),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=config.shutdown_timeout,
            keepalive_timeout=config.idle_timeout,
            logger=http_log,
        )
        await runner.setup()
        assert self.state.certs is not None
        shrink_tls_buffers()
        site = GuardedSite(
            runner,
            config.host,
            config.port,
            ssl_context=self.state.certs.context,
            reuse_port=config.reuse_port or None,
            guard_limits=(config.max_connections, config.handshake_timeout),
            metrics=self.metrics,
        )
        await site.start()
        self._site = site
        guard = site.guard
        assert guard is not None
        self.metrics.connections.set_function(lambda: float(guard.count()))
        self._runners.append(runner)
        self.port = runner.addresses[0][1]
        if config.metrics_port is not None:
            plain = web.AppRunner(
                build_app(self.state, admission=False),
                access_log=None,
                handle_signals=False,
                keepalive_timeout=config.idle_timeout,
                logger=http_log,
            )
            await plain.setup()
            await web.TCPSite(plain, config.metrics_host or "127.0.0.1", config.metrics_port).start()
            self._runners.append(plain)
        self.state.background.append(
            asyncio.create_task(watch(self.state.rules, self.state.certs, config.reload_interval))
        )
        self.state.background.append(asyncio.create_task(trim_periodically()))
        settle()
        namespaces = self.state.namespaces
        if namespaces is not None:
            namespaces.start()
            self.metrics.namespaces_synced.set_function(lambda: float(namespaces.synced))
            for cache_name in namespaces.detail():
                self.metrics.watch_stale.labels(cache_name).set_function(
                    lambda c=cache_name: float(bool(namespaces.detail().get(c, {}).get("stale")))  # type: ignore[misc]
                )
        policies = self.state.rules.cluster
        if policies is not None:
            for kind in policies.kinds():
                self.metrics.policy_source_ready.labels(kind).set_function(
                    lambda k=kind: float(k not in policies.unavailable() and k not in policies.degraded())  # type: ignore[misc]
                )
        if self.state.registration is not None:
            self.state.registration.start()
        log.info(
            "serving",
            extra={
                "address": f"https://{config.host}:{self.port}",
                "mode": str(config.mode),
                "rules": config.rules,
                "version": self.build.version,
                "pack": self.build.pack,
            },
        )

    async def stop(self) -> None:
        """Drain: report not ready, stop accepting, finish in-flight requests (up to shutdown_timeout), close.

        aiohttp's own shutdown cancels a handler still receiving its body, so the wait
        for in-flight requests happens here, before its cleanup runs.
        """
        state = self.state
        state.stopping = True
        if self.config.drain_delay:
            await asyncio.sleep(self.config.drain_delay)  # endpoints still point here for a moment
        for runner in self._runners:
            for site in list(runner.sites):
                await site.stop()  # no new connections; open ones keep being served
        deadline = time.monotonic() + self.config.shutdown_timeout
        await self._await_accepted(min(deadline, time.monotonic() + FRESH_CONNECTION_GRACE))
        if state.in_flight:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.idle.wait(), max(0.0, deadline - time.monotonic()))
        state.offload.shutdown()
        for task in state.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for runner in self._runners:
            await runner.cleanup()
        if state.namespaces is not None:
            await asyncio.to_thread(state.namespaces.stop)
        if state.registration is not None:
            await asyncio.to_thread(state.registration.stop)
        log.info("stopped", extra={"unfinished": state.in_flight})

    async def _await_accepted(self, until: float) -> None:
        """Connections accepted just before the listener closed have a request on its way (their
        client chose us a moment ago): wait for it to start, or for the connection to close,
        before the cleanup closes every connection without a request in progress, which would
        cut them off with "Server disconnected" although none had been answered."""
        guard = self._site.guard if self._site is not None else None
        while guard is not None and guard.unanswered() and time.monotonic() < until:
            await asyncio.sleep(0.01)

    async def run(self) -> None:
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("signal received, draining")
        await self.stop()
