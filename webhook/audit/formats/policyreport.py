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
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from webhook.engine import Action, Result
from webhook.kubeyaml.styles import POLICY_REPORT

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem
from . import ReportOptions

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
    Result.EXCEPTED: "skip",  # a GPUPolicyException let the object through (the message says which)
}
_SEVERITY = {Action.DENY: "high", Action.WARN: "medium", Action.AUDIT: "low"}
INPUT_POLICY = "gpu-webhook-input"  # the results of inputs that could not be read


def _now() -> int:
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(epoch) if epoch.isdigit() else int(time.time())


class PolicyReportBuilder:
    """Collects results by namespace, compactly; `reports()` yields the finished PolicyReport objects
    and `write()` writes them as a YAML stream, the same bytes `POLICY_REPORT.dump_all(reports())` writes.

    A report holds one result per rule and object, so a 100k-object audit holds millions of them:
    each object is kept as its resource and one shared row per distinct (rule, result, message,
    severity, mutated, action), and written without building them as dicts (their YAML text is
    put together from pieces the dumper wrote once: a block mapping's lines do not depend on
    their neighbours).
    """

    def __init__(self, actions: Mapping[str, Action]) -> None:
        self.actions = actions
        # namespace ("" = cluster scope) -> its objects (resource, gpus, rows) and problems, in order
        self.results: dict[str, list[_Object | dict[str, Any]]] = {}
        self.timestamp = {"seconds": _now(), "nanos": 0}
        self.rows: dict[_Row, _Row] = {}  # one instance per distinct row (most are a rule's `pass`)
        self._text: dict[Any, str] = {}  # YAML pieces, written once each

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
        rows = self.rows
        kept: list[_Row] = []
        for outcome in result.outcomes:
            row = (
                outcome.rule,
                _RESULT[outcome.result],
                text(outcome),
                _SEVERITY.get(self.actions.get(outcome.rule)),  # type: ignore[arg-type]
                outcome.patched,
                outcome.result is Result.AUDIT,
            )
            kept.append(rows.setdefault(row, row))
        resource = (ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid)
        self.results.setdefault(ref.namespace, []).append((resource, result.gpus, tuple(kept)))

    def _entry(self, resource: _Resource, gpus: int, row: _Row) -> dict[str, Any]:
        api_version, kind, name, namespace, uid = resource
        rule, outcome, message, severity, patched, audited = row
        described = {"apiVersion": api_version, "kind": kind, "name": name}
        if namespace:
            described["namespace"] = namespace
        if uid:
            described["uid"] = uid
        entry: dict[str, Any] = {
            "policy": rule,
            "rule": rule,
            "result": outcome,
            "message": message or f"{kind} {name} passes {rule}",
            "resources": [described],
            "scored": True,
            "source": SOURCE,
            "timestamp": dict(self.timestamp),
        }
        if severity:
            entry["severity"] = severity
        properties = {"gpus": str(gpus)}
        if patched:
            properties["mutated"] = "true"  # the webhook would fix this one at admission
        if audited:
            properties["action"] = "Audit"
        entry["properties"] = properties
        return entry

    def _results(self, namespace: str) -> Iterator[dict[str, Any]]:
        for record in self.results[namespace]:
            if isinstance(record, dict):
                yield record
            else:
                resource, gpus, rows = record
                for row in rows:
                    yield self._entry(resource, gpus, row)

    def _summary(self, namespace: str) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for record in self.results[namespace]:
            if isinstance(record, dict):
                counts[record["result"]] += 1
            else:
                counts.update(row[1] for row in record[2])
        return {k: counts[k] for k in ("pass", "fail", "warn", "error", "skip")}

    def _head(self, namespace: str) -> dict[str, Any]:
        report: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
            "metadata": {
                "name": REPORT_NAME,
                "labels": {"app.kubernetes.io/managed-by": SOURCE},
            },
            "summary": self._summary(namespace),
        }
        if namespace:
            report["metadata"]["namespace"] = namespace
        return report

    def reports(self) -> Iterator[dict[str, Any]]:
        for namespace in sorted(self.results):
            report = self._head(namespace)
            report["results"] = list(self._results(namespace))
            yield report

    def write(self, out: TextIO) -> None:
        """The reports as `POLICY_REPORT.dump_all(self.reports())` writes them."""
        for index, namespace in enumerate(sorted(self.results)):
            report = self._head(namespace)
            out.write(("---\n" if index else "") + POLICY_REPORT.dump(report))
            records = self.results[namespace]
            # objects no rule acted on have no rows: a namespace of only those has no results (`[]`; a
            # bare `results:` would be null, which the PolicyReport schema refuses)
            if not any(isinstance(record, dict) or record[2] for record in records):
                out.write("results: []\n")
                continue
            out.write("results:\n")
            for record in records:
                if isinstance(record, dict):
                    out.write(_item(record, first=True))
                    continue
                resource, gpus, rows = record
                described = _item({"resources": self._entry(resource, gpus, rows[0])["resources"]}) if rows else ""
                out.write("".join(self._row_text(resource, gpus, row, described) for row in rows))

    def _row_text(self, resource: _Resource, gpus: int, row: _Row, described: str) -> str:
        """One result's YAML: its rule, result and message; the object's resources; the rest."""
        piece = self._piece
        rule, outcome, message, severity, patched, audited = row
        message = message or f"{resource[1]} {resource[2]} passes {rule}"
        return (
            piece(("head", rule, outcome), lambda: _item({"policy": rule, "rule": rule, "result": outcome}, first=True))
            + (f"  message: {message}\n" if _PLAIN.fullmatch(message) and len(message) <= _PLAIN_WIDTH else
               piece(("message", message), lambda: _item({"message": message})))
            + described
            + piece(
                ("tail", severity, gpus, patched, audited),
                lambda: _item({k: v for k, v in self._entry(resource, gpus, row).items() if k in _TAIL}),
            )
        )  # fmt: skip

    def _piece(self, key: Any, make: Any) -> str:
        found = self._text.get(key)
        if found is None:
            if len(self._text) >= _PIECES:
                self._text.clear()
            found = self._text[key] = make()
        return found


