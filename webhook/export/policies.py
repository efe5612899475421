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

from webhook.engine import KIND_TABLE, Accelerators, CompiledExpression, LabelSelector, Rule

from .celenv import BOOL, LIST_OF_JSONPATCH, STRING, CompileError, NativeEnvironment
from .cost import PER_CALL_LIMIT, POLICY_BUDGET, estimate
from .mutations import json_patch, needs_pod_spec_paths, patches, select
from .nativecel import LOOP, NotNative, Translator, _replace_identifier, native_literal, references, string_literal
from .targets import KindTarget, api_of, follows_templates, multi_template, targets_expression
from .versions import GROUP, Release

LABELS = {"app.kubernetes.io/managed-by": "gpu-webhook"}
RULE_LABEL = "gpu-webhook.io/rule"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
NATIVE_OPERATIONS = frozenset({"CREATE", "UPDATE"})
# cluster context the engine reads from its caches (AdmissionInput.priority_classes,
# resource_claims): a native policy has no such data (params are constants, no lookups)
CONTEXT_VARIABLES = ("priorityClasses", "defaultPriorityClass", "deviceClaims", "kueueQueues")
# what counts accelerators: the engine adds the devices of the pod's DRA claims, resolved against
# the namespace's ResourceClaims / ResourceClaimTemplates (resources.py), and takes an unresolved
# claim for an accelerator; the apiserver's CEL sees only the object, so it cannot count the same
GPU_COUNTING = ("targetGpuCount", "targetWholeGpuCount", "containerGpus")
_GPU_HELPERS = re.compile(r"\b(gpuCount|containerGpuCount|targetGpuCount|targetWholeGpuCount)\b")
# --claims: what the export does with rules that count accelerators
#   refuse      (default) they stay with the webhook, which resolves the pod's DRA claims
#   unresolved  exported as the engine decides without claim context (AdmissionInput.resource_claims
#               and resource_claim_templates None): every claim is unresolved, which resources.py
#               takes for an accelerator (`gpu: true` matches a pod with any resourceClaims entry)
#               that adds 0 devices to the counts (targetGpuCount, gpuCount, containerGpuCount)
# a DRA claim or claim template under admission counts as an accelerator object when it names an
# accelerator DeviceClass (the engine's facts.py own_claims)
CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
CLAIMS_REFUSE = "refuse"
CLAIMS_UNRESOLVED = "unresolved"
CLAIMS_MODES = (CLAIMS_REFUSE, CLAIMS_UNRESOLVED)


