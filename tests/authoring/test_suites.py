"""`gpu-webhook test`: the default pack's own suites pass, and a changed rule fails them readably."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import yaml

from tests.authoring.conftest import BASIC_RULES, HEADER, RULES
from webhook.authoring.suite import is_subset, project


def pack_cases() -> int:
    """How many cases the default pack's own suites hold (the pack and its suites grow together)."""
    return sum(
        len(document["spec"]["cases"])
        for path in (RULES / "tests").glob("*.test.yaml")
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") == "GPUPolicyTest"
    )


def test_default_pack_suites_pass(cli):
    code, out, _ = cli("test", str(RULES))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-1].endswith(" passed, 0 failed")
    assert all(line.endswith(" PASSED") for line in lines[:-1])
    # one suite file per rule of the pack
    assert {p.name.removesuffix(".test.yaml") for p in (RULES / "tests").glob("*.test.yaml")} >= {
        p.stem for p in RULES.glob("*.yaml")
    }


def test_a_changed_rule_fails_with_a_diff(cli, tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    rule = rules / "gpu-toleration.yaml"
    rule.write_text(rule.read_text().replace("effect: NoSchedule}", "effect: NoExecute}"))
    code, out, _ = cli("test", str(rules))
    assert code == 1
    assert "gpu-toleration.test.yaml::adds the GPU toleration to a GPU pod FAILED" in out
    assert "rule gpu-toleration: patch differs:\n--- expected patch\n+++ actual patch\n" in out
    assert "-    effect: NoSchedule\n+    effect: NoExecute\n" in out
    # exactly the cases that state the toleration's patch fail; every other case of the pack passes
    failed = {line.removesuffix(" FAILED").split("::")[-1] for line in out.splitlines() if line.endswith(" FAILED")}
    assert failed == {
        "adds the GPU toleration to a GPU pod",
        "appends beside an unrelated toleration",
        "patches the pod template of a Job",
        "patches a RayCluster's GPU worker group, not its CPU head",
        "patches each GPU replica of an XGBoostJob (kubeflow.org/v1 xgbReplicaSpecs)",
        "patches each GPU replica of a PaddleJob (kubeflow.org/v1 paddleReplicaSpecs)",
        "adds the NVIDIA toleration to a pod asking for a GPU as a DRA extended resource (KEP-5004)",
        "adds the NVIDIA toleration to a pod asking for a GPU through Volcano's device plugin",
    }
    assert out.splitlines()[-1] == f"{pack_cases() - 8} passed, 8 failed"


def test_a_rule_that_stops_denying(cli, tmp_path):
    # the pack's own suite for the rule, run against the small pinned rule set, where no other
    # rule denies the suite's objects: the pack-level `allowed: false` then fails as well
    rules = tmp_path / "rules"
    shutil.copytree(BASIC_RULES, rules)
    (rules / "tests").mkdir()
    shutil.copy(RULES / "tests" / "gpu-requests-equal-limits.test.yaml", rules / "tests")
    rule = rules / "gpu-requests-equal-limits.yaml"
    rule.write_text(rule.read_text().replace("action: Deny", "action: Warn"))
    code, out, _ = cli("test", str(rules / "tests" / "gpu-requests-equal-limits.test.yaml"))
    assert code == 1
    assert "rule gpu-requests-equal-limits: expected denied, got warned: pod train: container main requests" in out
    assert "expected allowed: false, got true (no rule denied it)" in out
    assert out.splitlines()[-1] == "3 passed, 5 failed"


def test_expectations(cli, write, tmp_path):
    write(
        "rules/label.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: team-label}
        spec:
          match: {kinds: [Pod], operations: [CREATE, UPDATE]}
          mutate:
            - setLabels: {valueExpressions: {team: "request.userInfo.username.split(':')[0]"}}
          validate:
            expression: "oldObject == null || object.metadata.labels.team == oldObject.metadata.labels.team"
            message: the team label is immutable
        """,
    )
    write("pods/pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: []}\n")
    write(
        "suites/label.test.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyTest
        metadata: {name: label}
        spec:
          rules: ../rules
          cases:
            - name: from the user
              objectFile: ../pods/pod.yaml
              userInfo: {username: "ml:alice"}
              expect:
                allowed: true
                rules: [{rule: team-label, result: mutated}]
                patch: [{op: add, path: /metadata/labels, value: {team: ml}}]
                object: {metadata: {name: p, labels: {team: ml}}}
            - name: immutable
              operation: UPDATE
              object: {apiVersion: v1, kind: Pod, metadata: {name: p, labels: {team: ml}}, spec: {}}
              oldObject: {apiVersion: v1, kind: Pod, metadata: {name: p, labels: {team: cv}}, spec: {}}
              expect:
                rules: [{rule: team-label, result: denied, messageRegex: "^the team .* immutable$"}]
                object: {metadata: {labels: {team: cv}}}
        """,
    )
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 1
    assert out.splitlines()[:2] == [
        f"{tmp_path}/suites/label.test.yaml::from the user PASSED",
        f"{tmp_path}/suites/label.test.yaml::immutable FAILED",
    ]
    assert "the object after mutation does not contain the expected fields:" in out
    assert " metadata:\n   labels:\n-    team: cv\n+    team: ml\n" in out
    assert out.splitlines()[-1] == "1 passed, 1 failed"


def test_junit_output(cli, tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    rule = rules / "gpu-toleration.yaml"
    rule.write_text(rule.read_text().replace("operations: [CREATE]", "operations: [UPDATE]"))
    code, out, _ = cli("test", str(rules), "--output", "junit")
    assert code == 1
    root = ElementTree.fromstring(out.encode())
    assert root.tag == "testsuites" and root.get("tests") == str(pack_cases())
    suite = next(s for s in root if s.get("name").endswith("gpu-toleration.test.yaml"))
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert "adds the GPU toleration to a GPU pod" in failed
    assert "expected mutated, got skipped" in suite.find("testcase/failure").text


def test_bad_suite_is_a_usage_error(cli, write, tmp_path):
    write(
        "t.test.yaml",
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicyTest\nmetadata: {name: t}\nspec:\n  cases:\n    - name: x\n      expect: {allowed: maybe}\n",
    )
    code, _, err = cli("test", str(tmp_path))
    assert code == 2
    assert f"{tmp_path}/t.test.yaml:6:7: spec/cases/0: a case needs exactly one of `object` or `objectFile`" in err
    assert f"{tmp_path}/t.test.yaml:7:25: spec/cases/0/expect/allowed: 'maybe' is not of type 'boolean'" in err


def test_subset_and_projection():
    actual = {"a": 1, "b": {"c": [1, 2], "d": 3}}
    assert is_subset({"b": {"c": [1, 2]}}, actual)
    assert not is_subset({"b": {"c": [1]}}, actual)
    assert project(actual, {"b": {"d": 0}}) == {"b": {"d": 3}}


def test_console_script(tmp_path):
    script = Path(sys.executable).with_name("gpu-webhook")  # installed by `pip install -e .`
    done = subprocess.run([str(script), "test", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"{pack_cases()} passed, 0 failed"


def test_a_case_about_a_rule_that_does_not_exist_fails(cli, write, tmp_path):
    write(
        "rules/r.yaml",
        HEADER + "metadata: {name: real}\nspec:\n  match: {kinds: [Pod], operations: [CREATE]}\n"
        "  validate: {expression: 'true'}\n",
    )
    write(
        "suites/s.test.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyTest
        metadata: {name: s}
        spec:
          rules: ../rules
          cases:
            - name: typo
              object: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {}}
              expect: {rules: [{rule: reall, result: skipped}]}
        """,
    )
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 1 and "rule reall: no such rule in the rules under test (did you mean real?)" in out


def test_errors_and_binary_files_in_suites(cli, write, tmp_path):
    write(
        "rules/r.yaml",
        HEADER + "metadata: {name: broken}\nspec:\n  action: Deny\n  failurePolicy: Fail\n"
        "  match: {kinds: [Pod], operations: [CREATE]}\n  validate: {expression: 'object.spec.nothere == 1'}\n",
    )
    write(
        "suites/s.test.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyTest
        metadata: {name: s}
        spec:
          rules: ../rules
          cases:
            - name: an error is an error, not a denial
              object: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {}}
              expect: {allowed: false, rules: [{rule: broken, result: error}]}
        """,
    )
    (tmp_path / "suites" / "zz-binary.test.yaml").write_bytes(b"\xff\xfe\x00binary")
    code, out, err = cli("test", str(tmp_path / "suites"))
    assert "zz-binary.test.yaml: not UTF-8 text" in err and "Traceback" not in err
    assert "an error is an error, not a denial PASSED" in out
    assert code == 2  # a suite file could not be read: the run is incomplete
