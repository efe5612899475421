"""wgpolicyk8s.io/v1alpha2 PolicyReports: one per namespace, one ClusterPolicyReport for the rest.

The format Policy Reporter and other tools read. Each of our rules is reported as both
`policy` and `rule` (a GPUPolicy holds one rule). Results: Deny failures `fail`, Warn and
Audit findings `warn`, evaluation errors `error`, rules not evaluated for want of namespace
context `skip`, everything else that matched `pass`.
Severity follows the rule's action: Deny high, Warn medium, Audit low.
An input that could not be read is an `error` result of the policy `gpu-webhook-input` in the
ClusterPolicyReport, its origin (file, file:line:column) in `properties.origin`.
`SOURCE_DATE_EPOCH`, when set, is the results' timestamp (reproducible reports).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

import yaml

from webhook.engine import Action, Result

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "gpu-webhook-audit"
SOURCE = "gpu-webhook"
_RESULT = {
    Result.FAIL: "fail",
    Result.ERROR: "error",
    Result.WARN: "warn",
    Result.AUDIT: "warn",
    Result.EXCEPTED: "skip",  # as Kyverno reports a rule a PolicyException lets through; the message says which
    Result.PASS: "pass",
    Result.SKIP: "skip",  # not evaluated: no namespace context
}
_SEVERITY = {Action.DENY: "high", Action.WARN: "medium", Action.AUDIT: "low"}
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
INPUT_POLICY = "gpu-webhook-input"  # the results of inputs that could not be read


def _now() -> int:
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(epoch) if epoch.isdigit() else int(time.time())


class PolicyReportBuilder:
    """Collects results by namespace; `reports()` yields the finished PolicyReport objects."""

    def __init__(self, actions: Mapping[str, Action]) -> None:
        self.actions = actions
        self.results: dict[str, list[dict[str, Any]]] = {}  # namespace ("" = cluster scope) -> results
        self.timestamp = {"seconds": _now(), "nanos": 0}

    def problem(self, problem: InputProblem) -> None:
        self.results.setdefault("", []).append(
            {
                "policy": INPUT_POLICY,
                "rule": "readable",
                "result": "error",
                "message": f"{problem.reason}: not audited",
                "scored": True,
                "source": SOURCE,
                "timestamp": dict(self.timestamp),
                "severity": "high",
                "properties": {"origin": problem.origin},
            }
        )

    def add(self, result: ObjectResult) -> None:
        ref = result.ref
        resource = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        if ref.namespace:
            resource["namespace"] = ref.namespace
        if ref.uid:
            resource["uid"] = ref.uid
        bucket = self.results.setdefault(ref.namespace, [])
        for outcome in result.outcomes:
            entry: dict[str, Any] = {
                "policy": outcome.rule,
                "rule": outcome.rule,
                "result": _RESULT[outcome.result],
                "message": text(outcome) or f"{ref.kind} {ref.name} passes {outcome.rule}",
                "resources": [dict(resource)],  # copies: no YAML anchors in the output
                "scored": True,
                "source": SOURCE,
                "timestamp": dict(self.timestamp),
            }
            severity = _SEVERITY.get(self.actions.get(outcome.rule))  # type: ignore[arg-type]
            if severity:
                entry["severity"] = severity
            properties = {"gpus": str(result.gpus)}
            if outcome.patched:
                properties["mutated"] = "true"  # the webhook would fix this one at admission
            if outcome.result == Result.AUDIT:
                properties["action"] = "Audit"
            entry["properties"] = properties
            bucket.append(entry)

    def reports(self) -> Iterator[dict[str, Any]]:
        for namespace in sorted(self.results):
            results = self.results[namespace]
            counts = Counter(r["result"] for r in results)
            report: dict[str, Any] = {
                "apiVersion": API_VERSION,
                "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
                "metadata": {
                    "name": REPORT_NAME,
                    "labels": {"app.kubernetes.io/managed-by": SOURCE},
                },
                "summary": {k: counts[k] for k in ("pass", "fail", "warn", "error", "skip")},
                "results": results,
            }
            if namespace:
                report["metadata"]["namespace"] = namespace
            yield report


class PolicyReportReport:
    """--output policyreport: the reports as a YAML stream, ready for `kubectl apply -f -`."""

    def __init__(self, out: TextIO, actions: Mapping[str, Action]) -> None:
        self.out = out
        self.builder = PolicyReportBuilder(actions)

    def add(self, result: ObjectResult) -> None:
        self.builder.add(result)

    def problem(self, problem: InputProblem) -> None:
        self.builder.problem(problem)

    def finish(self, tally: Tally) -> None:
        yaml.dump_all(self.builder.reports(), self.out, Dumper=_Dumper, sort_keys=False)