@dataclass(slots=True)
class NativeRule:
    """What one rule became: its objects (one policy and binding of each kind it needs: the layout
    of `--policy-per-rule`; merge.py groups the validating ones), and the CEL the equivalence tests run."""

    rule: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    validating: dict[str, Any] | None = None  # the ValidatingAdmissionPolicy
    mutating: dict[str, Any] | None = None  # the MutatingAdmissionPolicy
    action: str = "Deny"
    note: str | None = None  # how the export is narrower than the rule (then the webhook keeps it too)
    policy: str | None = None  # the ValidatingAdmissionPolicy that holds its validation (merge.py, or its own)

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
        found += mutation.cel()
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
            "an admission policy sees only the object, its namespace and the request, so the webhook keeps the rule "
            "(nothing to do)"
        )
    if "allocatorEnv" in rule.references:
        return (
            "reads allocatorEnv: which device variables an annotation-marked GPU allocator (KAI Scheduler, or a "
            "GPUWebhookConfig gpuAllocators entry) wrote into a container, which the apiserver's CEL cannot tell; "
            "the webhook keeps the rule (nothing to do)"
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


# engine/ratcheting.py: on UPDATE a rule that ratchets acts on a target only when the update changed a
# field the rule reads or writes (Rule.inputs, paths from the object's root) or the target's own
# part (a pod template whole; a Pod's or a whole workload's pod specs). The policies compute whether
# an input changed (`allAct`) and else the descriptions of the targets whose own part did (`acting`;
# descriptions name targets uniquely, as ratcheting already relies on); a target acts when either
# says so. Variables have no jsonpatch.escapeKey (v1.36.2: only a MutatingAdmissionPolicy's mutations
# have the JSONPatch library), so their target paths are keys, not pointers.
ACTS = f"(variables.allAct || {LOOP}.description in variables.acting)"
# A MutatingAdmissionPolicy evaluates its variables for each mutation, on the object as the previous
# mutations left it (verified on v1.36.2: a variable read by the second mutation sees the first one's
# patch). The engine decides once, before the rule's first mutation; after a mutation that sets an
# input back to its old value (gpu-cost-labels resetting a tenant's `team` label) the later ones would
# see no change. So a gated policy decides in a first mutation, on the object as it received it, and
# writes the decision into an annotation of the object that its mutations read and its last mutation
# removes (an erring mutation under Ignore is skipped, the rest run: verified; under Fail nothing is
# stored). Value: '+' when the annotation map was made for it ('-' otherwise), then '*' (every target)
# or the acting targets' descriptions, one per line. Only on UPDATE: CREATE always acts.
GATE_ANNOTATION = "gpu-webhook.io/export-gate"
_GATE_KEY = string_literal(GATE_ANNOTATION)
_GATE_POINTER = string_literal("/metadata/annotations/" + GATE_ANNOTATION.replace("~", "~0").replace("/", "~1"))
_GATED = f"has(object.metadata.annotations) && {_GATE_KEY} in object.metadata.annotations"
_GATE_VALUE = f"object.metadata.annotations[{_GATE_KEY}]"
MARKED_ACTS = (
    f"(request.operation != 'UPDATE' || ({_GATED} && ({_GATE_VALUE}.substring(1) == '*' || "
    f"{LOOP}.description in {_GATE_VALUE}.substring(1).split('\\n'))))"
)


def gate_mutations() -> tuple[str, str]:
    """The first and the last mutation of a gated MutatingAdmissionPolicy: the decision written, removed."""
    decided = "variables.allAct ? '*' : variables.acting.join('\\n')"
    add_key = json_patch("add", _GATE_POINTER, f"'-' + ({decided})")
    add_map = json_patch("add", "'/metadata/annotations'", f"{{{_GATE_KEY}: '+' + ({decided})}}")
    first = (
        "request.operation == 'UPDATE' && (variables.allAct || size(variables.acting) > 0) ? "
        f"[has(object.metadata.annotations) ? {add_key} : {add_map}] : []"
    )
    whole = f"{_GATE_VALUE}.startsWith('+') && size(object.metadata.annotations) == 1"
    remove = f"{whole} ? {json_patch('remove', string_literal('/metadata/annotations'))} : {json_patch('remove', _GATE_POINTER)}"
    last = f"request.operation == 'UPDATE' && {_GATED} ? [{remove}] : []"
    return first, last


def gates_updates(rule: Rule, operations: set[str]) -> bool:
    """Whether the engine skips this rule on UPDATEs that leave its inputs unchanged (evaluate.py)."""
    return rule.ratcheting and rule.inputs is not None and "UPDATE" in operations


def _at(root: str, path: tuple[str, ...]) -> str:
    """root.path, or null where a part is missing (ratcheting.py get_path)."""
    presences, access = [], root
    for part in path:
        presence, access = select(access, part)
        presences.append(presence)
    return f"({' && '.join(presences)} ? dyn({access}) : null)" if presences else f"dyn({root})"


def gate_variables(rule: Rule, targets: str, variable: str | None = "targets") -> list[dict[str, str]]:
    """`allAct`, `oldTargets` and `acting` (see ACTS). `targets`: the targets expression (with paths,
    roots and specs); `variable`: the policy variable that holds it (None: one is added, `gateTargets`:
    a list expression nested in another one passes cel-cpp's parser depth of 32)."""
    assert rule.inputs is not None
    if any(not all(isinstance(part, str) for part in path) for path in rule.inputs):
        raise NotNative(
            f"reads {sorted(rule.inputs)}, a path through a list index, which export does not follow to tell "
            "whether an UPDATE changed it: the webhook keeps the rule, or give it spec.ratcheting: false to export it"
        )
    changed = [f"{_at('object', path)} != {_at('oldObject', path)}" for path in sorted(rule.inputs)]
    on_old = _replace_identifier(targets, "object", "oldObject")
    own = "gwO.path == gwA.path && (gwA.path == '' ? gwO.specs == gwA.specs : gwO.root == gwA.root)"
    added = [] if variable is not None else [{"name": "gateTargets", "expression": targets}]
    current = f"variables.{variable or 'gateTargets'}"
    return [
        *added,
        {"name": "allAct", "expression": " || ".join(["request.operation != 'UPDATE'", "oldObject == null", *changed])},
        {"name": "oldTargets", "expression": f"oldObject == null ? [] : {on_old}"},
        {
            "name": "acting",
            "expression": f"variables.allAct ? [] : {current}.filter(gwA, !variables.oldTargets.exists(gwO, {own}))"
            ".map(gwA, gwA.description)",
        },
    ]


def policy_name(rule: str) -> str:
    return f"gpu-webhook-{rule}"


def expand_kinds(rule: Rule) -> list[KindTarget]:
    kinds = rule.match.kinds
    if "*" in kinds:
        raise NotNative(
            "matches every kind (kinds: ['*']); a policy must name its resources: list the kinds in match.kinds "
            "to export the rule"
        )
    out = []
    for kind in sorted(kinds):
        group, plural = api_of(kind, rule.match.declared)
        out.append(KindTarget(kind, group, plural, templates=False))
    if "Pod" in kinds and rule.autogen:
        for kind in sorted(KIND_TABLE.autogen - set(kinds)):
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

    def _allocator_refusal(self, rule: Rule) -> str | None:
        """Why a rule that counts accelerators cannot be exported while annotation-marked GPU allocators
        (KAI Scheduler) are configured: the engine counts their containers from pod annotations, the
        native count reads resources only (nativecel.py), so the two would disagree on those pods."""
        allocators = self.translator.accelerators.allocators
        if not allocators or not counts_accelerators(rule):
            return None
        names = ", ".join(a.name for a in allocators)
        return (
            f"its accelerator count includes the GPUs of annotation-marked allocators ({names}: a container "
            "given a GPU share by pod annotations), which the exported CEL does not count; the webhook keeps the "
            "rule, or turn them off in GPUWebhookConfig (gpuAllocators: [{name: NAME, enabled: false}]) to export it"
        )

    def export(self, rule: Rule, want_vap: bool, want_map: bool) -> NativeRule:
        if rule.match.operations - NATIVE_OPERATIONS:
            extra = ", ".join(sorted(rule.match.operations - NATIVE_OPERATIONS))
            raise NotNative(
                f"matches {extra}; only CREATE and UPDATE rules are exported: the webhook keeps the rule, or split "
                f"the {extra} part into a rule of its own to export the rest"
            )
        if rule.mutations and not want_map:
            raise NotNative("mutates, and --target vap exports validation only: use --target all to export it")
        if rule.validate is not None and not want_vap:
            raise NotNative("validates, and --target map exports mutation only: use --target all to export it")
        if rule.mutations and self.release.map_version() is None:
            raise NotNative(
                f"mutates, and Kubernetes {self.release} has no MutatingAdmissionPolicy: the webhook keeps the rule "
                "(on 1.32 or later, export with that --kubernetes-version)"
            )
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
                    "its policies cannot be narrowed to CREATE apart; the webhook keeps the rule, or split the "
                    "mutation and the validation into two rules (or set spec.ratcheting: false) to export it"
                )
            operations.discard("UPDATE")
            note = (
                "CREATE only: on UPDATE the engine ratchets (denies only messages the old object did not give), "
                "which the policy does not model; the webhook keeps the rule"
            )
            if not operations:
                raise NotNative(
                    "on UPDATE the engine ratchets (denies only messages the old object did not give), which the "
                    "policy does not model for this rule: the webhook keeps it, or set spec.ratcheting: false to export it"
                )
        kinds = expand_kinds(rule)
        if rule.match.object_selector is not None and any(k.templates for k in kinds):
            raise NotNative(
                "objectSelector on pod templates: the engine reads each template's labels, a policy only the object's; "
                "the webhook keeps the rule, or set autogen: false (the selector then applies to Pods only) to export it"
            )
        gated = gates_updates(rule, operations)
        if gated and any(not k.templates and not follows_templates(k.kind) for k in kinds):
            unreachable = sorted(k.kind for k in kinds if not k.templates and not follows_templates(k.kind))
            raise NotNative(
                f"on UPDATE the engine acts only when the pod templates of {', '.join(unreachable)} changed, and a "
                "policy cannot follow them: the webhook keeps the rule, or give it spec.ratcheting: false (or match "
                "CREATE only) to export it"
            )
        match = self._match(rule)
        name = policy_name(rule.name)
        native = NativeRule(
            rule=rule.name, action=str(rule.action), note=note, policy=name if rule.validate is not None else None
        )
        constraints = match_constraints(rule, kinds, operations)
        metadata: dict[str, Any] = {"name": name, "labels": {**LABELS, RULE_LABEL: rule.name}}
        if rule.description:
            metadata["annotations"] = {"gpu-webhook.io/description": rule.description}
        # the engine never mutates some kinds (KIND_TABLE.unmutated: a ReplicaSet's controller would
        # replace it forever); their objects do not reach the MutatingAdmissionPolicy either
        mutated = [k for k in kinds if k.kind not in KIND_TABLE.unmutated]
        if rule.mutations and mutated:
            map_constraints = constraints if mutated == kinds else match_constraints(rule, mutated, operations)
            native.mutating = self._mutating(rule, mutated, match, map_constraints, metadata, gated)
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
            native.validating = self._validating(
                rule, kinds, match, constraints, metadata, ratchet and note is None, gated
            )
            native.objects += [
                native.validating,
                {
                    "apiVersion": f"{GROUP}/{self.release.vap_version()}",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": name, "labels": metadata["labels"]},
                    "spec": {"policyName": name, "validationActions": [str(rule.action)]},
                },
            ]
        refusal = self._allocator_refusal(rule)  # last: a reason that asks for more change says it first
        if refusal is not None:
            raise NotNative(refusal)
        return native

    # -- pieces ----------------------------------------------------------------------------------
    def _match(self, rule: Rule) -> str:
        parts = []
        if rule.match.gpu is not None:
            # evaluate.py: has_gpus = facts.gpus > 0 or any claim unresolved; this export is only
            # reached for --claims unresolved, where every claim is (targets.py `claimed`)
            accelerated = f"{LOOP}.gpus > 0 || {LOOP}.claimed"
            if CLAIM_KINDS & set(rule.match.kinds):
                accelerated += f" || {self._claim_accelerated()}"
            parts.append(f"({accelerated})" if rule.match.gpu else f"!({accelerated})")
        if rule.match.condition is not None:
            condition = self.translator.translate(rule.match.condition.text)
            parts.append(f"({condition})" if rule.match.condition.result_type == "BOOL" else f"(({condition}) == true)")
        return " && ".join(parts)

    def _claim_accelerated(self) -> str:
        """CEL: the object is a ResourceClaim or template naming an accelerator DeviceClass (facts.py
        own_claims: such a claim under admission matches `gpu: true`)."""
        table = self.translator.accelerators
        test = [f"gwO.deviceClassName in [{', '.join(map(string_literal, sorted(table.device_classes)))}]"]
        test += [f"gwO.deviceClassName.startsWith({string_literal(p)})" for p in table.device_class_prefixes]
        spec = "object.kind == 'ResourceClaimTemplate' ? (has(object.spec.spec) ? object.spec.spec : {}) : object.spec"
        return (
            f"(object.kind in {sorted(CLAIM_KINDS)} && [{spec}].exists(gwK, has(gwK.devices) && "
            "has(gwK.devices.requests) && gwK.devices.requests.exists(gwQ, (has(gwQ.firstAvailable) ? "
            "gwQ.firstAvailable : [has(gwQ.exactly) ? gwQ.exactly : gwQ]).exists(gwO, has(gwO.deviceClassName) && "
            f"({' || '.join(test)})))))"
        )

    def _variables(
        self,
        rule: Rule,
        expressions: list[str],
        kinds: list[KindTarget],
        with_paths: bool,
        old: tuple[str, str] | None = None,
        gated: bool = False,
    ) -> list:
        fields = set().union(*(references(e) for e in expressions))
        if gated:  # the gate compares each target's own part: its root, or the specs of an object target
            fields.add("specs")
            with_paths = True
        if "containers" in fields and any(not k.templates and multi_template(k.kind) for k in kinds):
            raise NotNative(
                "reads `containers` of a whole multi-template object (a kind named in match.kinds: one target for all "
                "its templates), a list the apiserver's CEL cannot flatten; the webhook keeps the rule, or leave those "
                "kinds to autogen (one target per template) to export it"
            )
        variables = []
        if any("variables.params" in e for e in expressions):
            variables.append({"name": "params", "expression": native_literal(dict(rule.params))})
        # a validating policy's paths are keys only: it has no jsonpatch.escapeKey
        targets = targets_expression(kinds, fields, self.translator, with_paths, pointers=False)
        variables.append({"name": "targets", "expression": targets})
        if gated:
            variables += gate_variables(rule, targets)
        if old is not None:  # the same targets of the old object (UPDATE) and their messages, for ratcheting
            if not gated:
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
        gated: bool = False,
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
        plain_match = match  # the old object's targets: the gate is the new object's
        if gated:
            match = f"{ACTS} && ({match})" if match else ACTS
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
        typed = [
            (entry["expression"], BOOL),
            *([(entry["messageExpression"], STRING)] if "messageExpression" in entry else []),
        ]
        old = None
        if ratchet:
            old = (
                ("oldMessages", _old_messages(value, plain_match))
                if result.startswith("LIST")
                else ("oldFailing", _old_failing(value, plain_match))
            )
        needs = [*expressions, *([old[1]] if old else [])]
        variables = self._variables(rule, needs, kinds, with_paths=False, old=old, gated=gated)
        cost = self._check([v["expression"] for v in variables], [e for e in expressions if e], typed, False)
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
        self,
        rule: Rule,
        kinds: list[KindTarget],
        match: str,
        constraints: dict[str, Any],
        metadata: dict[str, Any],
        gated: bool = False,
    ) -> dict[str, Any]:
        if needs_pod_spec_paths(rule) and any(not k.templates and k.kind != "Pod" for k in kinds):
            raise NotNative(
                "edits the pod specs of a whole workload object (a workload kind named in match.kinds); only Pods and "
                "pod templates are exported: the webhook keeps the rule, or leave the workload kinds to autogen "
                "(one target per template) to export it"
            )
        # Mutations read the object as the previous ones left it, so each inlines its targets.
        if gated:  # the decision the first mutation writes (GATE_ANNOTATION)
            match = f"{MARKED_ACTS} && ({match})" if match else MARKED_ACTS
        probe = [patches(m.view(), self.translator, "gwTARGETS", match) for m in rule.mutations]
        flat = [e for group in probe for e in group]
        fields = set().union(*(references(e) for e in flat))
        targets = targets_expression(kinds, fields, self.translator, with_paths=True)
        expressions = [e.replace("gwTARGETS", f"({targets})") for e in flat]
        variables = []
        if any("variables.params" in e for e in expressions):
            variables.append({"name": "params", "expression": native_literal(dict(rule.params))})
        if gated:  # read by the first mutation alone: the object as this policy received it
            # keys, not pointers: a policy's variables have no jsonpatch.escapeKey (only its mutations do)
            start = targets_expression(kinds, fields | {"specs"}, self.translator, with_paths=True, pointers=False)
            variables += gate_variables(rule, start, None)
            first, last = gate_mutations()
            expressions = [first, *expressions, last]
        cost = self._check(
            [v["expression"] for v in variables], expressions, [(e, LIST_OF_JSONPATCH) for e in expressions], True
        )
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

    def _check(self, variables: list[str], expressions: list[str], typed: list[tuple[str, str]], mutating: bool) -> int:
        """Compile every expression as the apiserver would (a policy's variables without the JSONPatch
        library, which only a MutatingAdmissionPolicy's mutations have), check the types it requires of
        `typed` ((expression, type): validations bool, messages string, JSONPatch expressions
        list(JSONPatch)) and bound the cost; the policy's estimated cost."""
        try:
            for expression in variables:
                self.env.compile(expression, mutating=False)
            for expression in expressions:
                self.env.compile(expression, mutating)
        except CompileError as error:  # the rule's CEL uses what the apiserver lacks, or export erred
            raise NotNative(
                f"the generated CEL does not compile in the apiserver's environment: {error}; the webhook keeps the "
                "rule, or write its CEL without what the apiserver lacks to export it (if it uses nothing unusual, "
                "please report it as a gpu-webhook bug)"
            ) from None
        try:
            for expression, wanted in typed:
                self.env.check_type(expression, wanted, mutating=mutating)
        except CompileError as error:  # the generated wrapper's type: export's own fault
            raise NotNative(
                f"the generated CEL has a type the apiserver refuses: {error}; the webhook keeps the rule (a "
                "gpu-webhook bug: please report it)"
            ) from None
        costs = [estimate(e) for e in [*variables, *expressions]]
        if max(costs) > PER_CALL_LIMIT:
            raise NotNative(
                f"an expression's estimated cost {max(costs):,} is over the apiserver's per-expression limit "
                f"{PER_CALL_LIMIT:,}: the webhook keeps the rule, or cut its loops over containers and templates "
                "(or its kinds) to export it"
            )
        if sum(costs) > POLICY_BUDGET:
            raise NotNative(
                f"estimated cost {sum(costs):,} is over the apiserver's per-policy budget {POLICY_BUDGET:,}: the "
                "webhook keeps the rule, or cut its loops over containers and templates (or its kinds) to export it"
            )
        return sum(costs)
