"""GPUPolicyOverlay: a site's changes to the pack's rules, applied to the documents before compiling."""

from __future__ import annotations

from typing import Any

import yaml

from webhook.engine import Action, AdmissionInput, evaluate
from webhook.engine.loader import compile_documents
from webhook.engine.overlays import OVERLAID_BY
from webhook.kubeyaml import load_documents

PACK = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: needs-label}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate: {expression: "params.key in object.metadata.labels", messageExpression: "'needs ' + params.key"}
  params: {key: team}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: placement}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate: [{requireNodeAffinity: {fromParam: gpuNode}}]
  params:
    gpuNode: {key: vendor.example/gpu, operator: In, values: ["true"]}
"""


def overlay(name: str, *rules: dict[str, Any]) -> str:
    document = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": name},
        "spec": {"rules": list(rules)},
    }
    return "---\n" + yaml.safe_dump(document)


def load(*overlays: str) -> Any:
    documents = load_documents(PACK, "pack.yaml")
    for index, text in enumerate(overlays):
        documents += load_documents(text, f"site-{index}.yaml")
    return compile_documents(documents)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "team-a", "labels": {"team": "a"}},
    "spec": {"containers": [{"name": "c", "image": "x"}]},
}


def test_params_action_and_enabled():
    ruleset = load(
        overlay("site", {"name": "needs-label", "action": "Warn", "params": {"key": "cost-center"}}),
        overlay("off", {"name": "placement", "enabled": False}),
    ).require()
    assert [r.name for r in ruleset.rules] == ["needs-label"]
    rule = ruleset.rules[0]
    assert rule.action == Action.WARN
    assert rule.params == {"key": "cost-center"}
    assert rule.description == ""
    decision = evaluate(ruleset, AdmissionInput.offline(POD))
    assert decision.allowed and [w.message for w in decision.warnings] == ["needs cost-center"]


def test_a_param_overlay_changes_a_mutation_from_param():
    label = {"key": "site.example/gpu", "operator": "Exists"}
    ruleset = load(overlay("site", {"name": "placement", "params": {"gpuNode": label}})).require()
    decision = evaluate(ruleset, AdmissionInput.offline(POD))
    (operation,) = decision.patch
    assert "site.example/gpu" in yaml.safe_dump(operation["value"])
    assert "vendor.example" not in yaml.safe_dump(operation["value"])


def test_match_fields_replace_the_rules():
    ruleset = load(overlay("site", {"name": "needs-label", "match": {"namespaces": {"exclude": ["team-a"]}}})).require()
    assert ruleset.rules[0].match.namespaces_exclude == frozenset({"team-a"})
    assert ruleset.rules[0].match.operations == frozenset({"CREATE"})  # the rest of match stays


def test_the_rule_says_which_overlay_changed_what():
    ruleset = load(overlay("site", {"name": "needs-label", "action": "Audit", "params": {"key": "x"}})).require()
    assert ruleset.rules[0].action == Action.AUDIT
    result = load(overlay("site", {"name": "needs-label", "action": "Audit", "params": {"key": "x"}}))
    assert result.ok
    documents = load_documents(PACK, "pack.yaml")
    assert OVERLAID_BY not in str(documents[0].data)  # the pack's documents are not changed


def test_an_overlay_naming_a_missing_rule_or_param_is_an_error_at_the_overlay():
    result = load(
        overlay("site", {"name": "needs-labels", "action": "Warn"}, {"name": "placement", "params": {"gpuNod": {}}})
    )
    assert not result.ok
    messages = [str(e) for e in result.errors]
    assert messages[0].startswith("site-0.yaml:")
    assert (
        "GPUPolicyOverlay site: no rule named 'needs-labels' in the rules loaded (did you mean 'needs-label'?)"
        in messages[0]
    )
    assert "rule 'placement' has no param 'gpuNod' (did you mean 'gpuNode'?)" in messages[1]


def test_two_overlays_setting_one_field_is_an_error():
    result = load(
        overlay("a", {"name": "needs-label", "action": "Warn"}),
        overlay("b", {"name": "needs-label", "action": "Audit", "params": {"key": "x"}}),
    )
    assert not result.ok
    (error,) = result.errors
    assert "GPUPolicyOverlay b: rule 'needs-label': action also set by GPUPolicyOverlay a" in str(error)
    assert error.location.file == "site-1.yaml"


def test_overlay_schema_errors_are_located():
    result = load(overlay("site", {"name": "needs-label", "action": "Block"}))
    assert not result.ok
    assert "spec.rules[0].action: 'Block' is not one of: Deny, Warn, Audit" in str(result.errors[0])
    assert result.errors[0].location.file == "site-0.yaml"


def test_a_wrong_param_value_is_reported_like_the_rule_would_be():
    result = load(overlay("site", {"name": "placement", "params": {"gpuNode": {"operator": "In"}}}))
    assert not result.ok
    (error,) = result.errors
    assert "rule placement: spec.mutate[0].requireNodeAffinity: params.gpuNode" in str(error)
    assert str(error).endswith("(with GPUPolicyOverlay site (params.gpuNode))")  # what broke it
