"""Namespace context offline, errors as errors, and inputs that are not manifests: through `gpu-webhook audit`."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import escape

import yaml

from tests.audit.conftest import NS_RULES, ROOT, RULES, documents
from webhook.engine import NO_NAMESPACE_CONTEXT

GPU_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
    - {name: main, image: cuda:12, resources: {limits: {nvidia.com/gpu: 1}}}
"""
NO_GPU_NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {gpu-access: none}}\n"
BROKEN = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: broken}
spec:
  action: Deny
  failurePolicy: %s
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "object.spec.nothere == 1", message: never shown}
"""


def test_namespace_objects_in_the_input_are_context_not_objects(run, tmp_path):
    # directories are read sorted: the Namespace (z-) comes after the Pod (a-) and still counts
    (tmp_path / "a-pod.yaml").write_text(GPU_POD)
    (tmp_path / "z-ns.yaml").write_text(NO_GPU_NAMESPACE % "default")
    code, out, _ = run(str(tmp_path), "--rules", NS_RULES, "-o", "json")
    report = json.loads(out)
    assert [o["kind"] for o in report["objects"]] == ["Pod"]  # the Namespace is context, not audited
    assert report["objects"][0]["namespace"] == "default"
    assert report["objects"][0]["rules"][0]["result"] == "fail" and code == 1


def test_namespace_option_places_namespace_less_manifests(run, tmp_path):
    manifest = tmp_path / "chart.yaml"  # `helm template` output: the Namespace and an unnamespaced Pod
    manifest.write_text(NO_GPU_NAMESPACE % "team-x" + "---\n" + GPU_POD)
    code, out, _ = run(str(manifest), "--rules", NS_RULES, "-o", "json", "-n", "team-x")
    (pod,) = json.loads(out)["objects"]
    assert pod["namespace"] == "team-x" and pod["rules"][0]["result"] == "fail" and code == 1
    # on stdin too, where the Namespace comes first
    code, out, _ = run("-", "--rules", NS_RULES, "-o", "json", "--namespace", "team-x", stdin=manifest.read_text())
    assert json.loads(out)["objects"][0]["rules"][0]["result"] == "fail"


def test_missing_namespace_context_is_folded_in_every_format(run, tmp_path):
    """A rule not evaluated for want of namespace context: once per rule per run (count, reason, fix)
    in every format; per object a list of rule names (json, yaml); PolicyReport keeps one skip per object."""
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text(GPU_POD.replace("trainer", f"trainer-{name}"))
    args = (str(tmp_path), "--rules", NS_RULES)
    fix = "--namespace-objects FILE (e.g. `kubectl get namespace default -o yaml > namespaces.yaml`)"
    code, out, _ = run(*args, "-o", "table")
    assert code == 0
    assert "  SKIP " not in out and "trainer-a" not in out  # nothing per object
    assert f"{NO_NAMESPACE_CONTEXT}: no Namespace object for default (1 rules, 3 objects)" in out
    assert fix in out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("no-gpu-namespaces")][1:]
    assert row == ["no-gpu-namespaces", "3"]  # the folded table, after the per-rule one

    report = json.loads(run(*args, "-o", "json")[1])
    assert [o["notEvaluated"] for o in report["objects"]] == [["no-gpu-namespaces"]] * 3
    assert [o["rules"] for o in report["objects"]] == [[]] * 3
    (folded,) = report["summary"]["notEvaluated"]
    assert folded["rule"] == "no-gpu-namespaces" and folded["objects"] == 3 and fix in folded["fix"]
    assert folded["reason"] == f"{NO_NAMESPACE_CONTEXT}: no Namespace object for default"
    assert report["summary"]["objectsWithRulesNotEvaluated"] == 3
    as_yaml = yaml.safe_load(run(*args, "-o", "yaml")[1])
    assert as_yaml["objects"][0]["notEvaluated"] == ["no-gpu-namespaces"]
    assert as_yaml["summary"]["notEvaluated"] == report["summary"]["notEvaluated"]

    junit = ET.fromstring(run(*args, "-o", "junit")[1])
    assert junit.get("skipped") == "1" and junit.get("tests") == "1"
    (case,) = junit.iter("testcase")
    assert case.get("name") == "3 objects not evaluated" and fix in case.find("skipped").get("message")

    (report,) = documents(run(*args, "-o", "policyreport")[1])
    assert report["summary"]["skip"] == 3
    assert {r["result"] for r in report["results"]} == {"skip"} and report["results"][0][
        "message"
    ] == NO_NAMESPACE_CONTEXT

    html = run(*args, "-o", "html")[1]
    assert "Not evaluated (1 rules, 3 objects)" in html and escape(fix) in html
    assert "<td>Not evaluated</td>" not in html and 'class="r-skip"' not in html  # no row per object


def test_an_evaluation_error_is_an_error_everywhere(run, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(GPU_POD.replace("{name: trainer}", "{name: trainer, namespace: team-a}"))
    for policy, exit_code in (("Fail", 1), ("Ignore", 0)):
        (rules / "broken.yaml").write_text(BROKEN % policy)
        code, out, _ = run(str(manifest), "--rules", str(rules), "-o", "json")
        report = json.loads(out)
        (rule,) = report["objects"][0]["rules"]
        assert rule["result"] == "error" and len(rule["messages"]) == 1, rule
        assert rule.get("blocks", False) is (policy == "Fail")
        assert report["summary"]["byResult"]["error"] == 1 and report["summary"]["byResult"]["fail"] == 0
        assert report["summary"]["blockedObjects"] == (policy == "Fail")
        assert code == exit_code  # failurePolicy Fail: the apiserver would refuse the pod
        _, table, _ = run(str(manifest), "--rules", str(rules), "-o", "table")
        assert "1 objects: 0 denied, 1 with errors" in table and "ERROR  broken:" in table
        (report,) = documents(run(str(manifest), "--rules", str(rules), "-o", "policyreport")[1])
        assert report["summary"]["error"] == 1 and report["summary"]["fail"] == 0


def test_unreadable_files_are_reported_and_the_rest_is_audited(run, tmp_path):
    (tmp_path / "a-binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    (tmp_path / "b-duplicate.yaml").write_text(GPU_POD + GPU_POD)  # two documents without `---`
    (tmp_path / "c-pod.yaml").write_text(GPU_POD.replace("trainer", "fine"))
    code, out, err = run(str(tmp_path), "--rules", RULES, "-o", "json")
    assert code == 2  # the report is incomplete: a usage error, after the report
    report = json.loads(out)
    assert [o["name"] for o in report["objects"]] == ["fine"]
    assert [p["origin"] for p in report["inputProblems"]] == [
        str(tmp_path / "a-binary.yaml"),
        str(tmp_path / "b-duplicate.yaml") + ":7:1",
    ]
    assert report["summary"]["inputProblems"] == 2
    assert "2 inputs could not be read: the report lists them" in err
    assert "a-binary.yaml: not UTF-8 text" in err or "a-binary.yaml:1" in err
    assert "b-duplicate.yaml:7:1: invalid YAML: duplicate key 'apiVersion'" in err
    assert "Traceback" not in err


def test_documents_that_are_not_manifests_are_reported_not_audited(run, tmp_path):
    manifest = tmp_path / "mixed.yaml"
    review = json.loads((ROOT / "examples" / "reviews" / "create-gpu-pod.json").read_text())
    manifest.write_text("just a string\n---\n{replicas: 3, image: x}\n---\n" + json.dumps(review) + "\n---\n" + GPU_POD)
    code, out, err = run(str(manifest), "--rules", RULES, "-o", "json")
    assert [o["name"] for o in json.loads(out)["objects"]] == ["trainer"] and code != 2
    assert "mixed.yaml#0: not a Kubernetes object (a str): skipped" in err
    assert "mixed.yaml#1: not a Kubernetes object (no apiVersion and kind): skipped" in err
    assert "mixed.yaml#2: AdmissionReview is not a workload manifest" in err


def test_concatenated_examples_are_fourteen_objects():
    """`cat examples/*.yaml | gpu-webhook audit -`: each example starts its own document."""
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    stream = "".join(path.read_text() for path in examples)
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "audit", "-", "-o", "json"],
        input=stream,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert "Traceback" not in result.stderr and result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["summary"]["objects"] == len(examples) == 14


def test_diffs_have_no_yaml_anchors(run, tmp_path):
    # a patch that adds the same value twice made PyYAML write &id001 / *id001 into the diff
    manifest = tmp_path / "job.yaml"
    shared = {"limits": {"nvidia.com/gpu": 1}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "i", "resources": shared},
                        {"name": "b", "image": "i", "resources": shared},
                    ]
                }
            }
        },
    }
    manifest.write_text(yaml.safe_dump(job))
    for output in ("json", "yaml", "table"):
        _, out, _ = run(str(manifest), "--rules", RULES, "-o", output)
        assert "&id0" not in out and "*id0" not in out, output


def test_audit_and_explain_agree_on_a_manifest_without_namespace(run, cli_main, tmp_path):
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(NO_GPU_NAMESPACE % "default" + "---\n" + GPU_POD)
    code, out, _ = run(str(manifest), "--rules", NS_RULES, "-o", "json")
    audited = json.loads(out)["objects"][0]
    explain_code, text, _ = cli_main("explain", "-f", str(manifest), "--rules", NS_RULES)
    assert audited["rules"][0]["result"] == "fail" and code == explain_code == 1
    assert "deny [no-gpu-namespaces] " in text and "Pod default/trainer" in text
    # and both say when the Namespace is missing
    manifest.write_text(GPU_POD)
    _, text, _ = cli_main("explain", "-f", str(manifest), "--rules", NS_RULES)
    assert (
        f"1 rule {NO_NAMESPACE_CONTEXT}: no-gpu-namespaces" in text
        and f"skipped 1 rule: {NO_NAMESPACE_CONTEXT}" in text
    )


def test_a_namespace_met_again_in_the_input_answers_for_what_follows(run, tmp_path):
    # The audit keeps the answers of namespace-only expressions per Namespace it read: a second
    # Namespace of the same name (other labels) replaces the first, and the objects after it see it.
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: gold-only}\n"
        "spec:\n  action: Deny\n  match: {kinds: [Pod], operations: [CREATE]}\n"
        "  validate:\n    expression: \"namespaceObject.metadata.labels['tier'] == 'gold'\"\n"
        "    message: not a gold namespace\n"
    )

    def namespace(tier: str) -> str:
        return f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: team-x, labels: {{tier: {tier}}}}}\n"

    def pod(name: str) -> str:
        return GPU_POD.replace("name: trainer", f"name: {name}, namespace: team-x")

    stream = "---\n".join(
        [namespace("gold"), pod("a"), pod("b"), namespace("silver"), pod("c"), namespace("gold"), pod("d")]
    )
    code, out, _ = run("-", "--rules", str(rules), "-o", "json", stdin=stream)
    results = {o["name"]: o["rules"][0]["result"] for o in json.loads(out)["objects"]}
    assert results == {"a": "pass", "b": "pass", "c": "fail", "d": "pass"} and code == 1
