"""evaluate(): one object, one rule set -> one Decision. Pure: no I/O, no globals.

Mutations run first (every matching rule, in file order) on a copy of the object;
validations then see the mutated result, exactly as the apiserver runs mutating
webhooks before validating ones. The server calls one phase per endpoint; the
offline doors (audit, test, explain) call both.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from .cel import CelEvaluationError, CompiledExpression
from .loader import _mutation_expressions as mutation_expressions  # the loader's list, for references too
from .model import (
    DEFAULT_LIMITS,
    NO_NAMESPACE_CONTEXT,
    Action,
    AdmissionInput,
    Decision,
    EvaluationError,
    Limits,
    Mode,
    Phase,
    Rule,
    RuleTrace,
    Target,
    Violation,
    default_priority_class,
)
from .mutate import MutationContext, MutationError
from .patch import PatchConflict, Patcher
from .pointer import to_pointer
from .projection import Tree, merge, project
from .quantity import quantity_of
from .resources import NO_CLAIMS, Accelerators, PodClaims
from .ruleset import RuleSet
from .workloads import get_path, object_target, pod_template_targets

# pods/ephemeralcontainers (kubectl debug) adds containers to a running pod. Since 1.22 its
# object is the whole Pod and the operation UPDATE (KEP-277, kubernetes/kubernetes#101034), and
# the apiserver keeps only spec.ephemeralContainers of what is written to it: rules run on it as
# on any Pod UPDATE, ratcheting keeps the existing containers from re-denying.
EVALUATED_SUBRESOURCES = frozenset({"", "ephemeralcontainers"})


class RuleError(Exception):
    """A rule failed to evaluate on one target; its failurePolicy decides what that means."""


def evaluate(
    ruleset: RuleSet,
    admission: AdmissionInput,
    phase: Phase = Phase.ALL,
    mode: Mode = Mode.ENFORCE,
    trace: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> Decision:
    decision = Decision()
    subject = admission.subject
    if not isinstance(subject, dict) or admission.sub_resource not in EVALUATED_SUBRESOURCES:
        return decision  # rules never match other subresources (pods/exec, */scale, */status)
    kind = admission.kind or str(subject.get("kind", ""))
    candidates = ruleset.candidates(kind, admission.operation)
    if not candidates:
        return decision
    run = _Run(ruleset, admission, decision, mode, trace, limits, _projection(ruleset, candidates, phase))
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
        self,
        ruleset: RuleSet,
        admission: AdmissionInput,
        decision: Decision,
        mode: Mode,
        trace: bool,
        limits: Limits,
        projection: _Projection,
    ) -> None:
        self.ruleset = ruleset
        self.projection = projection
        self.admission = admission
        self.decision = decision
        self.mode = mode
        self.trace = trace
        self.working: dict[str, Any] = admission.subject  # type: ignore[assignment]
        self.patcher: Patcher | None = None
        self._templates: list[Target] | None = None
        self._object_target: Target | None = None
        self._refused_for_context: set[tuple[str, str]] = set()
        self._facts: dict[tuple[str | int, ...], _TargetFacts] = {}
        # target root -> (version of the working copy, the activation every params-bound expression shares)
        self._activations: dict[tuple[str | int, ...], tuple[int, Any]] = {}
        self.limits = limits
        budget = limits.time_budget
        # Wall clock first (cheap, vDSO): CPU time cannot exceed it, so the thread's CPU clock (a
        # system call) is read only once the wall-clock deadline has passed.
        self.deadline = None if budget is None else time.perf_counter() + budget
        self.cpu_start = time.thread_time() if budget is not None else 0.0
        self._largest: int | None = None  # the largest collection in the object, measured once
        self._old_run: _Run | None = None  # the same rules on oldObject, for ratcheting (UPDATE)
        self._default_class: str | None = None
        # id of the projection trees -> projected (oldObject, request, namespaceObject)
        self._fixed: dict[int, tuple[Any, Any, Any]] = {}

    # -- targets ---------------------------------------------------------------------------------
    def targets(self, rule: Rule) -> list[Target]:
        kinds = rule.match.kinds
        kind = self.working.get("kind")
        if "*" in kinds or (isinstance(kind, str) and kind in kinds):  # the object is the tenant's: any type
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
                evaluate=lambda expression, r=rule, t=target: self._eval(r, t, expression),  # type: ignore[misc]
                accelerators=self.ruleset.accelerators,
                sub_resource=self.admission.sub_resource,
                uses_accelerator_claims=lambda container, t=target: self._uses_accelerator_claims(t, container),  # type: ignore[misc]
            )
            try:
                for mutation in rule.mutations:
                    mutation.apply(context)
            except (MutationError, PatchConflict, RuleError) as error:
                self._error(rule, target, entry, f"mutation failed: {error}")
                continue
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
                messages = [self._message(rule, target)] if result is False else _failures(result)
                if messages is None:
                    raise RuleError(f"validate.expression gave {type(result).__name__}, expected bool or list")
            except RuleError as error:
                self._error(rule, target, entry, str(error))
                continue
            if messages and self._ratchets(rule):
                already = self._old_messages(rule, target)
                messages = [m for m in messages if m not in already]
            if not messages:
                entry.result = "pass"
                continue
            entry.result = "fail"
            entry.message = "; ".join(messages)
            self._record(rule, target, entry.message)

    # -- ratcheting ------------------------------------------------------------------------------
    def _ratchets(self, rule: Rule) -> bool:
        """Kubernetes ratchets CRD validation on UPDATE (KEP-4008, stable in 1.33): an error on a
        field the update did not change is not reported. Per rule here: a Deny rule denies on UPDATE
        only the messages the old object did not already produce. Otherwise an UPDATE that only
        removes Kueue's scheduling gate, or adds a finalizer, is denied for what the pod already was
        (a namespace label changed since), and the pod stays gated forever.
        """
        return (
            rule.ratcheting
            and rule.action == Action.DENY
            and self.admission.operation == "UPDATE"
            and isinstance(self.admission.old_object, dict)
        )

    def _old_messages(self, rule: Rule, target: Target) -> set[str]:
        """The messages this rule gives the old object's target of the same name (none if it errs)."""
        if self._old_run is None:
            old = replace(self.admission, object=self.admission.old_object, old_object=None)
            self._old_run = _Run(self.ruleset, old, Decision(), self.mode, False, self.limits, self.projection)
        run = self._old_run
        assert rule.validate is not None
        for old_target in run.targets(rule):
            if old_target.description != target.description:
                continue
            try:
                if run._mismatch(rule, old_target) is not None:
                    return set()
                result = run._eval(rule, old_target, rule.validate.expression)
                messages = [run._message(rule, old_target)] if result is False else _failures(result)
            except RuleError:
                return set()
            return set(messages or ())
        return set()

    # -- helpers ---------------------------------------------------------------------------------
    def _match(self, rule: Rule, target: Target) -> RuleTrace | None:
        """The rule's trace entry when it matches this target, else None (traced with the reason)."""
        try:
            reason = self._mismatch(rule, target)
        except RuleError as error:
            # A condition that cannot be evaluated is an error under failurePolicy, never "no match":
            # otherwise an object shaped to break the condition would slip past a Fail rule.
            entry = RuleTrace(rule=rule.name, target=target.description, matched=True)
            if self.trace:
                self.decision.trace.append(entry)
            self._error(rule, target, entry, f"match.condition failed: {error}")
            return None
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
                key = (rule.name, target.description)
                if key not in self._refused_for_context:  # a rule that mutates and validates refuses once
                    self._refused_for_context.add(key)
                    message = f"namespace {namespace!r} is not known yet (onMissingContext: Deny); retry shortly"
                    self._record(rule, target, message, error=True)
                return f"{NO_NAMESPACE_CONTEXT} (onMissingContext: Deny)"
            return NO_NAMESPACE_CONTEXT
        if match.namespace_selector is not None:
            labels = ((admission.namespace_object or {}).get("metadata") or {}).get("labels")
            if not match.namespace_selector.matches(labels):
                return "namespaceSelector does not match"
        if match.object_selector is not None and not self._object_selected(rule, target):
            return "objectSelector does not match"
        if match.gpu is not None:
            facts = self._target_facts(target)
            # an unresolved DRA claim counts as an accelerator (resources.py explains why)
            has_gpus = facts.gpus > 0 or any(c.unresolved for c in facts.claims)
            if has_gpus != match.gpu:
                return "requests no accelerators (gpu: true)" if match.gpu else "requests accelerators (gpu: false)"
        # an error here is a rule error (the caller applies failurePolicy), never "no match":
        # otherwise an object shaped to break the condition would slip past the rule
        if match.condition is not None and self._eval(rule, target, match.condition) is not True:
            return "condition is false"
        return None

    def _object_selected(self, rule: Rule, target: Target) -> bool:
        selector = rule.match.object_selector
        assert selector is not None
        candidates = [self.working]
        if target.root == () and self.admission.old_object is not None:
            candidates.append(self.admission.old_object)  # as the apiserver does: either may match
        for document in candidates:
            labels = get_path(document, (*target.metadata, "labels"))
            if selector.matches(labels if isinstance(labels, Mapping) else None):
                return True
        return False

    def _version(self) -> int:
        """The working copy changes only through the Patcher: its operation count is the version."""
        return len(self.patcher.operations) if self.patcher is not None else 0

    def _target_facts(self, target: Target) -> _TargetFacts:
        """What every rule needs to know about a target, computed once per state of the working copy.

        Counting GPUs walks every container's resources; per rule it was a third of a request's
        cost. After an edit the references are re-taken, and what was read from the containers'
        resources is kept unless an edit reached into containers or replaced an ancestor.
        """
        version = self._version()
        cached = self._facts.get(target.root)
        if cached is not None and cached.version == version:
            return cached
        pod_specs = [get_path(self.working, path) for path in target.pod_specs]
        facts = _TargetFacts(version=version, pod_specs=pod_specs, containers=_containers(pod_specs), gpus=0)
        accelerators = self.ruleset.accelerators
        if (
            cached is not None
            and self.patcher is not None
            and not _edits_containers(self.patcher.operations[cached.version :], target)
        ):
            facts.gpus, facts.claims = cached.gpus, cached.claims
            facts._container_gpus, facts._quantities = cached._container_gpus, cached._quantities
        else:
            admission = self.admission
            facts.claims = [
                accelerators.pod_claims(spec, admission.resource_claims, admission.resource_claim_templates)
                for spec in pod_specs
            ]
            facts.gpus = sum(accelerators.pod_count(s, c) for s, c in zip(pod_specs, facts.claims, strict=True))
        self._facts[target.root] = facts
        return facts

    def _uses_accelerator_claims(self, target: Target, container: Mapping[str, Any]) -> bool:
        accelerators = self.ruleset.accelerators
        return any(
            accelerators.container_uses_accelerator_claims(container, c) for c in self._target_facts(target).claims
        )

    def _gpus(self, target: Target) -> int:
        return self._target_facts(target).gpus

    def _eval(self, rule: Rule, target: Target, expression: CompiledExpression) -> Any:
        """Run one of the rule's expressions on this target within the request's limits.

        Expressions with their rule's params compiled in share one activation per target:
        the runtime converts each variable on first use and keeps it, so the object is
        converted once per request (and per state of the working copy), not once per rule.
        """
        self._check_limits(target)
        if id(expression) not in self.projection.covered:
            # not an expression of the candidate rules (cannot happen with rules from the loader):
            # the projection for every expression compiled in this environment still covers it
            trees = self.ruleset.env.projection_trees()
            return _evaluate(expression, self._activation(target, rule.params, rule.references, trees))
        if not expression.params_bound:
            activation = self._activation(target, rule.params, rule.references, self.projection.trees)
            return _evaluate(expression, activation)
        version = self._version()
        cached = self._activations.get(target.root)
        if cached is None or cached[0] != version:
            cached = (version, self._activation(target, None, self.ruleset.references, self.projection.trees))
            self._activations[target.root] = cached
        return _evaluate(expression, cached[1])

    def _activation(self, target: Target, params: Any, references: frozenset[str], trees: Mapping[str, Tree]) -> Any:
        facts = self._target_facts(target)
        # only what the expressions read: the runtime converts each variable deeply (projection.py)
        admission = self.admission
        fixed = self._fixed.get(id(trees))
        if fixed is None:  # the variables mutations do not change: projected once per request
            fixed = self._fixed[id(trees)] = (
                project(admission.old_object, trees["oldObject"]),
                project(admission.request, trees["request"]),
                project(admission.namespace_object, trees["namespaceObject"]),
            )
        variables = {
            "object": project(admission.object if admission.object is None else self.working, trees["object"]),
            "oldObject": fixed[0],
            "request": fixed[1],
            "namespaceObject": fixed[2],
            "params": params,  # None in the shared activation: each expression there binds its own
            "podSpec": project(facts.pod_specs[0], trees["podSpec"]) if len(facts.pod_specs) == 1 else None,
            "podSpecs": facts.pod_specs,
            "containers": facts.containers,
            "target": target.description,
            "targetGpuCount": facts.gpus,
            "accelerators": self.ruleset.env.accelerator_table,
            "priorityClasses": self.admission.priority_classes,
            "defaultPriorityClass": self._default_priority_class(),
        }
        if "deviceClaims" in references:
            variables["deviceClaims"] = [claim for claims in facts.claims for claim in claims.items]
        if "containerGpus" in references:
            variables["containerGpus"] = facts.container_gpus(self.ruleset.accelerators)
        if "quantities" in references:
            variables["quantities"] = facts.quantities()
        return self.ruleset.env.activation(variables)

    def _default_priority_class(self) -> str | None:
        classes = self.admission.priority_classes
        if classes is None:
            return None
        if self._default_class is None:
            self._default_class = default_priority_class(classes) or ""
        return self._default_class

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

    def _record(self, rule: Rule, target: Target, message: str, error: bool = False) -> None:
        action = rule.action
        relaxed = action == Action.DENY and self.mode == Mode.AUDIT
        if relaxed:
            action = Action.AUDIT
        violation = Violation(
            rule=rule.name, action=action, message=message, target=target.description, relaxed=relaxed, error=error
        )
        bucket = {
            Action.DENY: self.decision.violations,
            Action.WARN: self.decision.warnings,
            Action.AUDIT: self.decision.audits,
        }[action]
        bucket.append(violation)

    def _error(self, rule: Rule, target: Target, entry: RuleTrace, message: str) -> None:
        entry.result = "error"
        entry.message = message
        self.decision.errors.append(EvaluationError(rule.name, target.description, message))
        if rule.failure_policy == "Fail":
            self._record(rule, target, f"rule {rule.name} could not be evaluated: {message}", error=True)

    def _check_limits(self, target: Target) -> None:
        """Before each expression: the request's CPU time budget and the target's size; a RuleError past either."""
        if (
            self.deadline is not None
            and time.perf_counter() > self.deadline
            and time.thread_time() - self.cpu_start > (self.limits.time_budget or 0)
        ):
            budget_ms = (self.limits.time_budget or 0) * 1000
            raise RuleError(
                f"CPU time budget of {budget_ms:g} ms for this request exceeded (--rule-time-budget; "
                "see docs/security.md, 'Evaluation limits')"
            )
        if self._largest is None:
            # once, on the object as sent: mutations only add a few small items
            self._largest = _largest_collection(self.working, self.limits.max_collection)
        largest = self._largest
        if largest > self.limits.max_collection:
            raise RuleError(
                f"{target.description}: the object is too large to evaluate: a list or map of {largest} items "
                f"(limit {self.limits.max_collection})"
            )


