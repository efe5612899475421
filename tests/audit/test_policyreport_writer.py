"""The PolicyReport writer puts each result's YAML together from pieces: the same bytes as PyYAML
dumping the report objects whole (`yaml.dump_all(builder.reports())`), on objects of every kind
of result, messages plain and not, names long enough to fold, and input problems."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from tests.audit.conftest import EXTRA_RULES, NS_RULES, PACK_RULES, WORKLOADS
from tests.support import manifests
from webhook.audit.context import NamespaceContext
from webhook.audit.formats.policyreport import PolicyReportBuilder
from webhook.audit.results import audit
from webhook.audit.sources import InputProblem, read_manifests
from webhook.commands.common import load_ruleset, rule_paths

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
LONG = "a-" * 40 + "pod"  # `Pod <name> passes <rule>` past the dumper's width: folded


def test_the_written_reports_are_what_pyyaml_dumps(tmp_path: Path) -> None:
    ruleset = load_ruleset(rule_paths([PACK_RULES, EXTRA_RULES, NS_RULES]))
    manifests.mix(tmp_path / "mix", 20)
    odd = tmp_path / "odd.yaml"
    odd.write_text(
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {LONG}, namespace: team-1, uid: u-1}}\n"
        "spec: {containers: [{name: c, image: 'x:1', resources: {limits: {nvidia.com/gpu: 1}}}]}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: 'caf\\u00e9: #1', namespace: locked}\n"
        "spec: {containers: [{name: c, image: x, env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]}]}\n"
    )
    namespaces = {
        "locked": {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "locked", "labels": {"gpu-access": "none"}},
        }
    }
    builder = PolicyReportBuilder({rule.name: rule.action for rule in ruleset.rules})
    builder.problem(InputProblem("broken.yaml:3:1", "invalid YAML: did not find expected ',' or '}'"))
    items = read_manifests([WORKLOADS, str(tmp_path / "mix"), str(odd)])
    for result in audit(ruleset, items, NamespaceContext(namespaces)):
        builder.add(result)
    written = io.StringIO()
    builder.write(written)
    expected = yaml.dump_all(builder.reports(), Dumper=_Dumper, sort_keys=False)
    assert written.getvalue() == expected
    results = [r for report in yaml.safe_load_all(expected) for r in report["results"]]
    assert {r["result"] for r in results} >= {"pass", "fail", "skip", "error"}
    assert any(LONG in r["message"] for r in results)


def test_a_namespace_whose_objects_no_rule_acted_on_has_an_empty_results_list(run, tmp_path: Path) -> None:
    """`results: []`, never a bare `results:` (YAML null), which the PolicyReport schema refuses."""
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: quiet}\ndata: {a: b}\n")
    _, out, _ = run(str(quiet), "--rules", PACK_RULES, "-o", "policyreport", "--fail-on", "never")
    (report,) = list(yaml.safe_load_all(out))
    assert report["metadata"]["namespace"] == "quiet" and report["results"] == []
