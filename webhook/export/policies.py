"""One rule -> a ValidatingAdmissionPolicy and/or a MutatingAdmissionPolicy, each with its binding.

The mapping (docs/native.md has the user's view):
- kinds: one policy per rule; `matchConstraints.resourceRules` lists every kind it covers
  (autogen expanded with the engine's workload table), and `variables.targets` dispatches
  on `object.kind` to the same targets the engine evaluates (targets.py);
- namespaces include/exclude and namespaceSelector -> `matchConstraints.namespaceSelector`
  (`kubernetes.io/metadata.name` is set on every namespace by the apiserver); objectSelector
  -> `matchConstraints.objectSelector` (object targets only: for pod templates the engine
  reads the template's labels, which a selector cannot);
- `gpu:` and `condition` are per target, so they guard each target inside the expressions
  (a matchCondition sees only the whole object);
- params -> `variables.params`, a constant; action -> the binding's validationActions;
  failurePolicy -> failurePolicy; messages -> messageExpression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.cel import CompiledExpression
from webhook.engine.model import LabelSelector, Rule
from webhook.engine.resources import Accelerators
from webhook.engine.workloads import WORKLOADS

from .celenv import CompileError, NativeEnvironment
from .cost import PER_CALL_LIMIT, POLICY_BUDGET, estimate
from .mutations import needs_pod_spec_paths, patches
from .nativecel import LOOP, NotNative, Translator, _replace_identifier, native_literal, references, string_literal
from .targets import MULTI_TEMPLATE, KindTarget, api_of, targets_expression
from .versions import GROUP, Release

LABELS = {"app.kubernetes.io/managed-by": "gpu-webhook"}
RULE_LABEL = "gpu-webhook.io/rule"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
NATIVE_OPERATIONS = frozenset({"CREATE", "UPDATE"})
# cluster context the engine reads from its caches (AdmissionInput.priority_classes,
# resource_claims): a native policy has no such data (params are constants, no lookups)
CONTEXT_VARIABLES = ("priorityClasses", "defaultPriorityClass", "deviceClaims")
# what counts accelerators: the engine adds the devices of the pod's DRA claims, resolved against
# the namespace's ResourceClaims / ResourceClaimTemplates (resources.py), and takes an unresolved
# claim for an accelerator; the apiserver's CEL sees only the object, so it cannot count the same
GPU_COUNTING = ("targetGpuCount", "containerGpus")
_GPU_HELPERS = re.compile(r"\b(gpuCount|containerGpuCount|targetGpuCount)\b")
# --claims: what the export does with rules that count accelerators
#   refuse      (default) they stay with the webhook, which resolves the pod's DRA claims
#   unresolved  exported as the engine decides without claim context (AdmissionInput.resource_claims
#               and resource_claim_templates None): every claim is unresolved, which resources.py
#               takes for an accelerator (`gpu: true` matches a pod with any resourceClaims entry)
#               that adds 0 devices to the counts (targetGpuCount, gpuCount, containerGpuCount)
CLAIMS_REFUSE = "refuse"
CLAIMS_UNRESOLVED = "unresolved"
CLAIMS_MODES = (CLAIMS_REFUSE, CLAIMS_UNRESOLVED)


@dataclass(slots=True)
class NativeRule:
    """What one rule became: its objects, and the CEL the equivalence tests run."""

    rule: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    validating: dict[str, Any] | None = None  # the ValidatingAdmissionPolicy
    mutating: dict[str, Any] | None = None  # the MutatingAdmissionPolicy
    action: str = "Deny"
    note: str | None = None  # how the export is narrower than the rule (then the webhook keeps it too)

    @property
    def kinds(self) -> list[str]:
        return [o["kind"] for o in self.objects if not o["kind"].endswith("Binding")]


def ratchets(rule: Rule) -> bool:
    """The engine ratchets this rule on UPDATE (evaluate.py _ratchets): Deny and spec.ratcheting."""
    return rule.ratcheting and str(rule.action) == "Deny"


def _texts(rule: Rule) -> list[str]:
    """Every CEL text of the rule, as its author wrote it."""
    found: list[CompiledExpression | None] = [rule.match.condition]
    if rule.validate is not None:
        found += [rule.validate.expression, rule.validate.message_expression]
    for mutation in rule.mutations:
        found.append(getattr(mutation, "expression", None))
        found += [e for _, e in getattr(mutation, "expressions", ())]
    return [e.text for e in found if isinstance(e, CompiledExpression)]


def counts_accelerators(rule: Rule) -> bool:
    """Whether the rule's decision depends on the pod's accelerators (gpu: or a count helper)."""
    return (
        rule.match.gpu is not None
        or bool(set(GPU_COUNTING) & rule.references)
        or any(_GPU_HELPERS.search(text) for text in _texts(rule))
    )


def context_refusal(rule: Rule, claims: str = CLAIMS_REFUSE) -> str | None:
    """Why the rule needs data a native policy cannot have, or None.

    With claims=unresolved the accelerator-counting rules are exported with the engine's
    semantics for a door without claim context; rules that read the context itself stay refused.
    """
    context = sorted(set(CONTEXT_VARIABLES) & rule.references)
    if context:
        return (
            f"reads {', '.join(context)}: cluster context the webhook reads from its caches; "
            "an admission policy sees only the object, its namespace and the request"
        )
    if claims != CLAIMS_UNRESOLVED and counts_accelerators(rule):
        what = (
            f"gpu: {str(rule.match.gpu).lower()} depends on"
            if rule.match.gpu is not None
            else "its accelerator count (targetGpuCount, gpuCount, containerGpuCount) includes"
        )
        return (
            f"{what} the pod's DRA claims (devices of ResourceClaims and templates; an unresolved claim is an "
            "accelerator), which the apiserver's CEL cannot read; `--claims unresolved` exports it as the engine "
            "decides without claim context"
        )
    return None


def modelled_ratcheting(rule: Rule) -> bool:
    """Whether the policy can ratchet as the engine does: a rule whose expression gives its list of
    messages, or a bool with a static or default message, which does not read oldObject (null when the engine evaluates the old object), under
    failurePolicy Fail (the engine takes an old object it cannot evaluate for one without messages;
    the policy errs there, and Fail denies as the engine does), without objectSelector."""
    validation = rule.validate
    return (
        validation is not None
        and (
            validation.expression.result_type.startswith("LIST")
            # a bool rule's message must be the same for both objects: static, or the default one
            or (validation.expression.result_type == "BOOL" and validation.message_expression is None)
        )
        and "oldObject" not in rule.references
        and rule.failure_policy == "Fail"
        and rule.match.object_selector is None
    )


def _old_messages(value: str, match: str) -> str:
    """Per target of the old object: its description and the messages the rule gives it (none when it
    does not match), computed once per admission (a policy variable)."""
    on_old = _replace_identifier(_replace_identifier(value, LOOP, "gwU"), "object", "oldObject")
    match_old = _replace_identifier(_replace_identifier(match, LOOP, "gwU"), "object", "oldObject") if match else ""
    given = f"({match_old}) ? ({on_old}) : []" if match_old else f"({on_old})"
    return f"variables.oldTargets.map(gwU, {{'description': dyn(gwU.description), 'messages': dyn({given})}})"


def _old_failing(value: str, match: str) -> str:
    """Descriptions of the old object's targets that a bool rule fails (each gave the same message)."""
    on_old = _replace_identifier(_replace_identifier(value, LOOP, "gwU"), "object", "oldObject")
    match_old = _replace_identifier(_replace_identifier(match, LOOP, "gwU"), "object", "oldObject") if match else ""
    failing = f"({match_old}) && !({on_old})" if match_old else f"!({on_old})"
    return f"variables.oldTargets.filter(gwU, {failing}).map(gwU, gwU.description)"


