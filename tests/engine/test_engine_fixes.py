"""Engine bugs found while building the rule pack, each pinned by a test."""

from __future__ import annotations

from webhook.engine import AdmissionInput, Phase, evaluate
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

BOTH = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: needs-namespace}
spec:
  onMissingContext: Deny
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - setLabels: {valueExpressions: {team: "namespaceObject.metadata.name"}}
  validate: {expression: "namespaceObject.metadata.name != ''"}
"""


def _ruleset(text: str):
    result = compile_documents(load_documents(text, "rule.yaml"))
    assert result.ok, result.errors
    return result.ruleset


def _pod(**metadata: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "t", **metadata},
        "spec": {"containers": [{"name": "c"}]},
    }


def test_missing_context_denies_once_for_a_rule_that_mutates_and_validates():
    decision = evaluate(_ruleset(BOTH), AdmissionInput(object=_pod(name="p"), namespace="t"))
    assert [v.rule for v in decision.violations] == ["needs-namespace"]
    # each webhook phase alone still denies
    for phase in (Phase.MUTATE, Phase.VALIDATE):
        decision = evaluate(_ruleset(BOTH), AdmissionInput(object=_pod(name="p"), namespace="t"), phase=phase)
        assert len(decision.violations) == 1


def test_pods_of_controllers_are_named_by_generate_name():
    decision = evaluate(_ruleset(BOTH), AdmissionInput(object=_pod(generateName="vllm-6d5f7c9b8-"), namespace="t"))
    assert decision.violations[0].target == "pod vllm-6d5f7c9b8-"
