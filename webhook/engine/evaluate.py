"""evaluate(): one object, one rule set -> one Decision. Pure: no I/O, no globals.

Mutations run first (every matching rule, in file order) on a copy of the object;
validations then see the mutated result, exactly as the apiserver runs mutating
webhooks before validating ones. The server calls one phase per endpoint; the
offline doors (audit, test, explain) call both.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .cel import CelEvaluationError, CompiledExpression, target_gpu_variable
from .model import Action, Decision, Mode, Phase, Rule, RuleTrace, Target, Violation
from .mutate import MutationContext, MutationError
from .patch import PatchConflict, Patcher
from .pointer import to_pointer
from .ruleset import RuleSet
from .workloads import object_target, pod_template_targets

_TARGET_GPUS = target_gpu_variable()


@dataclass(slots=True)
class AdmissionInput:
    """What any door hands the engine: the AdmissionRequest's facts, already parsed."""

    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str = "CREATE"
    namespace: str | None = None
    namespace_object: dict[str, Any] | None = None  # None: unknown (cache not synced, or offline)
    request: dict[str, Any] = field(default_factory=dict)  # the CEL `request` variable
    kind: str | None = None
    sub_resource: str = ""

    @property
    def subject(self) -> dict[str, Any] | None:
        """The object rules look at: the new one, or on DELETE the old one."""
        return self.object if self.object is not None else self.old_object


class RuleError(Exception):
    """A rule failed to evaluate on one target; its failurePolicy decides what that means."""


def evaluate(
    ruleset: RuleSet,
    admission: AdmissionInput,
    phase: Phase = Phase.ALL,
    mode: Mode = Mode.ENFORCE,
    trace: bool = True,
) -> Decision:
    decision = Decision()
    subject = admission.subject
    if not isinstance(subject, dict) or admission.sub_resource:
        return decision  # rules never match subresources (pods/exec, */scale)
    kind = admission.kind or str(subject.get("kind", ""))
    candidates = ruleset.candidates(kind, admission.operation)
    if not candidates:
        return decision
    run = _Run(ruleset, admission, decision, mode, trace)
    if phase != Phase.VALIDATE and admission.object is not None:
        for rule in candidates:
            if rule.mutations:
                run.mutate(rule)
    if phase != Phase.MUTATE:
        for rule in candidates:
            if rule.validate is not None:
                run.validate(rule)
    if run.patcher is not None and run.patcher.operations:
        decision.patch = run.patcher.operations
        decision.mutated = run.working
    decision.allowed = not decision.violations
    return decision


