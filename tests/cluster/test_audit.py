"""`gpu-webhook audit --cluster` in the living cluster, after the scenarios, agrees with what the webhook did.

Run last in the session (tests/cluster/conftest.py orders it), over every workload the scenarios
left stored: the GPU Deployment, StatefulSet and Job of each kind, the CPU workloads, the DCGM
exporter DaemonSet, the platform namespace's Deployment, the Job Kueue placed on the GPU flavor.
The audit runs as the audit CronJob component's Job would (manifests/components/audit-cronjob):
as a process, as its ServiceAccount `gpu-webhook-audit` under the rendered RBAC, with its
arguments (`audit --cluster -o policyreport --apply --fail-on never --rules ...`), and the
PolicyReports it writes (wgpolicyk8s.io/v1alpha2, CRDs of kubernetes-sigs/wg-policy-prototypes
policy-report/crd/v1alpha2, schema in tests/audit/fixtures) are what the same audit prints.

Agreement: no stored workload is one the audit says the apiserver would refuse, with one
difference it cannot avoid. The audit judges a stored object as its CREATE by an unknown user: it
cannot tell which fields Kueue wrote. The GPU-less Job Kueue admitted on the GPU flavor carries the
flavor's nodeSelector and toleration, which the webhook let Kueue write (cpu-pods-off-gpu-nodes,
kueueUsers) and the audit reports as that rule's failure: a site reading the report learns that a
queue of theirs places CPU work on GPU nodes, which is what it is for.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import WEBHOOK_NAMESPACE, GpuWebhook, gpu_webhook_cli
from tests.support import REPO, RULES
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster

SCHEMA = REPO / "tests/audit/fixtures/policyreport-v1alpha2-schema.yaml"
KUEUE_PLACED = ("team-gpu-only", "Job", "cpu-only", "cpu-pods-off-gpu-nodes")


def _report_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.wgpolicyk8s.io"},
        "spec": {
            "group": "wgpolicyk8s.io",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1alpha2",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": yaml.safe_load(SCHEMA.read_text())},
                }
            ],
        },
    }


def _audit_args(*extra: str) -> list[str]:
    return ["audit", "--cluster", "--output", "policyreport", "--fail-on", "never", "--rules", str(RULES), *extra]


def _results(reports: list[dict[str, Any]]) -> set[tuple[str, str, str, str, str]]:
    """(namespace, kind, name, rule, result) of every report entry, timestamps aside."""
    found = set()
    for report in reports:
        for entry in report.get("results") or []:
            for resource in entry["resources"]:
                found.add(
                    (
                        resource.get("namespace", ""),
                        resource["kind"],
                        resource["name"],
                        entry["policy"],
                        entry["result"],
                    )
                )
    return found


def test_audit_agrees_with_the_webhook_and_the_cronjobs_reports_match(
    cluster: Cluster, gpu_webhook: GpuWebhook
) -> None:
    for kind, plural, scope in (
        ("PolicyReport", "policyreports", "Namespaced"),
        ("ClusterPolicyReport", "clusterpolicyreports", "Cluster"),
    ):
        cluster.apply(_report_crd(kind, plural, scope))
        cluster.wait_established(f"{plural}.wgpolicyk8s.io")
    account = cluster.service_account_kubeconfig(WEBHOOK_NAMESPACE, "gpu-webhook-audit")

    printed = gpu_webhook_cli(*_audit_args(), kubeconfig=account, timeout=300)
    assert printed.returncode == 0, printed.stderr
    reports = [d for d in yaml.safe_load_all(printed.stdout) if d]
    results = _results(reports)
    audited = {(ns, kind, name) for ns, kind, name, _rule, _result in results}
    for expected in (
        ("team-kind-deployment", "Deployment", "serve"),
        ("platform-batch", "Deployment", "indexer"),
        ("team-gpu-only", "Job", "cpu-only"),
    ):
        assert expected in audited, sorted(audited)
    failures = {(ns, kind, name, rule) for ns, kind, name, rule, result in results if result in ("fail", "error")}
    assert failures == {KUEUE_PLACED}, json.dumps(sorted(failures), indent=1)

    applied = gpu_webhook_cli(*_audit_args("--apply"), kubeconfig=account, timeout=300)
    assert applied.returncode == 0, applied.stderr
    stored = cluster.items("/apis/wgpolicyk8s.io/v1alpha2/policyreports") + cluster.items(
        "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports"
    )
    assert _results(stored) == results
    for report in stored:
        assert report["metadata"]["name"] == "gpu-webhook-audit"