@dataclass(frozen=True, slots=True)
class _Projection:
    """What the CEL variables are cut down to for a set of candidate rules (projection.py)."""

    trees: Mapping[str, Tree]
    covered: frozenset[int]  # ids of the expressions the trees were computed from


def rule_expressions(rule: Rule, phase: Phase = Phase.ALL) -> list[CompiledExpression]:
    """The CEL expressions of a rule that run in `phase`: match condition, mutations, validation, message."""
    validation = rule.validate if phase != Phase.MUTATE else None
    mutations = rule.mutations if phase != Phase.VALIDATE else ()
    if validation is None and not mutations:
        return []
    found: list[CompiledExpression] = [rule.match.condition] if rule.match.condition is not None else []
    if validation is not None:
        found.append(validation.expression)
    if validation is not None and validation.message_expression is not None:
        found.append(validation.message_expression)
    found.extend(e for mutation in mutations for e in mutation_expressions(mutation))
    return found


def _projection(ruleset: RuleSet, candidates: tuple[Rule, ...], phase: Phase) -> _Projection:
    """The projection for these candidates in this phase, computed once per rule set, (kind, operation), phase."""
    cache = ruleset.env.projections
    key = (id(candidates), phase)
    found = cache.get(key)
    if found is not None and found[0] is candidates:
        cached: _Projection = found[1]
        return cached
    expressions = [e for rule in candidates for e in rule_expressions(rule, phase)]
    projection = _Projection(merge(e.paths for e in expressions), frozenset(id(e) for e in expressions))
    cache[key] = (candidates, projection)
    return projection


