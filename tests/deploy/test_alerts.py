"""The shipped alerts and dashboard (manifests/components/monitoring): promtool checks and unit-tests the
alerts, each alert is proven to fire and to stay quiet (breaking it either way fails its test), and every
gpu_webhook metric a panel or an alert names is on /metrics of a real server after some traffic.

promtool is Debian's `prometheus` package (`.ci/run` installs it); without it these tests skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.support import REPO, client_ssl, cpu_pod, gpu_pod, make_review, start_server

MONITORING = REPO / "manifests" / "components" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
METRIC = re.compile(r"\bgpu_webhook_[a-z0-9_]+")
# Named by issue 37 for iso-34's policy-object readiness; not on this branch's /metrics yet.
# At merge with iso-34 this set becomes empty (the test then requires them like every other).
def prometheus_rule() -> dict:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())


def alerts() -> list[dict]:
    return [rule for group in prometheus_rule()["spec"]["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def promtool(directory: Path, spec: dict, *argv: str, alert: str | None = None) -> subprocess.CompletedProcess[str]:
    """promtool on the PrometheusRule's spec, written as a plain rules file beside a copy of the unit tests
    (with `alert`, only the unit tests of that alert)."""
    (directory / "gpu-webhook.rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    tests = yaml.safe_load((MONITORING / "alerts.test.yaml").read_text())
    if alert is not None:
        tests["tests"] = [t for t in tests["tests"] if any(c["alertname"] == alert for c in t["alert_rule_test"])]
    (directory / "alerts.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *argv], cwd=directory, capture_output=True, text=True, timeout=120, check=False)


@needs_promtool
def test_promtool_check_rules(tmp_path: Path) -> None:
    done = promtool(tmp_path, prometheus_rule()["spec"], "check", "rules", "gpu-webhook.rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


@needs_promtool
def test_promtool_test_rules(tmp_path: Path) -> None:
    done = promtool(tmp_path, prometheus_rule()["spec"], "test", "rules", "alerts.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_unit_tests_and_the_doc_lists_it() -> None:
    names = [a["alert"] for a in alerts()]
    assert len(names) == 12 and len(set(names)) == 12
    tested = {
        case["alertname"]
        for test in yaml.safe_load((MONITORING / "alerts.test.yaml").read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == set(names)
    doc = (REPO / "docs" / "operations.md").read_text()
    assert [n for n in names if f"`{n}`" not in doc] == []


@needs_promtool
@pytest.mark.parametrize("alert", [a["alert"] for a in alerts()])
def test_each_alert_is_proven_to_fire_and_to_stay_quiet(tmp_path: Path, alert: str) -> None:
    """Replacing the alert's expression by one that never fires, then by one that always does, fails the unit tests."""
    for broken in ("vector(0) > 1", "vector(1)"):
        spec = prometheus_rule()["spec"]
        for rule in spec["groups"][0]["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = broken
        assert (
            promtool(tmp_path, prometheus_rule()["spec"], "test", "rules", "alerts.test.yaml", alert=alert).returncode
            == 0
        )
        done = promtool(tmp_path, spec, "test", "rules", "alerts.test.yaml", alert=alert)
        assert done.returncode != 0, f"{alert} with expr {broken!r} still passes its tests"


async def test_every_metric_of_the_alerts_and_the_dashboard_is_served(cert_dir: Path, rules_dir: Path) -> None:
    """A real server over TLS, after allowed, patched, denied and refused requests: its /metrics names them all.

    Metrics of other exporters (the apiserver's apiserver_*, kube-state-metrics' kube_*) are not ours to serve.
    """
    server = await start_server(cert_dir, rules_dir)
    try:
        base = f"https://localhost:{server.port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            privileged = gpu_pod("root")
            privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
            for endpoint, obj in (("validate", cpu_pod()), ("mutate", gpu_pod()), ("validate", privileged)):
                async with session.post(f"{base}/{endpoint}", json=make_review(obj, namespace="team-a")) as response:
                    assert response.status == 200
            async with session.post(f"{base}/validate", data=b"{not json") as response:
                assert response.status == 400
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                page = await response.text()
    finally:
        await server.stop()
    served = set()
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            served.add(name)
            if kind == "histogram":
                served |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif line and not line.startswith("#"):
            served.add(line.split("{")[0].split(" ")[0])
    named = {m for expr in [a["expr"] for a in alerts()] + dashboard_exprs() for m in METRIC.findall(expr)}
    assert named & {"gpu_webhook_build_info", "gpu_webhook_requests_total", "gpu_webhook_registration_drift"}
    missing = named - served
    assert not missing, sorted(missing)
    assert 'decision="denied"' in page and 'decision="patched"' in page  # the traffic counted as such