class _Run:
    """The state of one evaluation: the working copy, its patcher, and cached targets."""

    def __init__(
        self, ruleset: RuleSet, admission: AdmissionInput, decision: Decision, mode: Mode, trace: bool
    ) -> None:
        self.ruleset = ruleset
        self.admission = admission
        self.decision = decision
        self.mode = mode
        self.trace = trace
        self.working: dict[str, Any] = admission.subject  # type: ignore[assignment]
        self.patcher: Patcher | None = None
        self._templates: list[Target] | None = None
        self._object_target: Target | None = None
        # id(target) -> (version of the working copy, its pod specs, containers, GPU count)
        self._facts: dict[int, tuple[int, list[Any], list[Any], int]] = {}
        self._activations: dict[int, tuple[int, Any]] = {}  # id(target) -> (version, activation)

    # -- targets ---------------------------------------------------------------------------------
    def targets(self, rule: Rule) -> list[Target]:
        kinds = rule.match.kinds
        if "*" in kinds or self.working.get("kind") in kinds:
            if self._object_target is None:
                self._object_target = object_target(self.working)
            return [self._object_target]
        if "Pod" in kinds and rule.autogen:
            if self._templates is None:
                self._templates = pod_template_targets(self.working)
            return self._templates
        return []

    # -- phases ----------------------------------------------------------------------------------
    def mutate(self, rule: Rule) -> None:
        for target in self.targets(rule):
            entry = self._match(rule, target)
            if entry is None:
                continue
            if self.patcher is None:
                self.working = _copy(self.working)
                self.patcher = Patcher(self.working)
            start = len(self.patcher.operations)
            context = MutationContext(
                patcher=self.patcher,
                target=target,
                operation=self.admission.operation,
                # an activation only if a mutation has CEL, of the working copy as it then is
                evaluate=lambda expression, r=rule, t=target: self._eval(r, t, expression),
                accelerators=self.ruleset.accelerators,
            )
            try:
                for mutation in rule.mutations:
                    mutation.apply(context)
            except (MutationError, PatchConflict, RuleError) as error:
                self._error(rule, target, entry, f"mutation failed: {error}")
                continue
            if entry is not None:
                entry.patch = self.patcher.operations[start:]
                entry.result = "mutated" if entry.patch else "pass"

    def validate(self, rule: Rule) -> None:
        assert rule.validate is not None
        for target in self.targets(rule):
            entry = self._match(rule, target)
            if entry is None:
                continue
            try:
                result = self._eval(rule, target, rule.validate.expression)
                messages = _failures(result, rule)
                if messages is None:
                    raise RuleError(f"validate.expression gave {type(result).__name__}, expected bool or list")
                if messages == [] and result is False:
                    messages = [self._message(rule, target)]
            except RuleError as error:
                self._error(rule, target, entry, str(error))
                continue
            if not messages:
                entry.result = "pass"
                continue
            entry.result = "fail"
            entry.message = "; ".join(messages)
            self._record(rule, target, entry.message)

    # -- helpers ---------------------------------------------------------------------------------
    def _match(self, rule: Rule, target: Target) -> RuleTrace | None:
        """The rule's trace entry when it matches this target, else None (traced with the reason)."""
        reason = self._mismatch(rule, target)
        entry = RuleTrace(rule=rule.name, target=target.description, matched=reason is None, reason=reason or "")
        if self.trace:
            self.decision.trace.append(entry)
        return entry if reason is None else None

    def _mismatch(self, rule: Rule, target: Target) -> str | None:
        match = rule.match
        admission = self.admission
        namespace = admission.namespace
        if match.namespaces_include is not None and namespace not in match.namespaces_include:
            return f"namespace {namespace!r} is not in namespaces.include"
        if namespace in match.namespaces_exclude:
            return f"namespace {namespace!r} is in namespaces.exclude"
        if rule.needs_namespace and admission.namespace_object is None and namespace:
            if rule.on_missing_context == "Deny":
                message = f"namespace {namespace!r} is not known yet (onMissingContext: Deny); retry shortly"
                self._record(rule, target, message)
                return "namespace context missing (denied)"
            return "namespace context missing (onMissingContext: Allow)"
        if match.namespace_selector is not None:
            labels = ((admission.namespace_object or {}).get("metadata") or {}).get("labels")
            if not match.namespace_selector.matches(labels):
                return "namespaceSelector does not match"
        if match.object_selector is not None and not self._object_selected(rule, target):
            return "objectSelector does not match"
        if match.gpu is not None:
            has_gpus = self._gpus(target) > 0
            if has_gpus != match.gpu:
                return "requests no accelerators (gpu: true)" if match.gpu else "requests accelerators (gpu: false)"
        if match.condition is not None:
            try:
                if self._eval(rule, target, match.condition) is not True:
                    return "condition is false"
            except RuleError as error:
                return f"condition failed: {error}"
        return None

    def _object_selected(self, rule: Rule, target: Target) -> bool:
        selector = rule.match.object_selector
        assert selector is not None
        candidates = [self.working]
        if target.root == () and self.admission.old_object is not None:
            candidates.append(self.admission.old_object)  # as the apiserver does: either may match
        for document in candidates:
            node: Any = document
            for part in target.metadata:
                node = node[part] if isinstance(node, list) else (node or {}).get(part)
            labels = node.get("labels") if isinstance(node, Mapping) else None
            if selector.matches(labels if isinstance(labels, Mapping) else None):
                return True
        return False

    def _target_facts(self, target: Target) -> tuple[int, list[Any], list[Any], int]:
        """Pod specs, containers and GPU count of a target, computed once per state of the working copy.

        Every rule asks for them (`gpu:` matching, CEL variables); counting GPUs walks every
        container's resources, so recomputing it per rule was a third of a request's cost.
        Mutations change the working copy only through the Patcher, so its operation count
        is the version. The copy made before the first edit equals the original (version 0
        for both); after edits the references are re-taken, and the GPU count is kept unless
        an edit reached into containers or replaced one of their ancestors.
        """
        version = len(self.patcher.operations) if self.patcher is not None else 0
        cached = self._facts.get(id(target))
        if cached is not None and cached[0] == version:
            return cached
        pod_specs = [_at(self.working, path) for path in target.pod_specs]
        if (
            cached is not None
            and self.patcher is not None
            and not _edits_containers(self.patcher.operations[cached[0] :], target)
        ):
            gpus = cached[3]
        else:
            gpus = sum(self.ruleset.accelerators.pod_count(spec) for spec in pod_specs)
        facts = (version, pod_specs, _containers(pod_specs), gpus)
        self._facts[id(target)] = facts
        return facts

    def _gpus(self, target: Target) -> int:
        return self._target_facts(target)[3]

    def _eval(self, rule: Rule, target: Target, expression: CompiledExpression) -> Any:
        """Run one of the rule's expressions on this target, sharing the activation when it can."""
        if not expression.params_bound:
            return _evaluate(expression, self._activation(target, rule.params))
        version = self._target_facts(target)[0]
        cached = self._activations.get(id(target))
        if cached is None or cached[0] != version:
            # The runtime converts each variable on first use and keeps it: one conversion of the
            # object per request (and per state of the working copy) instead of one per rule.
            cached = (version, self._activation(target, None))
            self._activations[id(target)] = cached
        return _evaluate(expression, cached[1])

    def _activation(self, target: Target, params: Any) -> Any:
        _version, pod_specs, containers, gpus = self._target_facts(target)
        return self.ruleset.env.activation(
            {
                "object": self.admission.object if self.admission.object is None else self.working,
                "oldObject": self.admission.old_object,
                "request": self.admission.request,
                "namespaceObject": self.admission.namespace_object,
                "params": params,  # None in the shared activation: every expression there binds its own
                "podSpec": pod_specs[0] if len(pod_specs) == 1 else None,
                "podSpecs": pod_specs,
                "containers": containers,
                "target": target.description,
                _TARGET_GPUS: gpus,
            }
        )

    def _message(self, rule: Rule, target: Target) -> str:
        validation = rule.validate
        assert validation is not None
        if validation.message_expression is not None:
            try:
                message = self._eval(rule, target, validation.message_expression)
                if isinstance(message, str) and message.strip():
                    return message
            except RuleError:
                pass  # fall back to the static message: a broken message must not hide the denial
        if validation.message:
            return validation.message
        return f"{target.description} violates {rule.name}"

    def _record(self, rule: Rule, target: Target, message: str) -> None:
        action = rule.action
        if action == Action.DENY and self.mode == Mode.AUDIT:
            action = Action.AUDIT
        violation = Violation(rule=rule.name, action=action, message=message, target=target.description)
        bucket = {
            Action.DENY: self.decision.violations,
            Action.WARN: self.decision.warnings,
            Action.AUDIT: self.decision.audits,
        }[action]
        bucket.append(violation)

    def _error(self, rule: Rule, target: Target, entry: RuleTrace, message: str) -> None:
        entry.result = "error"
        entry.message = message
        self.decision.errors.append(f"{rule.name}: {target.description}: {message}")
        if rule.failure_policy == "Fail":
            self._record(rule, target, f"rule {rule.name} could not be evaluated: {message}")


