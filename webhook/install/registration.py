"""What the apiserver must send to the webhook, derived from the loaded rules.

A rule acts in the cluster only on what the webhook configurations send, so the `rules` and
`matchConditions` of each webhook entry are computed here from the rule set, through the engine's
one kind table (webhook/engine/workloads.py, KIND_TABLE) and the kinds rules declare themselves:

- `rules`: every (group, version, resource, operation) a rule of the entry's phase can target,
  autogen included; `pods/ephemeralcontainers` for Pod rules that see UPDATEs (kubectl debug adds
  containers through it, KEP-277); never a kind the webhook does not mutate in a mutating entry.
- `matchConditions` may only skip a request that no rule of the entry could act on:
  * `rule-inputs-changed` skips an UPDATE that leaves every field the entry's rules read or write
    as it was (a finalizer removed, an annotation no rule reads), on which the engine does not act
    either (it ratchets UPDATEs per rule: webhook/engine/ratcheting.py) — so that an object whose
    finalizer must go is not held by a webhook outage. Labels are among those fields as soon as a
    rule reads or sets them: `kubectl label --overwrite` is an UPDATE the rules must see.
  * `requests-accelerators` skips objects without accelerators, and only in an entry whose every
    rule is `gpu: true` (the mutating entry outside tenant namespaces, with the shipped pack).

ENTRIES holds the fixed part of each entry (names, namespaces, failure policy); `configurations`
renders both webhook configurations, and `manifests/base/webhooks.yaml` is its output for the
shipped pack (`python -m webhook.commands.generate registration > manifests/base/webhooks.yaml`; a test compares).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine import (
    KIND_TABLE,
    Accelerators,
    KindApi,
    Phase,
    Rule,
    RuleSet,
    WorkloadKind,
    compile_documents,
)
from webhook.engine.documents import POLICY_RESOURCES, TEST_KIND
from webhook.kubeyaml import load_documents, styles

MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
CONFIGURATION_NAMES = {MUTATING: "gpu-webhook-mutating", VALIDATING: "gpu-webhook-validating"}
TENANT_LABEL = "gpu-webhook.io/tenant"
NAMESPACE_NAME = "kubernetes.io/metadata.name"
# never sent: the webhook's own namespace and kube-system must start pods while it is down (no lock-out)
EXEMPT_NAMESPACES = ("kube-system", "gpu-webhook")
REGISTERED_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
EPHEMERAL_CONTAINERS = "pods/ephemeralcontainers"
INPUTS_CHANGED, REQUESTS_ACCELERATORS = "rule-inputs-changed", "requests-accelerators"
SERVICE, NAMESPACE = "gpu-webhook", "gpu-webhook"
# an answer takes milliseconds; 5 s only bounds a sick replica (the apiserver's default is 10, max 30)
TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class Entry:
    """One webhook entry: which configuration, which phase, which namespaces (tenant label: True, False, any).

    `policies`: the entry that sends the policy objects themselves (webhook/policies/admission.py), whose
    rules are the policy kinds, not derived from the loaded rules."""

    name: str
    configuration: str
    tenants: bool | None
    policies: bool = False

    @property
    def phase(self) -> Phase:
        return Phase.MUTATE if self.configuration == MUTATING else Phase.VALIDATE

    @property
    def path(self) -> str:
        if self.policies:
            return "/policies"
        return "/mutate" if self.phase is Phase.MUTATE else "/validate"


ENTRIES = (
    Entry("mutate.gpu-webhook.io", MUTATING, tenants=False),
    Entry("mutate-tenants.gpu-webhook.io", MUTATING, tenants=True),
    Entry("validate.gpu-webhook.io", VALIDATING, tenants=None),
    # second: the overlays patch each entry's failurePolicy by index (validating webhooks/0 and /1)
    Entry("policies.gpu-webhook.io", VALIDATING, tenants=None, policies=True),
)
# What the policies entry sends: a CREATE or UPDATE of any policy object (webhook/engine/policyresources.py)
POLICY_RULES = [
    {
        "apiGroups": sorted({resource.group for resource in POLICY_RESOURCES.values()}),
        "apiVersions": sorted({resource.version for resource in POLICY_RESOURCES.values()}),
        "operations": ["CREATE", "UPDATE"],
        "resources": sorted(resource.plural for resource in POLICY_RESOURCES.values()),
        "scope": "*",
    }
]


# -- which rules an entry carries ----------------------------------------------------------------


def tenant_reach(rule: Rule) -> bool | None:
    """True when the rule's namespaceSelector can only match tenant namespaces, False when it can only
    match others, None when it can match both. (Neither: the rule can match no namespace at all.)"""
    selector = rule.match.namespace_selector
    if selector is None:
        return None
    # the labels most favourable to the selector; only the tenant label varies
    labels: dict[str, str] = dict(selector.match_labels)
    for key, operator, values in selector.match_expressions:
        if operator == "In" and key not in labels:
            labels[key] = min(values)
        elif operator == "Exists":
            labels.setdefault(key, "x")
    labels.pop(TENANT_LABEL, None)
    outside = selector.matches(labels)
    inside = selector.matches({**labels, TENANT_LABEL: "true"})
    if inside and outside:
        return None
    return True if inside else False if outside else _NOWHERE


_NOWHERE: Any = "nowhere"  # a selector no namespace satisfies: the rule belongs to no entry


def entry_rules(ruleset: RuleSet, entry: Entry) -> list[Rule]:
    """The rules that can act on a request this entry sends, in file order."""
    if entry.policies:
        return []
    out = []
    for rule in ruleset.rules:
        acts = bool(rule.mutations) if entry.phase is Phase.MUTATE else rule.validate is not None
        reach = tenant_reach(rule)
        if acts and (entry.tenants is None or reach is None or reach == entry.tenants):
            out.append(rule)
    return out


def targeted(rule: Rule) -> list[WorkloadKind | KindApi]:
    """The APIs a rule targets: its declared kinds, else the table's rows (autogen and '*' expanded)."""
    declared = {api.kind: api for api in rule.match.declared}
    names = set(rule.match.kinds)
    if "*" in names:
        names = (names - {"*"}) | KIND_TABLE.names
    elif "Pod" in names and rule.autogen:
        names |= KIND_TABLE.autogen
    found: list[WorkloadKind | KindApi] = []
    for name in sorted(names):
        api = declared.get(name) or KIND_TABLE.by_kind(name)
        if api is not None:
            found.append(api)
    return found