def _largest_collection(document: Any, limit: int) -> int:
    """Size of the largest list or map inside document, or 0 when none can exceed limit.

    In JSON every item of a collection but its last is followed by a comma, so a document
    with fewer than `limit` commas in all has no collection over the limit: one C-speed
    count settles nearly every request. Otherwise the tree is walked, with exact type
    checks (JSON and YAML give plain dicts and lists; ABC checks cost twice as much).
    """
    try:
        if orjson.dumps(document).count(b",") < limit:
            return 0
    except (TypeError, orjson.JSONEncodeError):
        pass  # values JSON cannot carry (offline YAML): walk instead
    largest = 0
    stack = [document]
    while stack:  # iterative: a 10,000-deep object must not hit the recursion limit
        node = stack.pop()
        if type(node) is dict:
            size = len(node)
            stack.extend([v for v in node.values() if type(v) is dict or type(v) is list])
        elif type(node) is list:
            size = len(node)
            stack.extend([v for v in node if type(v) is dict or type(v) is list])
        else:
            continue
        if size > largest:
            largest = size
            if largest > limit:
                break
    return largest


def _evaluate(expression: CompiledExpression, activation: Any) -> Any:
    try:
        return expression.evaluate(activation)
    except CelEvaluationError as error:
        raise RuleError(str(error)) from None
    except Exception as error:  # a helper's own failure surfaces as a rule error, never a crash
        raise RuleError(f"{type(error).__name__}: {error}") from None


