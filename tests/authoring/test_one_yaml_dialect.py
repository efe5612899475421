"""`test`, `audit` and `explain` read one manifest to the same object: kubectl's YAML, everywhere.

kubectl decodes YAML with sigs.k8s.io/yaml over go-yaml v2 into interface{}, where a plain
timestamp "for backward compatibility reasons" stays a string (gopkg.in/yaml.v2 decode.go), `y`
is true and `1:20` a string (resolve.go). The audit read manifests that way; rule files and the
objects of GPUPolicyTest suites were read by PyYAML's YAML 1.1 rules, where `2025-12-24` is a
datetime (which CEL cannot take: the rule errored in the suite and passed in the audit).
"""

from __future__ import annotations

import json
import textwrap

RULE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: starts-after-cutoff}
spec:
  params: {cutoff: 2026-01-01}
  match: {kinds: [Pod]}
  validate:
    expression: "!has(object.metadata.annotations) || !('start' in object.metadata.annotations) ||
      object.metadata.annotations['start'] >= params.cutoff"
    message: starts before the cutoff
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: window-is-text}
spec:
  match: {kinds: [Pod]}
  validate:
    expression: "!has(object.metadata.annotations) || !('window' in object.metadata.annotations) ||
      object.metadata.annotations['window'] == '1:20'"
    message: the window is not the text 1:20
"""
POD = """
apiVersion: v1
kind: Pod
metadata:
  name: early
  namespace: team-a
  annotations: {start: 2025-12-24, window: 1:20}
spec:
  containers: [{name: c, image: busybox}]
"""
SUITE = (
    """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata: {name: cutoff}
spec:
  rules: .
  cases:
    - name: the same pod, written inline
      object:
"""
    + textwrap.indent(POD.strip("\n"), " " * 8)
    + """
      expect:
        allowed: false
        rules:
          - {rule: starts-after-cutoff, result: denied, message: starts before the cutoff}
          - {rule: window-is-text, result: allowed}
"""
)


def test_suite_audit_and_explain_agree_on_a_plain_timestamp(cli, write, tmp_path) -> None:
    rules = write("rules/cutoff.yaml", RULE).parent
    write("rules/cutoff.test.yaml", SUITE)
    pod = write("pod.yaml", POD)

    code, out, err = cli("test", str(rules))
    assert code == 0, out + err

    code, out, _ = cli("audit", "--rules", str(rules), "-o", "json", "--fail-on", "never", str(pod))
    assert code == 0
    (found,) = json.loads(out)["objects"]
    assert {r["rule"]: r["result"] for r in found["rules"]} == {"starts-after-cutoff": "fail", "window-is-text": "pass"}

    code, out, _ = cli("explain", "--rules", str(rules), "-f", str(pod), "--no-color")
    assert "DENY: starts before the cutoff" in out and "not the text" not in out and "evaluated" not in out


FILE_SUITE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata: {name: cutoff-from-a-file}
spec:
  rules: .
  cases:
    - name: the same pod, read from its file
      objectFile: ../pod.yaml
      expect:
        allowed: false
        rules:
          - {rule: starts-after-cutoff, result: denied, message: starts before the cutoff}
          - {rule: window-is-text, result: allowed}
"""


def test_a_suites_value_file_is_read_as_kubectl_reads_it(cli, write) -> None:
    # PyYAML's safe_load makes `2025-12-24` a date (the rule errors) and `1:20` the sexagesimal int 80
    rules = write("rules/cutoff.yaml", RULE).parent
    write("rules/cutoff.test.yaml", FILE_SUITE)
    write("pod.yaml", POD)

    code, out, err = cli("test", str(rules))
    assert code == 0, out + err


def test_a_suites_value_file_with_a_duplicate_key_is_refused_as_audit_refuses_it(cli, write) -> None:
    # two manifests concatenated without `---`: PyYAML keeps the last of each key, kubectl's reading refuses
    rules = write("rules/cutoff.yaml", RULE).parent
    write("rules/cutoff.test.yaml", FILE_SUITE)
    write("pod.yaml", POD + POD)

    code, out, err = cli("test", str(rules))
    assert code != 0
    assert "cannot run the case" in out + err and "duplicate key 'apiVersion'" in out + err
