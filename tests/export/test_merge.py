"""Validating rules merged into few ValidatingAdmissionPolicies (webhook/export/merge.py).

What the merged policies must keep from the per-rule ones: a rule judges only the requests its own
resourceRules select (its gate), its variables cannot clash with another rule's, a denial names the
rule as the webhook's does ("[rule] message"), and a policy stays under the apiserver's per-policy
runtime budget (celconfig.RuntimeCELCostBudget, shared by its variables, validations and messages).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.export.apiserver import Apiserver
from tests.support import load_rule_text
from webhook.engine import AdmissionInput
from webhook.export import export
from webhook.export.merge import RULES_ANNOTATION, merge, rename_variables, rules_of

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  exceptable: false  # exported only when no exception can lift it (webhook.export.EXCEPTABLE)
  action: {action}
  ratcheting: false
  match:
    kinds: {kinds}
    operations: {operations}{namespaces}
  validate:
    expression: "{expression}"
    message: "{name} says no"
"""


def rule(
    name: str,
    expression: str = "true",
    action: str = "Deny",
    kinds: str = "[Pod]",
    operations: str = "[CREATE, UPDATE]",
    namespaces: str = "",
) -> str:
    extra = f"\n    namespaces: {namespaces}" if namespaces else ""
    return RULE.format(
        name=name, action=action, kinds=kinds, operations=operations, namespaces=extra, expression=expression
    )


def validating(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]


def sent(obj: dict[str, Any], operation: str, resource: tuple[str, str], sub: str = "") -> AdmissionInput:
    """The request as the apiserver describes it to a policy (request.resource, request.subResource)."""
    old = obj if operation == "UPDATE" else None
    admission = AdmissionInput.offline(obj, operation=operation, old_object=old)
    group, plural = resource
    request = {**admission.request, "resource": {"group": group, "version": "v1", "resource": plural}}
    # the apiserver's AdmissionRequest omits an empty subResource (omitempty)
    return dataclasses.replace(admission, request={**request, **({"subResource": sub} if sub else {})})


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}