def _failures(result: Any) -> list[str] | None:
    """true passes; a list of strings is one failure each (empty passes); anything else is None."""
    if result is True:
        return []
    if isinstance(result, list) and all(isinstance(item, str) for item in result):
        return list(result)
    return None


@dataclass(slots=True)
class _TargetFacts:
    version: int  # of the working copy these were read from
    pod_specs: list[Any]
    containers: list[Any]
    gpus: int
    claims: list[PodClaims] = field(default_factory=list)  # per pod spec, in pod_specs order
    _container_gpus: dict[str, int] | None = None
    _quantities: dict[str, float] | None = None

    def container_gpus(self, accelerators: Accelerators) -> dict[str, int]:
        """Container name -> accelerators (extended resources and DRA claims it names).

        Names are unique within a pod spec, not across the templates of one object: every
        Kubeflow replica's container is called `pytorch`. A name whose containers differ in
        count maps to -1, and the rewritten containerGpuCount(c) then asks the Python helper
        for that container (celhelpers.py).
        """
        if self._container_gpus is None:
            found: dict[str, int] = {}
            claims_per_spec = self.claims or [NO_CLAIMS] * len(self.pod_specs)
            for spec, claims in zip(self.pod_specs, claims_per_spec, strict=True):
                for container in _containers([spec]):
                    if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                        continue
                    count = accelerators.container_count(container)
                    count += accelerators.container_claim_count(container, claims)
                    name = container["name"]
                    found[name] = count if found.get(name, count) == count else -1
            self._container_gpus = found
        return self._container_gpus

    def quantities(self) -> dict[str, float]:
        """Every quantity written in the containers' resources, by its text (as CEL's string() gives it)."""
        if self._quantities is None:
            found: dict[str, float] = {}
            for container in self.containers:
                resources = container.get("resources") if isinstance(container, Mapping) else None
                if not isinstance(resources, Mapping):
                    continue
                for section in (resources.get("requests"), resources.get("limits")):
                    if isinstance(section, Mapping):
                        for value in section.values():
                            number = _quantity_value(value)
                            if number is not None:
                                found[str(value)] = number  # str(): the text CEL's string() gives
            self._quantities = found
        return self._quantities


