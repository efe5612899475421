"""Does a rule apply to a target? Namespaces, selectors, `gpu:`, the match condition.

The answer is None (it applies) or the reason it does not, for the trace. Nothing here
records a violation: a rule that needs the namespace and has none under
`onMissingContext: Deny` gets the reason REFUSED_FOR_CONTEXT, and the run (evaluate.py)
records the denial; under `onMissingContext: Evaluate` the rule runs with namespaceObject null
and its CEL decides (a rule that reads the namespace only to narrow an exemption stays as
strict as it is without one). (Kinds and operations are settled before: RuleSet.candidates and
facts.WorkingCopy.targets.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .decision import NO_NAMESPACE_CONTEXT
from .policy import LabelSelector, Rule
from .workloads import Target, get_path, pods_elsewhere

if TYPE_CHECKING:
    from .facts import WorkingCopy
    from .programs import Programs

REFUSED_FOR_CONTEXT = f"{NO_NAMESPACE_CONTEXT} (onMissingContext: Deny)"


def mismatch(copy: WorkingCopy, programs: Programs, rule: Rule, target: Target) -> str | None:
    """None when the rule applies to this target, else why not.

    A match condition that cannot be evaluated raises RuleError (the caller applies
    failurePolicy), never "no match": otherwise an object shaped to break the condition
    would slip past the rule.
    """
    return after_gate(programs, rule, target, gate(copy, rule, target))


def after_gate(programs: Programs, rule: Rule, target: Target, reason: str | None) -> str | None:
    """`mismatch` once `gate` gave `reason`: the CEL condition, if the plain checks passed."""
    condition = rule.match.condition
    if reason is None and condition is not None and programs.eval(rule, target, condition) is not True:
        return "condition is false"
    return reason


def gate(copy: WorkingCopy, rule: Rule, target: Target) -> str | None:
    """Everything `mismatch` checks but the CEL condition: None when the rule gets that far, else why not.

    Plain Python on the namespace, the labels and the target's facts. The validating phase asks
    it for every rule first (evaluate.py), so that the rules that pass share one CEL program.
    """
    match = rule.match
    admission = copy.admission
    namespace = admission.namespace
    if match.namespaces_include is not None and namespace not in match.namespaces_include:
        return f"namespace {namespace!r} is not in namespaces.include"
    if namespace in match.namespaces_exclude:
        return f"namespace {namespace!r} is in namespaces.exclude"
    if (
        rule.needs_namespace
        and admission.namespace_object is None
        and namespace
        and rule.on_missing_context != "Evaluate"
    ):
        return REFUSED_FOR_CONTEXT if rule.on_missing_context == "Deny" else NO_NAMESPACE_CONTEXT
    if match.namespace_selector is not None and not _selected_by_namespace(copy, match.namespace_selector):
        return "namespaceSelector does not match"
    if match.object_selector is not None and not _object_selected(copy, rule, target):
        return "objectSelector does not match"
    if (
        match.gpu is not None
        and (copy.facts(target).accelerated() or (target.root == () and pods_elsewhere(copy.working))) != match.gpu
    ):
        # an unresolved DRA claim counts as an accelerator (resources.py explains why), and so does a
        # kind whose pods admission cannot see (a TrainJob's come from its runtime)
        return "requests no accelerators (gpu: true)" if match.gpu else "requests accelerators (gpu: false)"
    return None


def _selected_by_namespace(copy: WorkingCopy, selector: LabelSelector) -> bool:
    """A namespaceSelector as the apiserver applies it to a webhook (admissionregistration/v1
    ValidatingWebhook.namespaceSelector; apiserver pkg/admission/plugin/webhook/predicates/namespace
    matcher.go): a Namespace is matched by its own labels, any other cluster-scoped object is never
    exempted, a namespaced object by its Namespace's labels."""
    admission = copy.admission
    if copy.working.get("kind") == "Namespace" and copy.working.get("apiVersion") == "v1":
        document = copy.working if admission.operation != "DELETE" else admission.old_object or copy.working
        labels = get_path(document, ("metadata", "labels"))
        return selector.matches(labels if isinstance(labels, Mapping) else None)
    if not admission.namespace:
        return True
    labels = ((admission.namespace_object or {}).get("metadata") or {}).get("labels")
    return selector.matches(labels)


def _object_selected(copy: WorkingCopy, rule: Rule, target: Target) -> bool:
    selector = rule.match.object_selector
    assert selector is not None
    candidates = [copy.working]
    if target.root == () and copy.admission.old_object is not None:
        candidates.append(copy.admission.old_object)  # as the apiserver does: either may match
    for document in candidates:
        labels = get_path(document, (*target.metadata, "labels"))
        if selector.matches(labels if isinstance(labels, Mapping) else None):
            return True
    return False
