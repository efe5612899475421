"""Expressions of the namespace alone are answered once per namespace version, never staler than that.

The server's namespace cache holds each Namespace as the watch delivered it; the apiserver gives
every change a new resourceVersion (its optimistic-concurrency token), so (uid, resourceVersion)
names one content. Without that identity (offline doors, hand-built objects) nothing is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, Phase, evaluate

RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: tier-label}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
    condition: "namespaceObject != null && has(namespaceObject.metadata.labels) && 'tier' in namespaceObject.metadata.labels"
  mutate:
    - setLabels:
        valueExpressions: {tier: "namespaceObject.metadata.labels['tier']"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: gold-only}
spec:
  match:
    kinds: [Pod]
    operations: [CREATE]
  validate:
    expression: "namespaceObject != null && namespaceObject.metadata.labels['tier'] == 'gold'"
    message: "the namespace is not gold"
"""


@pytest.fixture
def ruleset(tmp_path: Path) -> Any:
    return load_rule_text(tmp_path, RULES)


def _namespace(tier: str, version: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "team-a", "labels": {"tier": tier}}
    if version is not None:
        metadata.update(uid="5d1c0b1e-0000-4000-8000-000000000001", resourceVersion=version)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def _decide(ruleset: Any, namespace: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    admission = AdmissionInput.offline(gpu_pod(), namespace_object=namespace)
    decision = evaluate(ruleset, admission, phase=Phase.ALL, trace=False)
    return decision.patch, decision.allowed


def test_a_new_resource_version_is_a_new_answer(ruleset: Any) -> None:
    for _ in range(3):  # the second and third are answered from what the first computed
        patch, allowed = _decide(ruleset, _namespace("gold", "100"))
        assert "'gold'" in str(patch)
        assert allowed
    patch, allowed = _decide(ruleset, _namespace("silver", "101"))  # the label changed: a new version
    assert "silver" in str(patch)
    assert not allowed


def test_without_a_version_nothing_is_kept(ruleset: Any) -> None:
    namespace = _namespace("gold", None)
    assert _decide(ruleset, namespace)[1]
    namespace["metadata"]["labels"]["tier"] = "silver"  # an offline door may reuse and edit its objects
    patch, allowed = _decide(ruleset, namespace)
    assert "silver" in str(patch)
    assert not allowed


def test_kept_answers_equal_fresh_ones(ruleset: Any) -> None:
    versioned = [_decide(ruleset, _namespace(tier, "7")) for tier in ("gold", "gold")]
    fresh = _decide(ruleset, _namespace("gold", None))
    assert versioned[0] == versioned[1] == fresh


def test_copies_with_the_same_version_but_other_labels_get_their_own_answers(ruleset: Any) -> None:
    # Offline, (uid, resourceVersion) names no content: a GPUPolicyTest suite or a manifest file may
    # copy a Namespace exported with `kubectl get -o yaml` and change its labels, keeping both.
    assert _decide(ruleset, _namespace("gold", "7"))[1]
    patch, allowed = _decide(ruleset, _namespace("silver", "7"))
    assert "silver" in str(patch)
    assert not allowed


def test_a_door_that_never_edits_its_namespaces_has_them_answered_once_per_dict(
    ruleset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An audit hands every object of a namespace the one Namespace dict it read (namespace_unchanging):
    # the expressions of the namespace alone run once per dict, and answer as if run every time.
    from webhook.engine import cel

    runs: list[str] = []
    evaluate_alone = cel.CompiledExpression.evaluate

    def counted(self: Any, activation: Any) -> Any:
        runs.append(self.text)
        return evaluate_alone(self, activation)

    monkeypatch.setattr(cel.CompiledExpression, "evaluate", counted)
    namespaces = [_namespace("gold", None), _namespace("silver", None), _namespace("gold", None)]
    kept, fresh = [], []
    for _ in range(3):
        for namespace in namespaces:
            for unchanging, into in ((True, kept), (False, fresh)):
                admission = AdmissionInput.offline(
                    gpu_pod(), namespace_object=namespace, namespace_unchanging=unchanging
                )
                decision = evaluate(ruleset, admission, phase=Phase.ALL, trace=False)
                into.append((decision.patch, decision.allowed))
    assert kept == fresh
    assert [allowed for _, allowed in kept[:3]] == [True, False, True]
    condition = (
        "namespaceObject != null && has(namespaceObject.metadata.labels) && 'tier' in namespaceObject.metadata.labels"
    )
    # 9 admissions without the promise run it 9 times; with it, once for each of the 3 dicts
    assert runs.count(condition) == 9 + 3
