"""Prometheus metrics of one server process, in a registry of its own (no global state)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webhook.engine import Decision

# Admission answers take tens of microseconds; the apiserver gives up after seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5)


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
        self.latency = Histogram(
            "gpu_webhook_request_duration_seconds",
            "Time to answer one admission request (parse, evaluate, serialise).",
            ["endpoint", "operation", "kind", "decision"],
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
        # i11-engine: a watch that went quiet (no event, bookmark or restart within its bound)
        self.watch_stale = Gauge(
            "gpu_webhook_watch_cache_stale",
            "1 when a watch cache (namespace, priorityclass, resourceclaim, ...) has shown no sign of life "
            "within its bound: its context may be out of date.",
            ["cache"],
            registry=r,
        )
        self.cert_reloads = Counter("gpu_webhook_certificate_reloads", "Serving certificate reloads.", registry=r)
        self.cert_reload_failures = Counter(
            "gpu_webhook_certificate_reload_failures",
            "Serving certificate reloads that failed (the previous certificate kept serving).",
            registry=r,
        )
        # labels() costs ~1 µs per call (validation, lock); the children are looked up once per label set
        # (as bounded as the metric itself: endpoints x operations x kinds x decisions).
        self._per_request: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}

    def observe(self, endpoint: str, operation: str, kind: str, decision: str, seconds: float) -> None:
        key = (endpoint, operation, kind, decision)
        children = self._per_request.get(key)
        if children is None:
            children = self._per_request[key] = (self.requests.labels(*key), self.latency.labels(*key))
        children[0].inc()
        children[1].observe(seconds)

    def observe_rules(self, decision: Decision) -> None:
        for bucket, action in ((decision.violations, "deny"), (decision.warnings, "warn"), (decision.audits, "audit")):
            for violation in bucket:
                self.rule_results.labels(violation.rule, "would_deny" if violation.relaxed else action).inc()
        for error in decision.errors:
            self.rule_errors.labels(error.rule).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
