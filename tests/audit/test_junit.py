"""Both JUnit doors (`audit -o junit`, `test -o junit`) write through webhook/junit.py: parseable XML whatever
a message holds. The message below has every character XML escapes (& < > "), the CDATA terminator `]]>`,
and an ESC taken from the object: XML 1.0 cannot hold it at all, so it must arrive as U+FFFD."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from webhook.cli import main

NASTY = '<&"]]>'
RULE = f"""\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: nasty-message}}
spec:
  action: Deny
  match: {{kinds: [Pod]}}
  validate:
    expression: "false"
    messageExpression: |-
      '{NASTY} ' + object.metadata.annotations['note']
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: team-a, annotations: {note: "esc \\e end"}}
spec: {containers: [{name: web, image: nginx}]}
"""
SUITE = f"""\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata: {{name: nasty}}
spec:
  rules: rules
  cases:
    - name: 'case {NASTY}'
      objectFile: pod.yaml
      expect:
        rules:
          - rule: nasty-message
            result: denied
            message: 'not what it says {NASTY}'
"""
EXPECTED_MESSAGE = f"{NASTY} esc \ufffd end"


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def files(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "nasty.yaml").write_text(RULE)
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "nasty.test.yaml").write_text(SUITE)
    return tmp_path


def test_audit_junit_escapes_every_message(tmp_path, capsys):
    root = files(tmp_path)
    code, out = run(capsys, "audit", str(root / "pod.yaml"), "--rules", str(root / "rules"), "-o", "junit")
    assert code == 1
    assert "\x1b" not in out
    tree = ET.fromstring(out)
    assert (tree.tag, tree.get("tests"), tree.get("failures"), tree.get("errors")) == ("testsuites", "1", "1", "0")
    suite = tree.find("testsuite")
    assert suite is not None and suite.get("name") == "nasty-message"
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("type") == "Deny"
    assert EXPECTED_MESSAGE in failure.get("message", "") and EXPECTED_MESSAGE in (failure.text or "")


def test_test_junit_escapes_names_and_failure_text(tmp_path, capsys):
    root = files(tmp_path)
    code, out = run(capsys, "test", str(root / "nasty.test.yaml"), "--output", "junit")
    assert code == 1
    assert "\x1b" not in out
    tree = ET.fromstring(out)
    assert (tree.tag, tree.get("tests"), tree.get("failures")) == ("testsuites", "1", "1")
    case = tree.find("testsuite/testcase")
    assert case is not None and case.get("name") == f"case {NASTY}"
    assert float(case.get("time", "-1")) >= 0
    failure = case.find("failure")
    assert failure is not None and failure.text is not None
    assert f"not what it says {NASTY}" in failure.text and EXPECTED_MESSAGE in failure.text
    assert failure.get("message") == failure.text.splitlines()[0]
