"""CEL variables cut down to the fields rules read: the same answers as the whole objects.

The runtime converts each variable deeply on first use; the engine hands it only what some
candidate rule's expressions can read (webhook/cel/reads.py). Every rule below reads
its object in a way the projection must keep whole or in part, and must decide exactly as
it would on the whole object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.cel.reads import read_paths
from webhook.engine import AdmissionInput, evaluate


def _rule(name: str, expression: str, kinds: str = "[Pod]") -> str:
    return f"""\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  action: Warn
  match: {{kinds: {kinds}, operations: [CREATE]}}
  validate:
    expression: >-
      {expression}
    message: {name}
"""


RULES = {
    # fields no other rule reads, reached by a path: kept along the path
    "managed-fields": "object.metadata.managedFields.size() == 0",
    "status": "!has(object.status) || object.status.phase != 'Pending'",
    # the whole metadata map, through size(): kept whole
    "metadata-size": "size(object.metadata) < 5",
    # a null test needs no field, a name read next to it does
    "namespace-null": "namespaceObject == null || namespaceObject.metadata.name != 'team-a'",
    # a dynamic index into podSpec: kept whole
    "pod-spec-index": "!['hostPID'].exists(f, f in podSpec && podSpec[f] == true)",
    # a string literal and a comment that name fields read nothing; the real read does
    "literal": "'object.spec' != object.kind // object.status",
    # CEL's leading dot names the variable itself: its fields are read like any other's
    "leading-dot": "!has(.object.spec.hostPID) || .object.spec.hostPID != true",
}


def _pod() -> dict[str, Any]:
    pod = gpu_pod(hostPID=True)
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    pod["metadata"]["uid"] = "u"
    pod["metadata"]["annotations"] = {"a": "b"}
    pod["status"] = {"phase": "Pending"}
    return pod


@pytest.fixture(scope="module")
def ruleset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory: Path = tmp_path_factory.mktemp("rules")
    text = "---\n".join(_rule(name, expression) for name, expression in RULES.items())
    # a rule of another kind that reads its object whole must not widen the Pod's projection
    text += "---\n" + _rule("widget", "string(object) != ''", "[Widget]")
    return load_rule_text(directory, text)


def test_rules_see_the_fields_they_read(ruleset: Any) -> None:
    namespace = {"metadata": {"name": "team-a", "labels": {"x": "y"}, "managedFields": [{}]}}
    decision = evaluate(ruleset, AdmissionInput(object=_pod(), namespace="team-a", namespace_object=namespace))
    assert decision.errors == []
    # every rule but "literal" fails on this pod: each saw the part of the object it reads
    assert sorted(v.rule for v in decision.warnings) == sorted(set(RULES) - {"literal"})


def test_a_missing_namespace_is_still_null(ruleset: Any) -> None:
    decision = evaluate(ruleset, AdmissionInput(object=_pod(), namespace="team-a"))
    assert "namespace-null" not in [v.rule for v in decision.warnings]


def test_read_paths() -> None:
    assert read_paths("object.metadata.labels['app'] == 'x'") == {"object": {("metadata", "labels")}}
    # a method call ends the path; a field of another value named like a variable is no read
    assert read_paths("object.apiVersion.startsWith('v') && params.object.x") == {"object": {("apiVersion",)}}
    assert read_paths("cel.bind(o, object, o.kind)") == {"object": {()}}
    assert read_paths("object.metadata.?labels.orValue({})") == {"object": {("metadata", "labels")}}
    assert read_paths("[namespaceObject != null]") == {"namespaceObject": set()}
    assert read_paths("namespaceObject != null + 1") == {"namespaceObject": {()}}  # not a plain null test
    assert read_paths("'request.userInfo' // request.x") == {}
    assert read_paths("x in .object.spec.containers") == {"object": {("spec", "containers")}}
    assert read_paths("has(.object.metadata.labels) && y.?object.z") == {"object": {("metadata", "labels")}}
