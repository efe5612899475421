"""`gpu-webhook serve`: run the HTTPS admission server."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.commands.common import EXIT_USAGE, UsageError, add_rules, describe_rules, rule_paths

if TYPE_CHECKING:
    import logging

    from kubernetes.client import ApiClient

    from webhook.kube import ClusterCaches
    from webhook.kube.policies import PolicyCaches
    from webhook.policies.status import StatusWriter
    from webhook.server import Server, ServerConfig
    from webhook.server.metrics import Metrics
    from webhook.server.registration_sync import RegistrationSync

MODES = ("enforce", "audit")  # webhook.engine.Mode's values: the parser does not import the engine


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the admission webhook (HTTPS)")
    add_rules(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    parser.add_argument(
        "--cert-dir", default="certs", help="directory with tls.crt/tls.key; made (self-signed, localhost) if empty"
    )
    parser.add_argument("--mode", choices=MODES, default="enforce", help="audit turns Deny into Audit")
    parser.add_argument("--client-ca", help="require client certificates signed by this CA file")
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address of the plain-HTTP metrics port")
    parser.add_argument("--metrics-port", type=int, help="also serve /metrics, /healthz, /readyz over plain HTTP here")
    parser.add_argument("--reload-interval", type=float, default=1.0, help="seconds between checks for changed files")
    parser.add_argument(
        "--shutdown-timeout", type=float, default=25.0, help="seconds in-flight requests get on SIGTERM"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        help="close a connection after this many seconds without a request in progress (stalled clients)",
    )
    parser.add_argument(
        "--rule-time-budget",
        type=float,
        default=0.5,
        help="CPU seconds of rule evaluation per request (the evaluating thread's own CPU time: pauses and "
        "neighbours do not count); rules still to run after it error under their failurePolicy",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=4096,
        help="open connections on the HTTPS port; at the limit idle ones are closed, else new ones get a 503",
    )
    parser.add_argument(
        "--handshake-timeout", type=float, default=5.0, help="seconds a client has to finish its TLS handshake"
    )
    parser.add_argument("--drain-delay", type=float, default=0.0, help="seconds to keep serving after SIGTERM")
    parser.add_argument(
        "--namespaces",
        choices=["auto", "watch", "off"],
        default="auto",
        help="watch Namespaces (namespaceObject), PriorityClasses and DRA claims (auto: when in a cluster or "
        "given --kubeconfig/--context; off: the rules that need them cannot act, and the server says which)",
    )
    parser.add_argument(
        "--policies",
        choices=["auto", "files", "cluster", "both"],
        default="auto",
        help="where rules come from: files (--rules/--site, the pack by default), cluster (GPUPolicy and "
        "GPUPolicyOverlay objects), or both, loaded together (a rule name in both is an error). auto "
        "(default): both when there is a cluster connection (see --namespaces), else files; a cluster "
        "without the CRDs then simply has no policy objects. With cluster or both, a policy kind the server "
        "cannot list (forbidden, not served, no answer) keeps it unready (/readyz says which and why). Uses "
        "the connection of --namespaces, which also reads the GPUPolicyExceptions whatever this says",
    )
    parser.add_argument(
        "--policy-watch-timeout",
        type=int,
        default=300,
        metavar="SECONDS",
        help="each watch of the GPUPolicies and overlays ends after this and starts again (default 300): the longest a "
        "replica takes to notice that it may no longer read them (it then keeps the objects it had)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig for the namespace watch (default: in-cluster)")
    parser.add_argument("--context", help="kubeconfig context for the namespace watch")
    parser.add_argument(
        "--manage-registration",
        nargs="?",
        const="true",
        default="auto",
        choices=["auto", "true", "false"],
        help="keep the rules and matchConditions of the webhook configurations gpu-webhook-mutating and "
        "gpu-webhook-validating sending what every live replica's rules need (nothing else of them): each "
        "replica publishes its needs in a Lease, and the one holding the Lease gpu-webhook-registration in "
        "POD_NAMESPACE writes their union; false: leave them to "
        "GitOps and only report drift (/readyz, gpu_webhook_registration_drift); auto (default): true in a "
        "cluster's pod, false with --kubeconfig/--context. Uses the cluster connection of --namespaces",
    )
    parser.add_argument(
        "--registration-interval",
        type=float,
        default=30.0,
        help="seconds between a follower's or a report-only server's checks of the live webhook configurations "
        "(default 30; the writer checks every 2 s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (SO_REUSEPORT), one per core; worker i serves the "
        "plain-HTTP metrics on --metrics-port + i",
    )
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop; auto uses uvloop when installed (pip install 'gpu-webhook[fast]')",
    )
    parser.add_argument(
        "--record-reviews",
        metavar="DIR",
        help="debugging aid: write the AdmissionReviews received to DIR as they arrive (files 0600; they hold "
        "the objects' contents and the requesting user: record in a test cluster, then delete them)",
    )
    parser.add_argument(
        "--record-reviews-max",
        type=int,
        default=100,
        metavar="N",
        help="stop recording after N reviews (or 64 MiB) per process (default 100)",
    )
    parser.add_argument(
        "--max-exceptions-per-namespace",
        type=int,
        default=64,
        metavar="N",
        help="GPUPolicyExceptions applied per namespace (default 64): past N the newest are not applied "
        "(gpu_webhook_exceptions_not_applied), and /policies refuses new ones",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(run=run)


def _cluster(args: argparse.Namespace) -> ApiClient | None:
    """The connection for the watch caches and the registration, or None without a cluster."""
    wanted = args.namespaces == "watch" or (
        args.namespaces == "auto" and bool(args.kubeconfig or args.context or os.environ.get("KUBERNETES_SERVICE_HOST"))
    )
    if not wanted:
        _warn_without_context(args)
        return None
    from webhook.kube import ClusterError, connect

    try:
        return connect(args.kubeconfig, args.context)
    except ClusterError as error:
        raise UsageError(str(error)) from None


def policy_sources(args: argparse.Namespace, connected: bool) -> tuple[bool, bool]:
    """(files, cluster): where the rules come from. auto is both with a cluster connection, else files:
    a server that has never seen a GPUPolicy keeps serving its files as before, and one in a cluster
    picks policy objects up as soon as the CRDs are installed, without a flag to change."""
    wanted = args.policies
    if wanted == "auto":
        wanted = "both" if connected else "files"
    if wanted != "files" and not connected:
        raise UsageError(
            f"--policies {args.policies} reads GPUPolicy objects from a cluster: give --kubeconfig/--context, "
            "run in a pod, or --namespaces watch"
        )
    return wanted != "cluster", wanted != "files"


def _policy_caches(
    api_client: ApiClient, args: argparse.Namespace, context: ClusterCaches | None, timeout: float = 10.0
) -> PolicyCaches:
    """The policy objects' watch caches, started and (for up to `timeout` seconds) listed, so that the
    first load already holds them; the server is not ready until a load has, and until every policy
    kind it reads (the exceptions' cache of `context` too) has been listed (webhook/server/app.py).
    `--policies auto` reads a 404 (no CRDs) as "no objects"; cluster and both are not ready without them."""
    from webhook.kube.policies import PolicyCaches

    caches = PolicyCaches(
        api_client,
        absent_ok=args.policies == "auto",
        exceptions=context.exceptions if context is not None else None,
        watch_timeout=args.policy_watch_timeout,
    )
    caches.start()
    if not caches.wait_answered(timeout):
        _log().warning("policy objects not listed within %.0fs; loading the files first", timeout)
    return caches


def _status_writer(
    api_client: ApiClient,
    server: Server,
    metrics: Metrics,
    caches: PolicyCaches,
    registered: Callable[[int], bool] | None,
) -> StatusWriter:
    """Writes this replica's view into each policy object's status; the pod is POD_NAME in POD_NAMESPACE
    (the Deployment's downward API), else the host name, and then gone replicas cannot be told. With
    `registered` (a replica that manages the registration), an object is ready on this replica once the
    live registration also sends what the rules that took it in use need."""
    import socket

    from webhook.kube import rest
    from webhook.policies.status import StatusWriter

    replica = os.environ.get("POD_NAME") or socket.gethostname()
    namespace = os.environ.get("POD_NAMESPACE")
    exists = None
    if namespace:

        def exists(name: str) -> bool:
            answer = rest.send(api_client, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}", timeout=(2, 5))
            answer.read()
            return bool(answer.status != 404)

    return StatusWriter(
        api_client,
        server.state.rules,
        caches,
        replica,
        replica_exists=exists,
        registered=registered,
        on_write=lambda kind: metrics.policy_status_writes.labels(kind).inc(),
    )


def _namespace_cache(api_client: ApiClient | None, exceptions_per_namespace: int) -> ClusterCaches | None:
    """The cluster's watch caches (namespaces, PriorityClasses, DRA claims, exceptions), or None without a cluster."""
    if api_client is None:
        return None
    from webhook.kube import ClusterCaches

    return ClusterCaches(api_client, exceptions_per_namespace=exceptions_per_namespace)


def manages_registration(args: argparse.Namespace) -> bool:
    """auto: a server in a pod of the cluster manages; one pointed at a cluster from elsewhere
    (--kubeconfig, --context: a laptop, a test) only reports, so that it never rewrites the
    registration of a cluster it merely reads."""
    if args.manage_registration != "auto":
        return bool(args.manage_registration == "true")
    return not (args.kubeconfig or args.context) and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _registration(args: argparse.Namespace, api_client: ApiClient, server: Server, writer: bool) -> RegistrationSync:
    from webhook.server.registration_sync import RegistrationSync

    manage = manages_registration(args) and writer
    _log().info(
        "webhook registration: %s",
        "kept in step with the rules" if manage else "checked for drift only (--manage-registration)",
        extra={"manageRegistration": manage},
    )
    namespace, identity = registration_identity()
    return RegistrationSync(
        api_client,
        server.state.rules,
        manage=manage,
        interval=args.registration_interval,
        metrics=server.metrics,
        namespace=namespace,
        identity=identity,
    )


def registration_identity() -> tuple[str, str]:
    """Where this replica's registration Leases live and who it is there: POD_NAMESPACE and POD_NAME (the
    Deployment's downward API; the writer matches records to the Deployment's Pods by name), else the
    manifests' namespace and the host name with the process id (two servers on one host are two replicas)."""
    import socket

    from webhook.install.registration import NAMESPACE

    return (
        os.environ.get("POD_NAMESPACE") or NAMESPACE,
        os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
    )


def _warn_without_context(args: argparse.Namespace) -> None:
    """Say loudly which rules cannot act without the namespace watch."""
    from webhook.engine import load_rules

    result = load_rules(rule_paths(args.rules, args.site))
    if result.ruleset is None:
        return  # the server reports the load errors itself
    blind = [r for r in result.ruleset.rules if r.needs_namespace]
    allowing = sorted(r.name for r in blind if r.on_missing_context == "Allow")
    denying = sorted(r.name for r in blind if r.on_missing_context == "Deny")
    _log().warning(
        "no namespace watch (--namespaces %s): %d rules that need namespace labels or annotations will not act "
        "(onMissingContext: Allow): %s; %d will deny every request they match (onMissingContext: Deny): %s; "
        "PriorityClasses, DRA claims and Kueue's queues are unknown too (dra-pod-claims-resolvable cannot resolve "
        "claims)",
        args.namespaces,
        len(allowing),
        ", ".join(allowing) or "none",
        len(denying),
        ", ".join(denying) or "none",
        extra={"rulesNotActing": allowing, "rulesDenying": denying},
    )


def _log() -> logging.Logger:
    import logging  # not at import time: building the parser (`--help`) needs none of it

    return logging.getLogger("gpu_webhook.serve")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from webhook.certs import CA_FILE, ensure_dev_certificates
    from webhook.engine import Mode
    from webhook.server import ServerConfig, logs
    from webhook.server.workers import run_workers

    logs.configure(args.log_level)
    cert_dir = Path(args.cert_dir)
    if ensure_dev_certificates(cert_dir):
        print(
            f"gpu-webhook: made a throw-away CA and a certificate for localhost in {cert_dir}/; "
            f"trust {cert_dir / CA_FILE} to call https://{args.host}:{args.port}",
            file=sys.stderr,
        )
    if args.max_connections < 1 or args.handshake_timeout <= 0:
        raise UsageError("--max-connections must be at least 1 and --handshake-timeout positive")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.registration_interval <= 0:
        raise UsageError("--registration-interval must be positive")
    if args.workers > 1 and args.port == 0:
        raise UsageError("--workers needs a fixed --port: every worker must listen on the same one")
    config = ServerConfig(
        rules=rule_paths(args.rules, args.site),
        cert_dir=str(cert_dir),
        host=args.host,
        port=args.port,
        mode=Mode(args.mode),
        reload_interval=args.reload_interval,
        shutdown_timeout=args.shutdown_timeout,
        drain_delay=args.drain_delay,
        rule_time_budget=args.rule_time_budget,
        max_connections=args.max_connections,
        handshake_timeout=args.handshake_timeout,
        idle_timeout=args.idle_timeout,
        client_ca=args.client_ca,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        reuse_port=args.workers > 1,
        record_reviews=args.record_reviews,
        record_reviews_max=args.record_reviews_max,
        max_exceptions_per_namespace=args.max_exceptions_per_namespace,
    )
    if args.workers == 1:
        return _serve(config, args)

    def worker(index: int) -> int:
        if config.metrics_port is not None:
            # Each worker keeps its own registry (no shared state between processes), so each
            # needs its own scrape port; on the HTTPS port /metrics answers from whichever worker.
            worker_config = dataclasses.replace(config, metrics_port=config.metrics_port + index)
        else:
            worker_config = config
        try:
            # one writer per pod: the other workers hold the same rules and only report
            return _serve(worker_config, args, writer=index == 0)
        except UsageError as error:
            print(f"gpu-webhook: worker {index}: {error}", file=sys.stderr)
            return EXIT_USAGE

    return run_workers(args.workers, worker)


def _serve(config: ServerConfig, args: argparse.Namespace, writer: bool = True) -> int:
    import dataclasses

    from webhook.server import Server

    # in the worker itself: the namespace watch and registration threads would not survive a fork
    api_client = _cluster(args)
    files, cluster = policy_sources(args, api_client is not None)
    if not files:
        config = dataclasses.replace(config, rules=[])
    context = _namespace_cache(api_client, config.max_exceptions_per_namespace)
    caches = _policy_caches(api_client, args, context) if cluster and api_client is not None else None
    try:
        server = Server(config, namespaces=context, policies=caches)
    except (ValueError, OSError) as error:
        raise UsageError(f"cannot start:\n{error}") from None
    exceptions = getattr(server.state.namespaces, "exceptions", None)
    if exceptions is not None:  # the cache counts what it does not apply; the metric shows it
        exceptions.on_not_applied = server.metrics.observe_exceptions_not_applied
    status = None
    if api_client is not None:
        registration = _registration(args, api_client, server, writer)
        server.state.registration = registration
        if caches is not None and writer:
            registered = registration.covers if registration.manage else None
            status = _status_writer(api_client, server, server.metrics, caches, registered)
            status.start()
    # the line the other commands print on stderr (common.load_ruleset), as a structured log line
    ruleset = server.state.rules.ruleset
    assert ruleset is not None  # Server() raises when the rules do not load
    _log().info(
        describe_rules(len(ruleset.rules), config.rules), extra={"rules": len(ruleset.rules), "sources": config.rules}
    )
    try:
        _runner(args.loop)(server.run())
    finally:
        for background in (status, caches):
            if background is not None:
                background.stop()
    return 0


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, None]], None]:
    import asyncio

    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise UsageError("--loop uvloop: uvloop is not installed (pip install 'gpu-webhook[fast]')") from None
        else:
            return uvloop.run
    return asyncio.run
