"""Many rules' ValidatingAdmissionPolicies -> few: one policy and one binding per group of rules.

The apiserver pays per policy, not per expression: each policy that selects a request converts the
object to unstructured for its CEL (k8s.io/apiserver admission/plugin/cel condition.go ForInput ->
newActivation -> objectToResolveVal), so the export merges the validating rules that can share a
binding. Group key: the binding's validationActions and the policy's failurePolicy,
namespaceSelector, objectSelector and matchPolicy (what a merged policy cannot hold per rule).

Within a group:
- `matchConstraints.resourceRules` is the union of the rules'; a rule that covers less than the union
  gets a gate in its validation and message: `!(<its operations and resources>) || (<its expression>)`,
  written with `request.operation`, `request.resource.group`, `request.resource.resource` and
  `request.subResource` (the AdmissionRequest the policy sees: condition.go CreateAdmissionRequest,
  Resource being the GVR the matcher found equivalent, with `apiVersions: ["*"]` the request's own);
- each rule's variables are renamed `<rule>_<name>` (a rule's variable with the same text as one already
  in the policy, after renaming, is that one: `targets` computed once for all the rules that read it).
  The apiserver evaluates variables lazily: `variables` is a lazy.MapValue whose entries run on first
  read and are cached for the evaluation (cel/composition.go compositionContext.Variables), so a
  rule's variables run only when its validation or message reads them, never for a request its gate
  rejects;
- the runtime budget celconfig.RuntimeCELCostBudget (10,000,000) is one per policy evaluation: the
  validations start with it, each variable's cost is taken from it when it runs
  (cel/activation.go Evaluate: compositionCtx.GetAndResetCost), and the messages get what is left
  (policy/validating/validator.go Validate: messageFilter.ForInput(..., remainingBudget)); running
  out errs every validation of the policy. So a group whose estimated cost (cost.py) would pass
  POLICY_BUDGET is split, in file order;
- a denial names the policy ("ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
  request: <message>", policy/validating/dispatcher.go), so every message starts with `[<rule>] `,
  as the webhook's own denial names a rule (engine Decision.denial_message).

MutatingAdmissionPolicies stay one per rule: their mutations run in order and are reinvoked per
policy (docs/native.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from webhook.cel import celsyntax

from .cost import POLICY_BUDGET, estimate
from .nativecel import string_literal
from .policies import COST_ANNOTATION, LABELS, RULE_LABEL, NativeRule
from .versions import GROUP

RULES_ANNOTATION = "gpu-webhook.io/rules"
VAP = "ValidatingAdmissionPolicy"
VAP_BINDING = "ValidatingAdmissionPolicyBinding"
# `variables.NAME` where `variables` is the root identifier (not a field `x.variables`)
_VARIABLE_REFERENCE = re.compile(r"(?<![\w.])variables(\s*\.\s*)([A-Za-z_][A-Za-z0-9_]*)")

Coverage = frozenset[tuple[str, str, str, str]]  # (operation, group, resource, subresource)


def rules_of(obj: dict[str, Any]) -> list[str]:
    """The rules an exported object runs: a merged one's annotation, or a per-rule one's label."""
    metadata = obj.get("metadata") or {}
    merged = (metadata.get("annotations") or {}).get(RULES_ANNOTATION)
    if merged:
        return merged.split(",")
    rule = (metadata.get("labels") or {}).get(RULE_LABEL)
    return [rule] if rule else []


def rename_variables(text: str, names: dict[str, str]) -> str:
    """`variables.a` -> `variables.<names[a]>` outside string literals and comments; other names kept."""
    blank = celsyntax.blank(text)
    out: list[str] = []
    position = 0
    for match in _VARIABLE_REFERENCE.finditer(blank):
        new = names.get(match.group(2))
        if new is None:
            continue
        out += [text[position : match.start(2)], new]
        position = match.end(2)
    return "".join(out) + text[position:]


def variable_prefix(rule: str) -> str:
    """The CEL identifier that starts a rule's variable names in a merged policy."""
    ident = re.sub(r"[^A-Za-z0-9]", "_", rule)
    return ident if ident[:1].isalpha() else f"r_{ident}"


