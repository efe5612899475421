"""Every --output format, the exit codes, and the audit agreeing with the engine."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import yaml

from tests.audit.conftest import EXTRA_RULES, FIXTURES, PACK_RULES, RULES, WORKLOADS, documents
from webhook.audit.results import audit
from webhook.audit.sources import read_manifests
from webhook.commands.common import load_ruleset
from webhook.engine import AdmissionInput, evaluate

ALL_RULES = ("--rules", RULES, "--rules", EXTRA_RULES)


def test_table_details_and_summaries(run):
    code, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "table")
    assert code == 1
    assert "Pod team-a/trainer  (" in out
    assert "DENY   gpu-requests-equal-limits: pod trainer: container main requests nvidia.com/gpu 1" in out
    assert "PATCH  gpu-node-affinity, gpu-toleration: 2 operation(s)" in out
    assert "+  tolerations:" in out  # the patch as a diff of the object's YAML
    assert "WARN   queue-label-warn: GPU Jobs should name a Kueue queue" in out
    assert "AUDIT  team-label-audit: pods should carry a team label" in out
    assert "3 objects: 2 denied, 0 with errors, 1 warned, 0 audited" in out
    # RULE DENY ERROR WARN AUDIT PASS SKIPPED PATCHED GPUS-AFFECTED
    rule_row = next(line for line in out.splitlines() if line.startswith("gpu-requests-equal-limits"))
    assert rule_row.split() == ["gpu-requests-equal-limits", "1", "0", "0", "0", "1", "0", "0", "1"]
    # NAMESPACE DENIED ERRORS WARNED AUDITED PASSED SKIPPED GPUS-AFFECTED
    namespace_row = next(line for line in out.splitlines() if line.startswith("team-a "))
    assert namespace_row.split() == ["team-a", "1", "0", "1", "0", "0", "0", "5"]


def test_summary_only(run):
    _, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "table", "--summary")
    assert "PATCH  " not in out and out.startswith("3 objects:")


def test_json(run):
    _, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "json")
    report = json.loads(out)
    trainer = report["objects"][0]
    assert trainer["result"] == "fail" and trainer["gpus"] == 1
    assert {
        "op": "add",
        "path": "/spec/tolerations",
        "value": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    } in trainer["patch"]
    assert trainer["diff"].startswith("--- submitted\n+++ after mutation\n")
    assert report["summary"]["byResult"] == {
        "fail": 2,
        "error": 0,
        "warn": 1,
        "audit": 0,
        "excepted": 0,
        "pass": 0,
        "skip": 0,
    }
    assert report["summary"]["rules"]["queue-label-warn"]["warn"] == 1


def test_no_diff_keeps_the_patch_and_drops_only_the_diff(run):
    _, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "json")
    _, lean, _ = run(WORKLOADS, *ALL_RULES, "-o", "json", "--no-diff")
    full, short = json.loads(out), json.loads(lean)
    assert "diff" in full["objects"][0] and "diff" not in short["objects"][0]
    for entry in full["objects"]:
        entry.pop("diff", None)
    assert short == full
    _, table, _ = run(WORKLOADS, *ALL_RULES, "-o", "table", "--no-diff")
    assert "PATCH  " in table and "+  tolerations:" not in table


def test_json_with_no_objects_is_still_json(run, tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n")
    code, out, _ = run(str(empty), "--rules", RULES, "-o", "json")
    assert code == 0 and json.loads(out)["objects"] == []


def test_yaml_matches_json(run):
    _, as_json, _ = run(WORKLOADS, *ALL_RULES, "-o", "json")
    _, as_yaml, _ = run(WORKLOADS, *ALL_RULES, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_policyreport_validates_against_the_crd_schema(run):
    schema = yaml.safe_load((FIXTURES / "policyreport-v1alpha2-schema.yaml").read_text())
    _, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "policyreport")
    reports = documents(out)
    assert [(r["kind"], r["metadata"].get("namespace")) for r in reports] == [
        ("PolicyReport", "team-a"),
        ("PolicyReport", "team-b"),
    ]
    for report in reports:
        jsonschema.validate(report, schema)
        _assert_no_pruned_fields(report, schema)
    team_a = reports[0]
    assert team_a["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert team_a["summary"] == {"pass": 7, "fail": 1, "warn": 3, "error": 0, "skip": 0}
    failed = next(r for r in team_a["results"] if r["result"] == "fail")
    assert failed["policy"] == failed["rule"] == "gpu-requests-equal-limits"
    assert failed["severity"] == "high" and failed["source"] == "gpu-webhook"
    assert "&id" not in out  # no YAML anchors: plain documents for any reader
    assert failed["resources"] == [{"apiVersion": "v1", "kind": "Pod", "name": "trainer", "namespace": "team-a"}]
    warned = {r["rule"]: r["severity"] for r in team_a["results"] if r["result"] == "warn"}
    assert warned == {"queue-label-warn": "medium", "team-label-audit": "low"}


def test_a_manifest_without_namespace_is_reported_where_kubectl_would_create_it(run, tmp_path):
    pod = tmp_path / "pod.yaml"  # helm template output: no namespace; kubectl apply puts it in -n or default
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i}]}\n")
    _, out, _ = run(str(pod), "--rules", RULES, "-o", "policyreport")
    (report,) = documents(out)
    assert report["kind"] == "PolicyReport" and report["metadata"]["namespace"] == "default"
    _, out, _ = run(str(pod), "--rules", RULES, "-o", "policyreport", "-n", "team-c")
    (report,) = documents(out)
    assert report["metadata"]["namespace"] == "team-c"
    assert report["results"][0]["resources"][0]["namespace"] == "team-c"


def test_cluster_scoped_objects_go_to_a_cluster_policy_report(run, tmp_path):
    node = tmp_path / "node.yaml"
    node.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\n")
    _, out, _ = run(str(node), "--rules", RULES, "-o", "policyreport")
    (report,) = documents(out)
    assert report["kind"] == "ClusterPolicyReport" and "namespace" not in report["metadata"]


def _assert_no_pruned_fields(value, schema, where="$"):
    """A structural CRD schema silently drops unknown fields: everything we write must be declared."""
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{where}.{key} is not in the CRD schema"
            _assert_no_pruned_fields(item, schema["properties"][key], f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _assert_no_pruned_fields(item, schema["items"], f"{where}[{index}]")


def test_junit(run):
    _code, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "junit")
    root = ET.fromstring(out)
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == int(root.get("tests")) == 14  # one per object and rule that matched it
    failures = [c for c in cases if c.find("failure") is not None]
    assert {c.get("classname") for c in failures} == {"gpu-requests-equal-limits", "no-visible-devices-without-gpu"}
    assert root.get("failures") == "2"
    warn_case = root.find("./testsuite[@name='queue-label-warn']/testcase")
    assert "Warn: GPU Jobs should name" in warn_case.find("system-out").text


def test_fail_on_warn(run, tmp_path):
    ok_job = tmp_path / "job.yaml"  # passes every Deny rule, fails the Warn rule
    ok_job.write_text(Path(WORKLOADS).read_text().split("---\n")[2])
    assert run(str(ok_job), *ALL_RULES, "-o", "json")[0] == 0
    assert run(str(ok_job), *ALL_RULES, "-o", "json", "--fail-on", "warn")[0] == 1
    _, out, _ = run(str(ok_job), *ALL_RULES, "-o", "junit", "--fail-on", "warn")
    assert ET.fromstring(out).get("failures") == "1"


def test_html_is_self_contained(run):
    _, out, _ = run(WORKLOADS, *ALL_RULES, "-o", "html")
    assert out.startswith("<!DOCTYPE html>")
    assert "<svg" in out and "sortable" in out
    assert "http://" not in out.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in out
    assert "gpu-requests-equal-limits" in out and "&lt;" not in out.split("<body>")[0]


def test_audit_gives_the_engines_decision():
    # one engine, many doors: what audit reports is exactly what evaluate() decides, for the
    # whole default pack (not only the pinned rule set the format tests use)
    ruleset = load_ruleset([PACK_RULES, EXTRA_RULES])
    for item, result in zip(read_manifests([WORKLOADS]), audit(ruleset, read_manifests([WORKLOADS])), strict=True):
        namespace = item.object["metadata"].get("namespace")
        decision = evaluate(ruleset, AdmissionInput(object=item.object, namespace=namespace), trace=False)
        denied = sorted((o.rule, m) for o in result.outcomes if o.result == "fail" for m in o.messages)
        assert denied == sorted((v.rule, v.message) for v in decision.violations)
        assert result.patch == decision.patch


def test_the_html_summary_counts_the_warnings_it_lists(run, tmp_path):
    """An object that is denied and warned is counted once as denied; its warning is still a finding."""
    import re

    both = tmp_path / "both.yaml"
    job = yaml.safe_load(Path(WORKLOADS).read_text().split("---\n")[2])  # warned: no Kueue queue
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": 1}  # and denied
    both.write_text(yaml.safe_dump(job))
    _, out, _ = run(str(both), *ALL_RULES, "-o", "html")
    cards = dict(
        (label, value) for value, label in re.findall(r'<div class="card[^"]*"><b>([^<]*)</b>([^<]*)</div>', out)
    )
    assert cards["Denied"] == "1" and cards["Warned (no worse result)"] == "0"
    assert cards["Warning findings"] == "1" and "queue-label-warn" in out.split("<h2>Findings</h2>")[1]