def test_rules_that_share_a_binding_share_one_policy(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        rule("a"),
        rule("b", operations="[CREATE]"),
        rule("c", action="Warn"),
        rule("d", namespaces="{include: [team-a]}"),
    )
    result = export(ruleset)
    policies = validating(result.objects)
    assert [rules_of(p) for p in policies] == [["a", "b"], ["c"], ["d"]]
    names = [p["metadata"]["name"] for p in policies]
    assert names[:2] == ["gpu-webhook-deny-fail", "gpu-webhook-warn-fail"]
    assert names[2].startswith("gpu-webhook-deny-fail-") and len(set(names)) == 3
    assert [r.policy for r in result.rules] == names[:1] * 2 + names[1:]
    bindings = [o for o in result.objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert [b["spec"]["policyName"] for b in bindings] == names
    assert [b["spec"]["validationActions"] for b in bindings] == [["Deny"], ["Warn"], ["Deny"]]
    assert policies[0]["metadata"]["annotations"][RULES_ANNOTATION] == "a,b"
    assert export(ruleset).objects == result.objects  # deterministic


def test_policy_per_rule_keeps_one_policy_a_rule(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, rule("a"), rule("b"))
    objects = export(ruleset, policy_per_rule=True).objects
    assert [p["metadata"]["name"] for p in validating(objects)] == ["gpu-webhook-a", "gpu-webhook-b"]


def test_a_rule_narrower_than_its_policy_judges_only_its_own_requests(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        rule("pods-any", "object.metadata.name != 'p'"),
        rule("pods-create", "object.metadata.name != 'p'", operations="[CREATE]"),
    )
    (policy,) = validating(export(ruleset).objects)
    ops = {op for r in policy["spec"]["matchConstraints"]["resourceRules"] for op in r["operations"]}
    assert ops == {"CREATE", "UPDATE"}
    first, second = policy["spec"]["validations"]
    assert not first["expression"].startswith("!(")  # covers the whole union: no gate
    assert "request.operation" in second["expression"]
    server = Apiserver()
    assert server.validate(policy, sent(POD, "CREATE", ("", "pods")), POD) == [
        "[pods-any] pods-any says no",
        "[pods-create] pods-create says no",
    ]
    assert server.validate(policy, sent(POD, "UPDATE", ("", "pods")), POD) == ["[pods-any] pods-any says no"]
    # kubectl debug: pods/ephemeralcontainers is pods-any's (a Pod rule matching UPDATE), not pods-create's
    assert server.validate(policy, sent(POD, "UPDATE", ("", "pods"), "ephemeralcontainers"), POD) == [
        "[pods-any] pods-any says no"
    ]


def test_a_gate_tells_resources_apart(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        rule("on-pods", "false", kinds="[Pod]", operations="[CREATE]"),
        rule("on-deployments", "false", kinds="[Deployment]", operations="[CREATE]"),
    )
    (policy,) = validating(export(ruleset).objects)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    server = Apiserver()
    assert server.validate(policy, sent(POD, "CREATE", ("", "pods")), POD) == ["[on-pods] on-pods says no"]
    assert server.validate(policy, sent(deployment, "CREATE", ("apps", "deployments")), deployment) == [
        "[on-deployments] on-deployments says no"
    ]


def test_variables_are_renamed_per_rule_outside_string_literals() -> None:
    text = "variables.targets.all(t, t.name != 'variables.targets' && x.variables.targets) // variables.targets"
    renamed = rename_variables(text, {"targets": "a_targets"})
    assert renamed == (
        "variables.a_targets.all(t, t.name != 'variables.targets' && x.variables.targets) // variables.targets"
    )
    assert rename_variables("variables . params.max", {"params": "b_params"}) == "variables . b_params.max"
    assert rename_variables("variables.other", {"targets": "a_targets"}) == "variables.other"


def test_merged_variables_never_clash(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        rule("one", "object.metadata.name.size() < params.limit").replace(
            "  validate:", "  params: {limit: 1}\n  validate:"
        ),
        rule("two", "object.metadata.name.size() < params.limit").replace(
            "  validate:", "  params: {limit: 2}\n  validate:"
        ),
    )
    (policy,) = validating(export(ruleset).objects)
    names = [v["name"] for v in policy["spec"]["variables"]]
    assert len(names) == len(set(names)) and {"one_params", "two_params"} <= set(names)
    one, two = policy["spec"]["validations"]
    assert "variables.one_params" in one["expression"] and "variables.two_params" in two["expression"]
    pod = {**POD, "metadata": {"name": "pp"}}  # 2 characters: over both limits
    assert Apiserver().validate(policy, sent(pod, "CREATE", ("", "pods")), pod) == [
        "[one] one says no",
        "[two] two says no",
    ]


def test_a_message_expression_names_the_rule(tmp_path: Path) -> None:
    text = rule("named", "false").replace(
        '    message: "named says no"', "    messageExpression: \"'no: ' + object.metadata.name\""
    )
    (policy,) = validating(export(load_rule_text(tmp_path, text, rule("other"))).objects)
    validation = policy["spec"]["validations"][0]
    assert validation["reason"] == "Forbidden"
    pod = {**POD, "metadata": {"name": "named"}}
    assert Apiserver().validate(policy, sent(pod, "CREATE", ("", "pods")), pod) == ["[named] no: named"]


@pytest.mark.parametrize("budget", [10_000_000, 1])
def test_a_group_over_the_budget_is_split_in_file_order(tmp_path: Path, budget: int) -> None:
    result = export(load_rule_text(tmp_path, rule("a"), rule("b"), rule("c")))
    objects = merge(result.rules, budget=budget)
    held = [rules_of(p) for p in validating(objects)]
    names = [p["metadata"]["name"] for p in validating(objects)]
    if budget > 1:
        assert held == [["a", "b", "c"]] and names == ["gpu-webhook-deny-fail"]
    else:  # each rule alone is over it: one policy each, in order (a rule alone is checked by export)
        assert held == [["a"], ["b"], ["c"]]
        assert names == ["gpu-webhook-deny-fail", "gpu-webhook-deny-fail-2", "gpu-webhook-deny-fail-3"]


def test_a_split_keeps_each_part_under_the_budget(tmp_path: Path) -> None:
    result = export(load_rule_text(tmp_path, *(rule(n) for n in "abcde")))
    costs = [int(r.validating["metadata"]["annotations"]["gpu-webhook.io/estimated-cel-cost"]) for r in result.rules]
    budget = costs[0] + costs[1] + costs[2] // 2  # two rules fit, a third does not
    policies = validating(merge(result.rules, budget=budget))
    assert [rules_of(p) for p in policies] == [["a", "b"], ["c", "d"], ["e"]]
    assert all(int(p["metadata"]["annotations"]["gpu-webhook.io/estimated-cel-cost"]) <= budget for p in policies)