def coverage(resource_rules: Sequence[dict[str, Any]]) -> Coverage:
    """Every (operation, group, resource, subresource) the resourceRules select."""
    out = set()
    for entry in resource_rules:
        for operation in entry["operations"]:
            for group in entry["apiGroups"]:
                for resource in entry["resources"]:
                    main, _, sub = resource.partition("/")
                    out.add((operation, group, main, sub))
    return frozenset(out)


def resource_rules(covered: Coverage) -> list[dict[str, Any]]:
    """The resourceRules of a coverage: one per group and set of operations, sorted."""
    by_resource: dict[tuple[str, str], set[str]] = {}
    for operation, group, main, sub in covered:
        by_resource.setdefault((group, f"{main}/{sub}" if sub else main), set()).add(operation)
    by_rule: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), operations in by_resource.items():
        by_rule.setdefault((group, tuple(sorted(operations))), []).append(resource)
    return [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": list(operations), "resources": sorted(resources)}
        for (group, operations), resources in sorted(by_rule.items())
    ]


def gate(covered: Coverage) -> str:
    """CEL: the request is one of `covered` (an operation on a resource or subresource of a group)."""
    by_selection: dict[tuple[tuple[str, ...], str, str], list[str]] = {}
    operations_of: dict[tuple[str, str, str], set[str]] = {}
    for operation, group, main, sub in covered:
        operations_of.setdefault((group, main, sub), set()).add(operation)
    for (group, main, sub), ops in operations_of.items():
        by_selection.setdefault((tuple(sorted(ops)), group, sub), []).append(main)
    terms = []
    for (operations, group, sub), mains in sorted(by_selection.items()):
        names = sorted(mains)
        resource = (
            f"request.resource.resource == {string_literal(names[0])}"
            if len(names) == 1
            else f"request.resource.resource in [{', '.join(map(string_literal, names))}]"
        )
        operation = (
            f"request.operation == {string_literal(operations[0])}"
            if len(operations) == 1
            else f"request.operation in [{', '.join(map(string_literal, operations))}]"
        )
        # AdmissionRequest.subResource is `json:"subResource,omitempty"` (k8s.io/api admission/v1 types.go):
        # the request of a main resource has no such key
        subresource = (
            f"has(request.subResource) && request.subResource == {string_literal(sub)}"
            if sub
            else "!has(request.subResource) || request.subResource == ''"
        )
        terms.append(
            f"({operation} && request.resource.group == {string_literal(group)} && ({subresource}) && {resource})"
        )
    return " || ".join(terms) or "false"


def member_gate(own: Coverage, covered: Coverage) -> str | None:
    """CEL true when a request the merged policy selects (one of `covered`) is one of the rule's own:
    that, or not one of the others (the request matched the policy's resourceRules), the shorter;
    None when the rule covers the whole group."""
    if own == covered:
        return None
    inside, outside = gate(own), gate(covered - own)
    return inside if len(inside) <= len(outside) + 3 else f"!({outside})"


class Member:
    """One rule's validating policy and binding, as the per-rule export wrote them."""

    def __init__(self, native: NativeRule) -> None:
        assert native.validating is not None
        self.native = native
        self.policy = native.validating
        self.binding = next(o for o in native.objects if o["kind"] == VAP_BINDING)
        spec = self.policy["spec"]
        constraints = spec["matchConstraints"]
        self.coverage = coverage(constraints["resourceRules"])
        self.key = json.dumps(
            {
                "validationActions": self.binding["spec"]["validationActions"],
                "failurePolicy": spec.get("failurePolicy", "Fail"),
                **{
                    k: constraints[k]
                    for k in ("namespaceSelector", "objectSelector", "matchPolicy")
                    if k in constraints
                },
            },
            sort_keys=True,
        )
        self.cost = int(self.policy["metadata"]["annotations"][COST_ANNOTATION])