def unregistrable(rule: Rule) -> list[str]:
    """Kinds the rule names that the registration cannot send (neither in the kind table nor declared)."""
    declared = {api.kind for api in rule.match.declared}
    return sorted(k for k in rule.match.kinds if k != "*" and k not in KIND_TABLE and k not in declared)


# -- rules: ---------------------------------------------------------------------------------------


def resource_rules(rules: Iterable[Rule], phase: Phase) -> list[dict[str, Any]]:
    """RuleWithOperations for these rules: one per (group, versions, operations), resources sorted."""
    # (group, versions, scope, resource) -> operations; every kind of the table is namespaced, a
    # declared kind may be either
    wanted: dict[tuple[str, tuple[str, ...], str, str], set[str]] = {}
    for rule in rules:
        operations = rule.match.operations & set(REGISTERED_OPERATIONS)
        for api in sent_apis(rule, phase):
            if isinstance(api, WorkloadKind):
                key = (api.group, api.versions, "Namespaced", api.plural)
            else:
                key = (api.group, (api.version,), "*", api.resource)
            wanted.setdefault(key, set()).update(operations)
            if api.kind == "Pod" and api.group == "" and "UPDATE" in operations:
                wanted.setdefault(("", key[1], key[2], EPHEMERAL_CONTAINERS), set()).add("UPDATE")
    grouped: dict[tuple[str, tuple[str, ...], str, tuple[str, ...]], list[str]] = {}
    for (group, versions, scope, resource), asked in wanted.items():
        ordered = tuple(op for op in REGISTERED_OPERATIONS if op in asked)
        grouped.setdefault((group, versions, scope, ordered), []).append(resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": sorted(versions),
            "operations": list(operations),
            "resources": sorted(resources),
            "scope": scope,
        }
        for (group, versions, scope, operations), resources in sorted(grouped.items(), key=_group_order)
    ]