def _fresh_messages(value: str) -> str:
    """The target's messages that the old object's target of the same description did not give
    (evaluate.py _old_messages; descriptions name a target uniquely, as names are unique)."""
    return (
        f"({value}).filter(gwN, !variables.oldMessages.exists(gwO, "
        f"gwO.description == {LOOP}.description && gwN in gwO.messages))"
    )


def policy_name(rule: str) -> str:
    return f"gpu-webhook-{rule}"


def expand_kinds(rule: Rule) -> list[KindTarget]:
    kinds = rule.match.kinds
    if "*" in kinds:
        raise NotNative("matches every kind (kinds: ['*']); a policy must name its resources")
    out = []
    for kind in sorted(kinds):
        group, plural = api_of(kind)
        out.append(KindTarget(kind, group, plural, templates=False))
    if "Pod" in kinds and rule.autogen:
        for kind in sorted(set(WORKLOADS) - set(kinds)):
            group, plural = api_of(kind)
            out.append(KindTarget(kind, group, plural, templates=True))
    return out


def match_constraints(rule: Rule, kinds: list[KindTarget], only: set[str] | None = None) -> dict[str, Any]:
    operations = sorted(rule.match.operations if only is None else only)
    by_group: dict[str, list[str]] = {}
    for entry in kinds:
        by_group.setdefault(entry.group, []).append(entry.plural)
        if entry.kind == "Pod" and not entry.templates and "UPDATE" in operations:
            # the engine evaluates pods/ephemeralcontainers UPDATEs (kubectl debug) with the Pod as
            # object (evaluate.py EVALUATED_SUBRESOURCES); a resourceRule names a subresource apart
            by_group[entry.group].append(f"{entry.plural}/ephemeralcontainers")
    constraints: dict[str, Any] = {
        "resourceRules": [
            {"apiGroups": [group], "apiVersions": ["*"], "operations": operations, "resources": sorted(plurals)}
            for group, plurals in sorted(by_group.items())
        ]
    }
    selector = _selector(rule.match.namespace_selector)
    expressions = selector.setdefault("matchExpressions", [])
    if rule.match.namespaces_include is not None:
        expressions.append(
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(rule.match.namespaces_include)}
        )
    if rule.match.namespaces_exclude:
        expressions.append(
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": sorted(rule.match.namespaces_exclude)}
        )
    if not expressions:
        del selector["matchExpressions"]
    if selector:
        constraints["namespaceSelector"] = selector
    if rule.match.object_selector is not None:
        constraints["objectSelector"] = _selector(rule.match.object_selector)
    return constraints


