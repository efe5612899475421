"""docs/operations.md stays true: the PrometheusRule it shows parses and uses only metrics we export."""

from __future__ import annotations

import re

import yaml

from tests.support import REPO
from webhook.server.metrics import Metrics

DOC = REPO / "docs" / "operations.md"


def prometheus_rule() -> dict:
    """The shipped PrometheusRule that §8 shows (manifests/components/monitoring), not a copy in the doc."""
    assert "manifests/components/monitoring/prometheusrule.yaml" in DOC.read_text()
    return yaml.safe_load((REPO / "manifests" / "components" / "monitoring" / "prometheusrule.yaml").read_text())


def exported() -> set[str]:
    metrics = Metrics()
    metrics.observe("mutate", "CREATE", "Pod", "allowed", 0.001)
    metrics.rejected.labels("400").inc()
    metrics.rule_errors.labels("r").inc()
    metrics.rule_results.labels("r", "deny").inc()
    metrics.registration_drift.labels("gpu-webhook-validating", "validate.gpu-webhook.io").set(0)
    metrics.policy_status_writes.labels("GPUPolicy").inc()
    metrics.policy_objects_rejected.labels("GPUPolicy").set(0)
    metrics.policy_source_ready.labels("GPUPolicy").set(1)
    return {
        line.split("{")[0].split(" ")[0] for line in metrics.render().decode().splitlines() if not line.startswith("#")
    }


def test_alerts_use_only_exported_metrics() -> None:
    names = exported()
    alerts = prometheus_rule()["spec"]["groups"][0]["rules"]
    assert {"GpuWebhookLatencyHigh", "GpuWebhookErrors", "GpuWebhookCertificateExpiresSoon"} <= {
        a["alert"] for a in alerts
    }
    used = {m for a in alerts for m in re.findall(r"\bgpu_webhook_[a-z_]+", a["expr"])}
    assert used, "no gpu_webhook metric in the alerts"
    assert used <= names, used - names


def test_expiry_alert_is_fourteen_days() -> None:
    alerts = {a["alert"]: a for a in prometheus_rule()["spec"]["groups"][0]["rules"]}
    assert "14 * 86400" in alerts["GpuWebhookCertificateExpiresSoon"]["expr"]