_Resource = tuple[str, str, str, str, str]  # apiVersion, kind, name, namespace, uid
_Row = tuple[str, str, str, str | None, bool, bool]  # rule, result, message, severity, mutated, action Audit
_Object = tuple[_Resource, int, tuple[_Row, ...]]
_TAIL = ("scored", "source", "timestamp", "severity", "properties")
_PIECES = 1 << 14  # YAML pieces kept (distinct rules, messages, properties); cleared when full
# a message PyYAML writes as it is: plain words (at least two, so never a bool or null), no
# indicator, short enough that the line `  message: ...` is not folded at the dumper's width (80)
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9._/-]*(?: [A-Za-z0-9._/-]+)+")
_PLAIN_WIDTH = 80 - len("  message: ")


def _item(mapping: dict[str, Any], first: bool = False) -> str:
    """The lines of `mapping` as an item of a top-level YAML sequence: `- k: v` (first) or `  k: v`."""
    text = POLICY_REPORT.dump([mapping])
    return text if first else "  " + text[2:]


class PolicyReportReport:
    """--output policyreport: the reports as a YAML stream, ready for `kubectl apply -f -`."""

    shows_diffs = takes_entries = False

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.builder = PolicyReportBuilder(options.actions)

    def reports(self) -> Iterator[dict[str, Any]]:
        """The PolicyReport documents written (audit --apply writes them to the cluster too)."""
        return self.builder.reports()

    def add(self, result: ObjectResult) -> None:
        self.builder.add(result)

    def problem(self, problem: InputProblem) -> None:
        self.builder.problem(problem)

    def finish(self, tally: Tally) -> None:
        self.builder.write(self.out)