def _quantity_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    number = quantity_of(str(value))
    return None if number is None else float(number)


def _containers(pod_specs: list[Any]) -> list[Any]:
    found: list[Any] = []
    for spec in pod_specs:
        if isinstance(spec, Mapping):
            # ephemeral containers (kubectl debug) run on the node as well: rules about what runs
            # there see them; they cannot request resources (core/v1 EphemeralContainerCommon)
            for field_name in ("initContainers", "containers", "ephemeralContainers"):
                value = spec.get(field_name)
                if isinstance(value, list):
                    found.extend(value)
    return found


def _edits_containers(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations may change the target's containers (conservative)."""
    specs = [to_pointer(path) + "/" for path in target.pod_specs]
    for operation in operations:
        path = operation["path"]
        if "ontainers" in path or "resourceClaims" in path or any(spec.startswith(path + "/") for spec in specs):
            return True  # into (init)containers or DRA claims, or an ancestor of the pod spec replaced
    return False


def _copy(document: dict[str, Any]) -> dict[str, Any]:
    try:
        return orjson.loads(orjson.dumps(document))  # type: ignore[no-any-return]
    except (TypeError, orjson.JSONEncodeError):
        # values JSON cannot carry (YAML timestamps, huge ints), or nesting past the 255 levels
        # orjson writes (it reads 1,024): copy without recursion, whatever the depth
        return _deep_copy(document)


def _deep_copy(document: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any]] = [(document, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            if isinstance(value, dict | list):
                child: Any = {} if isinstance(value, dict) else [None] * len(value)
                stack.append((value, child))
                value = child
            elif not isinstance(value, str | int | float | bool | type(None)):
                value = copy.deepcopy(value)  # a leaf of another type (date, Decimal): shallow depth
            target[key] = value
    return root