def sent_apis(rule: Rule, phase: Phase) -> list[WorkloadKind | KindApi]:
    """The APIs a rule needs sent in this phase: what it targets, less what the webhook never mutates."""
    apis = targeted(rule)
    if phase is Phase.MUTATE:
        apis = [api for api in apis if not isinstance(api, WorkloadKind) or api.mutated]
    return apis


_GROUP_ORDER = {group: index for index, group in enumerate(dict.fromkeys(k.group for k in KIND_TABLE))}


def _group_order(item: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], list[str]]) -> tuple[int, str, int]:
    (group, _versions, _scope, operations), _ = item
    return (_GROUP_ORDER.get(group, len(_GROUP_ORDER)), group, -len(operations))


# -- matchConditions ------------------------------------------------------------------------------


def top_level(fields: Iterable[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """The fields as the registration compares them: `spec` whole, `metadata.<field>`, other top-level fields."""
    return {path[:2] if path[0] == "metadata" else path[:1] for path in fields}


def watched_fields(rules: Iterable[Rule]) -> list[tuple[str, ...]] | None:
    """The object's fields whose change on UPDATE the rules act on (engine/ratcheting.py, at the depth the
    condition compares them); None when any change may matter."""
    fields: set[tuple[str, ...]] = {("spec",)}  # pod specs, templates (their metadata too), `gpu:`
    for rule in rules:
        if not rule.ratcheting or rule.inputs is None:
            return None  # it re-checks every UPDATE, or reads the whole object
        fields |= top_level(rule.inputs)
    return sorted(fields)


def inputs_changed(fields: Sequence[tuple[str, ...]]) -> str:
    """CEL: not an UPDATE, or one of `fields` was added, removed or changed."""
    changed = []
    for field in fields:
        parent = ".".join(field[:-1])
        new = ".".join(("object", *field))
        old = ".".join(("oldObject", *field))
        presence = f"has({new}) != has({old})"
        if parent:  # metadata is always there on a stored object, but a guard costs nothing
            presence = f"(has(object.{parent}) && has({new})) != (has(oldObject.{parent}) && has({old}))"
        changed.append(f"{presence} ||\n  (has({new}) && has({old}) && {new} != {old})")
    return "request.operation != 'UPDATE' ||\n  " + " ||\n  ".join(changed)


def _has_chain(base: str, parts: Sequence[str]) -> str:
    checks, expr = [], base
    for part in parts:
        expr += f".{part}"
        checks.append(f"has({expr})")
    return " && ".join(checks)


def _spec_groups(kind: WorkloadKind) -> str | None:
    """CEL: a list of groups (lists) of the kind's pod specs, each field guarded by has() so that a
    half-filled object never errors; None when no fixed path reaches them (AppWrapper, TrainJob)."""
    if kind.kind == "Pod":
        return "[[object.spec]]"
    if not kind.has_templates:
        return None
    groups = [_group([*t.replace("[*]", ".[*]").split("."), "spec"]) for t in kind.templates]
    return None if None in groups else "[" + ", ".join(g for g in groups if g) + "]"


def _group(parts: list[str]) -> str | None:
    """CEL list of the pod specs at `parts` below `object`: `[*]` walks a list, `*` a map's values."""
    walks = [i for i, part in enumerate(parts) if part in ("[*]", "*")]
    if any(not part.isidentifier() for i, part in enumerate(parts) if i not in walks):
        return None  # a path the kind table spells with a placeholder (AppWrapper's podSets paths)
    if not walks:
        return f"({_has_chain('object', parts)} ? [object.{'.'.join(parts)}] : [])"
    if len(walks) > 1:
        return None
    (at,) = walks
    container = "object." + ".".join(parts[:at])
    item = "t" if parts[at] == "[*]" else f"{container}[t]"
    rest = parts[at + 1 :]
    return (
        f"({_has_chain('object', parts[:at])} ?\n"
        f"      {container}.filter(t, {_has_chain(item, rest)}).map(t, {item}.{'.'.join(rest)}) : [])"
    )


def requests_accelerators(kinds: Iterable[WorkloadKind | KindApi], accelerators: Accelerators) -> str:
    """CEL: the object has a pod spec that asks for an accelerator (a resource or a DRA claim) or is
    scheduled by an annotation-marked allocator's scheduler, or is of a kind whose pod specs no fixed
    path reaches (always sent: the engine decides)."""
    by_groups: dict[str, list[str]] = {}
    always: list[str] = []
    for api in kinds:
        groups = _spec_groups(api) if isinstance(api, WorkloadKind) else None
        if groups is None:
            always.append(api.kind)
        else:
            by_groups.setdefault(groups, []).append(api.kind)
    branches = []
    for groups, names in by_groups.items():
        test = f"object.kind == '{names[0]}'" if len(names) == 1 else f"object.kind in {_cel_list(sorted(names))}"
        branches.append(f"{test} ? {groups} :")
    resource = f"r in {_cel_list(sorted(accelerators.exact))}" + "".join(
        f" || r.startsWith('{prefix}')" for prefix in accelerators.prefixes
    )
    sent = f"object.kind in {_cel_list(sorted(always))} ||\n" if always else ""
    if any(not allocator.scheduler_names for allocator in accelerators.allocators):
        return "true"  # an annotation-marked allocator of any scheduler: any pod may have its GPU
    # annotation-marked allocators (resources.Allocator) give GPUs only to pods of their schedulers
    schedulers = sorted({name for allocator in accelerators.allocators for name in allocator.scheduler_names})
    scheduled = f"  (has(s.schedulerName) && s.schedulerName in {_cel_list(schedulers)}) ||\n" if schedulers else ""
    return (
        f"{sent}has(object.spec) && (\n  " + "\n  ".join(branches) + "\n  []\n"
        ").exists(group, group.exists(s,\n"
        f"{scheduled}"
        "  (has(s.resourceClaims) && size(s.resourceClaims) > 0) ||\n"
        "  ((has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : []))\n"
        "    .exists(c, has(c.resources) && (\n"
        f"      (has(c.resources.limits) && c.resources.limits.exists(r, {resource})) ||\n"
        f"      (has(c.resources.requests) && c.resources.requests.exists(r, {resource}))))))"
    )


def _cel_list(names: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def match_conditions(ruleset: RuleSet, entry: Entry) -> list[dict[str, str]]:
    rules = entry_rules(ruleset, entry)
    if not rules:
        return []  # an entry without rules is never called
    conditions = []
    fields = watched_fields(rules)
    if fields is not None:
        conditions.append({"name": INPUTS_CHANGED, "expression": inputs_changed(fields)})
    only_gpu = bool(rules) and all(r.match.gpu is True and r.match.operations <= {"CREATE", "UPDATE"} for r in rules)
    if only_gpu:
        kinds = {api.kind: api for rule in rules for api in sent_apis(rule, entry.phase)}
        conditions.append(
            {"name": REQUESTS_ACCELERATORS, "expression": requests_accelerators(kinds.values(), ruleset.accelerators)}
        )
    return conditions


# -- the configurations ---------------------------------------------------------------------------


def entry_fields(ruleset: RuleSet, entry: Entry) -> dict[str, Any]:
    """The derived fields of one entry: `rules` and (when any) `matchConditions`."""
    if entry.policies:
        return {"rules": copy.deepcopy(POLICY_RULES)}
    fields: dict[str, Any] = {"rules": resource_rules(entry_rules(ruleset, entry), entry.phase)}
    conditions = match_conditions(ruleset, entry)
    if conditions:
        fields["matchConditions"] = conditions
    return fields


def derive(configurations: Iterable[Mapping[str, Any]], ruleset: RuleSet) -> list[dict[str, Any]]:
    """Copies of the objects with each known entry's `rules` and `matchConditions` derived from `ruleset`.

    Everything else (failurePolicy, namespaceSelector, clientConfig, ...) is left as the overlay set it.
    An entry that no rule needs gets `rules: []`: the apiserver never calls it, and its position stays
    (the overlays patch entries by index).
    """
    by_name = {entry.name: entry for entry in ENTRIES}
    out = []
    for configuration in configurations:
        copied = copy.deepcopy(dict(configuration))
        if copied.get("kind") in (MUTATING, VALIDATING):
            for webhook in copied.get("webhooks") or []:
                entry = by_name.get(webhook.get("name"))
                if entry is not None:
                    webhook.pop("matchConditions", None)
                    webhook.update(entry_fields(ruleset, entry))
        out.append(copied)
    return out


def configmap_ruleset(configmap: Mapping[str, Any]) -> RuleSet:
    """The rule set a server loads from the rules ConfigMap (its keys are the mounted files' names)."""
    documents = []
    for key, text in sorted((configmap.get("data") or {}).items()):
        documents.extend(load_documents(text, key, skip_kinds=frozenset({TEST_KIND})))
    return compile_documents(documents).require()


def _namespace_selector(entry: Entry) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = [
        {"key": NAMESPACE_NAME, "operator": "NotIn", "values": list(EXEMPT_NAMESPACES)}
    ]
    if entry.tenants is not None:
        operator = "In" if entry.tenants else "NotIn"
        expressions.append({"key": TENANT_LABEL, "operator": operator, "values": ["true"]})
    return {"matchExpressions": expressions}


def configurations(ruleset: RuleSet) -> list[dict[str, Any]]:
    """Both webhook configurations as the kustomize base holds them: fixed fields from ENTRIES, the rest derived.

    failurePolicy is Fail here; the audit and enforce overlays set Ignore, and only `gpu-webhook
    manifests` (with the caBundle, the rules ConfigMap and the TLS Secret in its output) sets Fail again.
    """
    out = []
    for kind in (MUTATING, VALIDATING):
        webhooks = []
        for entry in (e for e in ENTRIES if e.configuration == kind):
            webhook: dict[str, Any] = {
                "name": entry.name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "failurePolicy": "Fail",
            }
            if kind == MUTATING:
                webhook["reinvocationPolicy"] = "IfNeeded"  # idempotent: run again after Kueue's webhook
            webhook["matchPolicy"] = "Equivalent"
            webhook["clientConfig"] = {
                "service": {"name": SERVICE, "namespace": NAMESPACE, "path": entry.path, "port": 443}
            }
            webhook["namespaceSelector"] = _namespace_selector(entry)
            webhook.update(entry_fields(ruleset, entry))
            webhooks.append(webhook)
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": CONFIGURATION_NAMES[kind], "labels": {"app.kubernetes.io/name": "gpu-webhook"}},
                "webhooks": webhooks,
            }
        )
    return out


BASE_HEADER = """\
# Generated from the shipped rule pack by `python -m webhook.commands.generate registration > manifests/base/webhooks.yaml`
# (webhook/install/registration.py says what each field is and why); tests/deploy fails when it is stale.
# `gpu-webhook manifests` derives `rules` and `matchConditions` again from the rules it ships, and the
# server keeps the live objects in step with the rules it loads.
#
# Mutating, two entries with disjoint namespaceSelectors (no object is mutated twice): outside tenant
# namespaces only objects that request accelerators (the pack mutates nothing else there), and every
# pod and workload in tenant namespaces (gpu-webhook.io/tenant=true). Validating: every object the
# rules target, and (policies.gpu-webhook.io) the policy objects themselves, so that a broken
# GPUPolicy, GPUPolicyOverlay or GPUPolicyException is refused at apply (its failurePolicy follows the
# others': one that got in while the webhook was down is still refused by the loader, and its status
# says why). kube-system and the webhook's own namespace are never sent (no lock-out).
# The mutating configuration's name sorts before `kueue-mutating-webhook-configuration`: the apiserver
# calls mutating configurations in name order, and Kueue must see the queue label we inject.
"""


def base_yaml(ruleset: RuleSet) -> str:
    return BASE_HEADER + styles.REGISTRATION.dump_all(configurations(ruleset))