def _evaluate(expression: CompiledExpression, activation: Any) -> Any:
    try:
        return expression.evaluate(activation)
    except CelEvaluationError as error:
        raise RuleError(str(error)) from None
    except Exception as error:  # a helper's own failure surfaces as a rule error, never a crash
        raise RuleError(f"{type(error).__name__}: {error}") from None


def _failures(result: Any, rule: Rule) -> list[str] | None:
    """bool: true passes; list of strings: each one a failure, empty passes."""
    if result is True or result is False:
        return []
    if isinstance(result, list) and all(isinstance(item, str) for item in result):
        return list(result)
    return None


def _containers(pod_specs: list[Any]) -> list[Any]:
    found: list[Any] = []
    for spec in pod_specs:
        if isinstance(spec, Mapping):
            for field_name in ("initContainers", "containers"):
                value = spec.get(field_name)
                if isinstance(value, list):
                    found.extend(value)
    return found


def _edits_containers(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations may change the target's containers (conservative)."""
    specs = [to_pointer(path) + "/" for path in target.pod_specs]
    for operation in operations:
        path = operation["path"]
        if "ontainers" in path or any(spec.startswith(path + "/") for spec in specs):
            return True  # into (init)containers, or an ancestor of the pod spec replaced
    return False


def _at(document: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        if isinstance(part, int):
            document = document[part] if isinstance(document, list) and part < len(document) else None
        else:
            document = document.get(part) if isinstance(document, Mapping) else None
    return document


def _copy(document: dict[str, Any]) -> dict[str, Any]:
    try:
        return orjson.loads(orjson.dumps(document))
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(document)  # values JSON cannot carry (YAML timestamps, huge ints)
