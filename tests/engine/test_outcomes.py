"""Decision.outcomes() and AdmissionInput.offline(): the one summary and the one offline input every door uses."""

from __future__ import annotations

from typing import Any

from webhook.engine import NO_NAMESPACE_CONTEXT, AdmissionInput, Mode, Result, evaluate
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents

RULES = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: needs-label}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "has(object.metadata.labels)", message: "label it"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: broken}
spec:
  action: Deny
  failurePolicy: Fail
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "object.spec.nothere == 1"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: tenant-only}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE], namespaceSelector: {matchLabels: {tenant: "true"}}}
  validate: {expression: "false"}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: reads-request}
spec:
  action: Deny
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: "request.kind.kind == 'Pod' && request.name == 'p' && request.namespace == 'team-a'"
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: labeller}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate: [{setLabels: {values: {team: a}}}]
"""


def load_rules_from_text(text: str):
    result = compile_documents(load_documents(text, "rules.yaml"))
    assert result.ok, result.errors
    return result.ruleset


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": {}}


def test_offline_input_carries_the_request_the_apiserver_would_send() -> None:
    admission = AdmissionInput.offline(pod(), user_info={"username": "alice"})
    assert admission.namespace == "team-a"
    assert admission.request == {
        "uid": "",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "name": "p",
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "dryRun": False,
    }


def test_one_outcome_per_rule_and_an_error_is_an_error() -> None:
    ruleset = load_rules_from_text(RULES)
    decision = evaluate(ruleset, AdmissionInput.offline(pod()))
    outcomes = {o.rule: o for o in decision.outcomes()}
    assert list(outcomes) == ["labeller", "needs-label", "broken", "tenant-only", "reads-request"]
    # the labeller mutates first, so needs-label validates the labelled object and passes
    assert outcomes["labeller"].result == Result.PASS and outcomes["labeller"].patched
    assert outcomes["needs-label"].result == Result.PASS
    broken = outcomes["broken"]
    assert broken.result == Result.ERROR and broken.blocks and len(broken.messages) == 1
    assert decision.errors[0].rule == "broken" and not decision.allowed
    assert outcomes["tenant-only"].result == Result.SKIP
    assert outcomes["tenant-only"].reason == NO_NAMESPACE_CONTEXT and outcomes["tenant-only"].context_missing
    assert outcomes["reads-request"].result == Result.PASS


def test_audit_mode_failure_is_relaxed_not_blocking() -> None:
    ruleset = load_rules_from_text(RULES.split("---")[0])
    unlabelled = pod()
    decision = evaluate(ruleset, AdmissionInput.offline(unlabelled), mode=Mode.AUDIT)
    (outcome,) = decision.outcomes()
    assert outcome.result == Result.AUDIT and outcome.relaxed and not outcome.blocks
    assert outcome.messages == ("label it",)