COST_ANNOTATION = "gpu-webhook.io/estimated-cel-cost"


def _with_cost(metadata: dict[str, Any], cost: int) -> dict[str, Any]:
    """The policy's metadata with its static cost estimate (cost.py) for the operator to see."""
    annotations = {**metadata.get("annotations", {}), COST_ANNOTATION: str(cost)}
    return {**metadata, "annotations": annotations}


def _selector(selector: LabelSelector | None) -> dict[str, Any]:
    if selector is None:
        return {}
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [
            {"key": key, "operator": op, **({"values": sorted(values)} if op in ("In", "NotIn") else {})}
            for key, op, values in selector.match_expressions
        ]
    return out


class RuleExporter:
    """Builds the native objects of one rule, or raises NotNative saying why it cannot."""

    def __init__(
        self, accelerators: Accelerators, release: Release, env: NativeEnvironment, claims: str = CLAIMS_REFUSE
    ) -> None:
        if claims not in CLAIMS_MODES:
            raise ValueError(f"--claims {claims!r}: expected one of {', '.join(CLAIMS_MODES)}")
        self.translator = Translator(accelerators)
        self.release = release
        self.env = env
        self.claims = claims

    def export(self, rule: Rule, want_vap: bool, want_map: bool) -> NativeRule:
        if rule.match.operations - NATIVE_OPERATIONS:
            extra = ", ".join(sorted(rule.match.operations - NATIVE_OPERATIONS))
            raise NotNative(f"matches {extra}; only CREATE and UPDATE rules are exported")
        if rule.mutations and not want_map:
            raise NotNative("mutates, and --target vap exports validation only")
        if rule.validate is not None and not want_vap:
            raise NotNative("validates, and --target map exports mutation only")
        if rule.mutations and self.release.map_version() is None:
            raise NotNative(f"mutates, and Kubernetes {self.release} has no MutatingAdmissionPolicy (1.32+)")
        refusal = context_refusal(rule, self.claims)
        if refusal is not None:
            raise NotNative(refusal)
        operations = set(rule.match.operations)
        note = None
        ratchet = rule.validate is not None and ratchets(rule) and "UPDATE" in operations
        if ratchet and not modelled_ratcheting(rule):
            if rule.mutations:
                raise NotNative(
                    "a Deny rule that ratchets on UPDATE (spec.ratcheting) and mutates: "
                    "its policies cannot be narrowed to CREATE apart"
                )
            operations.discard("UPDATE")
            note = (
                "CREATE only: on UPDATE the engine ratchets (denies only messages the old object did not give), "
                "which the policy does not model; the webhook keeps the rule"
            )
            if not operations:
                raise NotNative(note)
        kinds = expand_kinds(rule)
        if rule.match.object_selector is not None and any(k.templates for k in kinds):
            raise NotNative("objectSelector on pod templates: the engine reads the template's labels, a policy cannot")
        match = self._match(rule)
        native = NativeRule(rule=rule.name, action=str(rule.action), note=note)
        name = policy_name(rule.name)
        constraints = match_constraints(rule, kinds, operations)
        metadata: dict[str, Any] = {"name": name, "labels": {**LABELS, RULE_LABEL: rule.name}}
        if rule.description:
            metadata["annotations"] = {"gpu-webhook.io/description": rule.description}
        if rule.mutations:
            native.mutating = self._mutating(rule, kinds, match, constraints, metadata)
            version = self.release.map_version()
            native.objects += [
                native.mutating,
                {
                    "apiVersion": f"{GROUP}/{version}",
                    "kind": "MutatingAdmissionPolicyBinding",
                    "metadata": {"name": name, "labels": metadata["labels"]},
                    "spec": {"policyName": name},
                },
            ]
        if rule.validate is not None:
            native.validating = self._validating(rule, kinds, match, constraints, metadata, ratchet and note is None)
            native.objects += [
                native.validating,
                {
                    "apiVersion": f"{GROUP}/{self.release.vap_version()}",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": name, "labels": metadata["labels"]},
                    "spec": {"policyName": name, "validationActions": [str(rule.action)]},
                },
            ]
        return native

    # -- pieces ----------------------------------------------------------------------------------
    def _match(self, rule: Rule) -> str:
        parts = []
        if rule.match.gpu is not None:
            # evaluate.py: has_gpus = facts.gpus > 0 or any claim unresolved; this export is only
            # reached for --claims unresolved, where every claim is (targets.py `claimed`)
            parts.append(
                f"({LOOP}.gpus > 0 || {LOOP}.claimed)" if rule.match.gpu else f"({LOOP}.gpus == 0 && !{LOOP}.claimed)"
            )
        if rule.match.condition is not None:
            condition = self.translator.translate(rule.match.condition.text)
            parts.append(f"({condition})" if rule.match.condition.result_type == "BOOL" else f"(({condition}) == true)")
        return " && ".join(parts)

    def _variables(
        self,
        rule: Rule,
        expressions: list[str],
        kinds: list[KindTarget],
        with_paths: bool,
        old: tuple[str, str] | None = None,
    ) -> list:
        fields = set().union(*(references(e) for e in expressions))
        if "containers" in fields and any(not k.templates and k.kind in MULTI_TEMPLATE for k in kinds):
            raise NotNative("reads `containers` of a whole multi-template object; the apiserver's CEL cannot flatten")
        variables = []
        if any("variables.params" in e for e in expressions):
            variables.append({"name": "params", "expression": native_literal(dict(rule.params))})
        targets = targets_expression(kinds, fields, self.translator, with_paths)
        variables.append({"name": "targets", "expression": targets})
        if old is not None:  # the same targets of the old object (UPDATE) and their messages, for ratcheting
            on_old = _replace_identifier(targets, "object", "oldObject")
            variables.append({"name": "oldTargets", "expression": f"oldObject == null ? [] : {on_old}"})
            variables.append({"name": old[0], "expression": old[1]})
        return variables

    def _validating(
        self,
        rule: Rule,
        kinds: list[KindTarget],
        match: str,
        constraints: dict[str, Any],
        metadata: dict[str, Any],
        ratchet: bool = False,
    ) -> dict[str, Any]:
        validation = rule.validate
        assert validation is not None
        value = self.translator.translate(validation.expression.text)
        result = validation.expression.result_type
        # the message of a target whose expression gave false (engine: messageExpression, message, default)
        if validation.message_expression is not None:
            on_false: str | None = f"({self.translator.translate(validation.message_expression.text)})"
        elif validation.message:
            on_false = string_literal(validation.message)
        else:
            on_false = f"{LOOP}.description + {string_literal(' violates ' + rule.name)}"
        message = None
        if result == "BOOL":
            ok, single = f"({value})", on_false
            if ratchet:  # one message per failing target, the same on the old target of that description
                ok = f"({value} || variables.oldFailing.exists(gwO, gwO == {LOOP}.description))"
            if validation.message_expression is None and validation.message:
                single, message = None, validation.message  # a static message needs no CEL
        elif result.startswith("LIST") and ratchet:
            fresh = _fresh_messages(value)
            ok, single = f"size({fresh}) == 0", f"({fresh}).join('; ')"
        elif result.startswith("LIST"):
            ok, single = f"size({value}) == 0", f"({value}).join('; ')"
        else:  # DYN: a bool or a list of messages, known only when it runs
            ok = f"(type({value}) == bool ? ({value}) : size({value}) == 0)"
            single = f"(type({value}) == bool ? {on_false} : ({value}).join('; '))"
        guard = f"({match}) ? {ok} : true" if match else ok
        entry: dict[str, Any] = {"expression": f"variables.targets.all({LOOP}, {guard})", "reason": "Forbidden"}
        if single is not None and result.startswith("LIST"):
            # each target's messages computed once: the matching targets' lists, the empty ones dropped
            matching = f"variables.targets.filter({LOOP}, {match})" if match else "variables.targets"
            entry["messageExpression"] = f"{matching}.map({LOOP}, {single}).filter(gwM, gwM != '').join('; ')"
        elif single is not None:
            failing = f"({match}) && !({ok})" if match else f"!({ok})"
            entry["messageExpression"] = f"variables.targets.filter({LOOP}, {failing}).map({LOOP}, {single}).join('; ')"
        if message is not None:
            entry["message"] = message
        expressions = [entry["expression"], entry.get("messageExpression", "")]
        old = None
        if ratchet:
            old = (
                ("oldMessages", _old_messages(value, match))
                if result.startswith("LIST")
                else ("oldFailing", _old_failing(value, match))
            )
        needs = [*expressions, *([old[1]] if old else [])]
        variables = self._variables(rule, needs, kinds, with_paths=False, old=old)
        cost = self._check([v["expression"] for v in variables] + [e for e in expressions if e])
        spec: dict[str, Any] = {
            "failurePolicy": rule.failure_policy,
            "matchConstraints": constraints,
            "variables": variables,
            "validations": [entry],
        }
        return {
            "apiVersion": f"{GROUP}/{self.release.vap_version()}",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": _with_cost(metadata, cost),
            "spec": spec,
        }

    def _mutating(
        self, rule: Rule, kinds: list[KindTarget], match: str, constraints: dict[str, Any], metadata: dict[str, Any]
    ) -> dict[str, Any]:
        if needs_pod_spec_paths(rule.mutations) and any(not k.templates and k.kind != "Pod" for k in kinds):
            raise NotNative("edits the pod specs of a whole workload object; only Pods and pod templates are exported")
        # Mutations read the object as the previous ones left it, so each inlines its targets
        # (a policy variable is computed once per policy invocation, before the first mutation).
        probe = [patches(m, self.translator, "gwTARGETS", match) for m in rule.mutations]
        flat = [e for group in probe for e in group]
        fields = set().union(*(references(e) for e in flat))
        targets = targets_expression(kinds, fields, self.translator, with_paths=True)
        expressions = [e.replace("gwTARGETS", f"({targets})") for e in flat]
        variables = []
        if any("variables.params" in e for e in expressions):
            variables.append({"name": "params", "expression": native_literal(dict(rule.params))})
        cost = self._check([v["expression"] for v in variables] + expressions)
        return {
            "apiVersion": f"{GROUP}/{self.release.map_version()}",
            "kind": "MutatingAdmissionPolicy",
            "metadata": _with_cost(metadata, cost),
            "spec": {
                "failurePolicy": rule.failure_policy,
                "matchConstraints": constraints,
                **({"variables": variables} if variables else {}),
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": e}} for e in expressions],
                "reinvocationPolicy": "IfNeeded",
            },
        }

    def _check(self, expressions: list[str]) -> int:
        """Compile every expression as the apiserver would and bound its cost; the policy's estimated cost."""
        for expression in expressions:
            try:
                self.env.compile(expression)
            except CompileError as error:
                raise NotNative(f"the generated CEL does not compile in the apiserver's environment: {error}") from None
        costs = [estimate(e) for e in expressions]
        if max(costs) > PER_CALL_LIMIT:
            raise NotNative(
                f"an expression's estimated cost {max(costs):,} is over the apiserver's per-expression limit "
                f"{PER_CALL_LIMIT:,}"
            )
        if sum(costs) > POLICY_BUDGET:
            raise NotNative(
                f"estimated cost {sum(costs):,} is over the apiserver's per-policy budget {POLICY_BUDGET:,}"
            )
        return sum(costs)