def merge(
    rules: Sequence[NativeRule], budget: int = POLICY_BUDGET, cost: Callable[[str], int] = estimate
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies and bindings of `rules` (in their order), merged by group.

    Sets each rule's `policy` to the name of the policy that holds its validation.
    """
    groups: dict[str, list[Member]] = {}
    for native in rules:
        if native.validating is not None:
            member = Member(native)
            groups.setdefault(member.key, []).append(member)
    objects: list[dict[str, Any]] = []
    for members in groups.values():
        covered = frozenset().union(*(m.coverage for m in members))
        # file order; a new part when the estimate would pass the budget (a gated rule costs its gate more)
        parts: list[list[Member]] = [[]]
        spent = 0
        for member in members:
            guard = member_gate(member.coverage, covered)
            extra = member.cost + (2 * cost(guard) if guard else 0)
            if parts[-1] and spent + extra > budget:
                parts.append([])
                spent = 0
            parts[-1].append(member)
            spent += extra
        base = group_name(members[0])
        for index, part in enumerate(parts):
            name = base if index == 0 else f"{base}-{index + 1}"
            objects += _merged(name, part, cost)
    return objects


def group_name(member: Member) -> str:
    """gpu-webhook-<action>-<failurePolicy>, and a hash of the selectors when the group has any."""
    actions = "-".join(a.lower() for a in member.binding["spec"]["validationActions"])
    name = f"gpu-webhook-{actions}-{member.policy['spec'].get('failurePolicy', 'Fail').lower()}"
    constraints = member.policy["spec"]["matchConstraints"]
    selectors = {k: constraints[k] for k in ("namespaceSelector", "objectSelector", "matchPolicy") if k in constraints}
    if selectors:
        name += "-" + hashlib.sha256(json.dumps(selectors, sort_keys=True).encode()).hexdigest()[:6]
    return name


def _merged(name: str, members: list[Member], cost: Callable[[str], int]) -> list[dict[str, Any]]:
    covered = frozenset().union(*(m.coverage for m in members))
    variables: list[dict[str, Any]] = []
    named: dict[str, str] = {}  # a variable's text (renamed) -> its name in the merged policy
    validations: list[dict[str, Any]] = []
    for member in members:
        rule = member.native.rule
        names: dict[str, str] = {}
        for variable in member.policy["spec"].get("variables", []):
            text = rename_variables(variable["expression"], names)
            if text not in named:
                named[text] = f"{variable_prefix(rule)}_{variable['name']}"
                variables.append({"name": named[text], "expression": text})
            names[variable["name"]] = named[text]
        guard = member_gate(member.coverage, covered)
        for validation in member.policy["spec"]["validations"]:
            validations.append(_validation(rule, validation, names, guard))
        member.native.policy = name
    constraints = copy.deepcopy(members[0].policy["spec"]["matchConstraints"])
    constraints["resourceRules"] = resource_rules(covered)
    total = sum(cost(v["expression"]) for v in variables) + sum(
        cost(v[k]) for v in validations for k in ("expression", "messageExpression") if k in v
    )
    rules = [m.native.rule for m in members]
    metadata = {
        "name": name,
        "labels": dict(LABELS),
        "annotations": {RULES_ANNOTATION: ",".join(rules), COST_ANNOTATION: str(total)},
    }
    version = members[0].policy["apiVersion"].split("/")[1]
    policy = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": VAP,
        "metadata": metadata,
        "spec": {
            "failurePolicy": members[0].policy["spec"].get("failurePolicy", "Fail"),
            "matchConstraints": constraints,
            "variables": variables,
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": VAP_BINDING,
        "metadata": {"name": name, "labels": dict(LABELS), "annotations": {RULES_ANNOTATION: ",".join(rules)}},
        "spec": {"policyName": name, "validationActions": list(members[0].binding["spec"]["validationActions"])},
    }
    return [policy, binding]


def _validation(rule: str, validation: dict[str, Any], names: dict[str, str], guard: str | None) -> dict[str, Any]:
    """The rule's validation in the merged policy: its variables renamed, gated, its messages naming it."""
    named = string_literal(f"[{rule}] ")
    expression = rename_variables(validation["expression"], names)
    out: dict[str, Any] = {"expression": f"!({guard}) || ({expression})" if guard else expression}
    if "messageExpression" in validation:
        message = f"{named} + ({rename_variables(validation['messageExpression'], names)})"
        # the apiserver evaluates every messageExpression, failing or not: a gated one reads nothing
        out["messageExpression"] = f"({guard}) ? {message} : ''" if guard else message
    if "message" in validation:
        out["message"] = f"[{rule}] {validation['message']}"
    elif "messageExpression" not in validation:  # the apiserver's default names the expression: name the rule
        out["message"] = f"[{rule}] failed expression: {validation['expression']}"
    out["reason"] = validation.get("reason", "Forbidden")
    return out
