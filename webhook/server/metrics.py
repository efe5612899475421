"""Prometheus metrics of one server process, in a registry of its own (no global state).

Every label value is bounded: a tenant controls `request.kind.kind` and `operation`, so
those are mapped onto known sets (else "other"), rule labels are rule names of loaded rule
sets, and every labelled metric is capped at a number of series past which new label sets
are folded into "other". Rendering runs on a thread, so a scrape never stalls admission.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webhook.engine import KIND_TABLE

# No `*_created` series: a counter's or histogram's creation time, one more series per label set,
# which a Prometheus scraping the text format stores as ordinary samples and no alert of ours reads.
# The metric names are unchanged. The client's switch is process-wide and read at each scrape; this
# module is the process's only user of prometheus_client.
disable_created_metrics()

# Admission answers take tens of microseconds; the apiserver gives up after seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5)
OTHER = "other"
# the kinds of the engine's kind table (a label per kind a shipped rule can target)
KNOWN_KINDS = KIND_TABLE.names
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# Series per labelled metric. The per-request label sets are endpoints (2) x operations (5) x
# kinds (20) x decisions (4) at most, ~800; real traffic uses a few dozen. Past the cap, new
# label sets count under kind and operation "other". Rule labels are rule names of loaded
# rule sets (reloads add names). Measured worst case: a ~100 KB page.
MAX_REQUEST_SERIES = 200
MAX_RULE_SERIES = 300


def kind_label(kind: str) -> str:
    return kind if kind in KNOWN_KINDS else OTHER


def operation_label(operation: str) -> str:
    return operation if operation in OPERATIONS else OTHER


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gpu_webhook_requests",
            "Admission requests answered, by endpoint, operation, kind and decision.",
            ["endpoint", "operation", "kind", "decision"],
            registry=r,
        )
        # by endpoint and decision only: a histogram series is 16 lines, and rendering the page is
        # what a scrape costs (kind and operation are on gpu_webhook_requests_total)
        self.latency = Histogram(
            "gpu_webhook_request_duration_seconds",
            "Time to answer one admission request (parse, evaluate, serialise), by endpoint and decision.",
            ["endpoint", "decision"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rejected = Counter(
            "gpu_webhook_bad_requests", "Requests refused before evaluation, by HTTP status.", ["code"], registry=r
        )
        self.rule_results = Counter(
            "gpu_webhook_rule_results",
            "Rule outcomes: deny, warn, audit, and would_deny (a Deny rule failing while the server runs in audit mode).",
            ["rule", "action"],
            registry=r,
        )
        self.rule_errors = Counter(
            "gpu_webhook_rule_evaluation_errors", "Rule evaluation errors, by rule.", ["rule"], registry=r
        )
        self.connections_refused = Counter(
            "gpu_webhook_connections_refused",
            "Connections refused or closed early because the connection limit was reached, by reason.",
            ["reason"],
            registry=r,
        )
        self.connections = Gauge(
            "gpu_webhook_connections", "Open connections on the admission port, handshakes included.", registry=r
        )
        self.offloaded = Counter(
            "gpu_webhook_offloaded_requests",
            "Admission requests evaluated in the evaluation process (large bodies) instead of the event loop.",
            registry=r,
        )
        self.rules_generation = Gauge(
            "gpu_webhook_rules_generation", "Generation of the rule set in use (+1 per successful load).", registry=r
        )
        self.rules_loaded = Gauge("gpu_webhook_rules_loaded", "Rules in the rule set in use.", registry=r)
        self.reload_failures = Counter(
            "gpu_webhook_rules_reload_failures",
            "Rule reloads that failed (the last good rule set kept serving).",
            registry=r,
        )
        self.reload_ok = Gauge(
            "gpu_webhook_rules_last_reload_success", "1 if the last rule (re)load succeeded, else 0.", registry=r
        )
        self.cert_expiry = Gauge(
            "gpu_webhook_certificate_expiry_timestamp_seconds",
            "Unix time at which the serving certificate expires.",
            registry=r,
        )
        self.namespaces_synced = Gauge(
            "gpu_webhook_namespace_cache_synced",
            "1 once the namespace watch cache has listed the cluster's namespaces.",
            registry=r,
        )
        # a watch that went quiet (no event, bookmark or restart within its bound)
        self.watch_stale = Gauge(
            "gpu_webhook_watch_cache_stale",
            "1 when a watch cache (namespace, priorityclass, resourceclaim, ...) has shown no sign of life "
            "within its bound: its context may be out of date.",
            ["cache"],
            registry=r,
        )
        # webhook/server/registration_sync.py: labels are the two configurations' names and their three entries
        self.registration_drift = Gauge(
            "gpu_webhook_registration_drift",
            "1 when the live webhook entry does not send what the loaded rules need (a resource or operation "
            "no live rule sends, a matchCondition the rules do not derive, or the entry or its configuration "
            "missing), by configuration and webhook.",
            ["configuration", "webhook"],
            registry=r,
        )
        self.registration_writes = Counter(
            "gpu_webhook_registration_writes",
            "Writes of a webhook configuration's rules and matchConditions by this process, by configuration "
            "and reason (union: what the live replicas' rules need, written by the elected writer).",
            ["configuration", "reason"],
            registry=r,
        )
        self.registration_leader = Gauge(
            "gpu_webhook_registration_leader",
            "1 while this process holds the gpu-webhook-registration Lease: the one writer of the webhook "
            "configurations (webhook/server/registration_leases.py).",
            registry=r,
        )
        self.registration_unknown_replicas = Gauge(
            "gpu_webhook_registration_unknown_replicas",
            "Replicas the writer sees alive that publish no needs record (an older release): while any is, "
            "the registration keeps everything it sends.",
            registry=r,
        )
        self.registration_failures = Counter(
            "gpu_webhook_registration_check_failures",
            "Reads or writes of a webhook configuration that failed (network, RBAC, conflicts past the retries).",
            ["configuration"],
            registry=r,
        )
        # GPUPolicyExceptions (webhook/kube/caches.py): labels are exception keys and rule names, capped
        # with the rule series (whoever may create exceptions chooses their names)
        self.exceptions_used = Counter(
            "gpu_webhook_exceptions_used",
            "Rules a GPUPolicyException let an object through, by exception (namespace/name) and rule.",
            ["exception", "rule"],
            registry=r,
        )
        self.exceptions_not_applied = Gauge(
            "gpu_webhook_exceptions_not_applied",
            "GPUPolicyExceptions in the cluster that this process does not apply, by reason: invalid (does "
            "not parse) or over_limit (past serve --max-exceptions-per-namespace in its namespace).",
            ["reason"],
            registry=r,
        )
        self.policy_status_writes = Counter(
            "gpu_webhook_policy_status_writes",
            "Status writes of policy objects by this process (webhook/policies/status.py), by kind.",
            ["kind"],
            registry=r,
        )
        # webhook/policies/isolation.py and webhook/kube/policies.py: labels are the policy kinds
        self.policy_objects_rejected = Gauge(
            "gpu_webhook_policy_objects_rejected",
            "Policy objects the last load left out because they do not load (each Ready=False with the "
            "reason in its status), by kind; every other rule and object serves.",
            ["kind"],
            registry=r,
        )
        self.policy_source_ready = Gauge(
            "gpu_webhook_policy_source_ready",
            "1 while the replica can list and watch a policy kind it uses, else 0 (forbidden, not served, no "
            "answer: never listed keeps the replica unready; listed before, its last objects stay in use), by kind.",
            ["kind"],
            registry=r,
        )
        self.cert_reloads = Counter("gpu_webhook_certificate_reloads", "Serving certificate reloads.", registry=r)
        self.cert_reload_failures = Counter(
            "gpu_webhook_certificate_reload_failures",
            "Serving certificate reloads that failed (the previous certificate kept serving).",
            registry=r,
        )
        # labels() costs ~1 µs per call (validation, lock); the children are looked up once per label set.
        self._per_request: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
        self._per_rule: dict[tuple[str, ...], Any] = {}
        self._rendering: asyncio.Future[bytes] | None = None

    def observe(self, endpoint: str, operation: str, kind: str, decision: str, seconds: float) -> None:
        key = (endpoint, operation_label(operation), kind_label(kind), decision)
        children = self._per_request.get(key)
        if children is None:
            if len(self._per_request) >= MAX_REQUEST_SERIES:
                key = (endpoint, OTHER, OTHER, decision)
                children = self._per_request.get(key)
            if children is None:
                children = self._per_request[key] = (
                    self.requests.labels(*key),
                    self.latency.labels(endpoint, decision),
                )
        children[0].inc()
        children[1].observe(seconds)

    def observe_rules(self, results: list[tuple[str, str]], errors: list[str]) -> None:
        """results: (rule, action) per violation, warning and audit; errors: the rule of each evaluation error."""
        for rule, action in results:
            self._rule_child(self.rule_results, rule, action).inc()
        for rule in errors:
            self._rule_child(self.rule_errors, rule).inc()

    def observe_exceptions(self, used: list[tuple[str, str]]) -> None:
        """(exception, rule): each rule an exception let through in one decision."""
        for exception, rule in used:
            key = (self.exceptions_used._name, exception, rule)
            child = self._per_rule.get(key)
            if child is None:
                if len(self._per_rule) >= MAX_RULE_SERIES:
                    child = self.exceptions_used.labels(OTHER, OTHER)
                else:
                    child = self._per_rule[key] = self.exceptions_used.labels(exception, rule)
            child.inc()

    def observe_exceptions_not_applied(self, counts: dict[str, int]) -> None:
        """reason (invalid, over_limit) -> GPUPolicyExceptions not applied now (webhook/kube/caches.py)."""
        for reason, count in counts.items():
            self.exceptions_not_applied.labels(reason).set(count)

    def _rule_child(self, metric: Any, rule: str, *rest: str) -> Any:
        key = (metric._name, rule, *rest)
        child = self._per_rule.get(key)
        if child is None:
            if len(self._per_rule) >= MAX_RULE_SERIES:
                return metric.labels(OTHER, *rest)
            child = self._per_rule[key] = metric.labels(rule, *rest)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def render_async(self) -> bytes:
        """The page, rendered on a thread so a scrape never holds the event loop; scrapes that
        arrive while a render runs share it (a scrape flood costs one render at a time)."""
        if self._rendering is None:
            self._rendering = asyncio.ensure_future(asyncio.to_thread(self.render))
            self._rendering.add_done_callback(self._rendered_done)
        return await asyncio.shield(self._rendering)

    def _rendered_done(self, _future: asyncio.Future[bytes]) -> None:
        self._rendering = None
