"""What the rules of one evaluation read about the object: its targets, per-target facts, the CEL activation.

`Subject` holds the working copy (the object, copied on the first edit, then changed only
through its Patcher) and everything derived from it: the targets rules look at, their facts
(pod specs, containers, GPU counts, DRA claims, quantities) and the activations expressions run
in, each computed once per state of the working copy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .cel import CelEvaluationError, CompiledExpression, plain_result
from .limits import Budget
from .loader import _mutation_expressions as mutation_expressions  # the loader's list, for references too
from .model import AdmissionInput, Phase, Rule, RuleError, Target, default_priority_class
from .patch import Patcher
from .pointer import is_map, to_pointer
from .projection import Tree, merge, project
from .quantity import quantity_of
from .resources import NO_CLAIMS, Accelerators, PodClaims
from .ruleset import RuleSet
from .workloads import get_path, object_target, pod_spec_paths, pod_template_targets


@dataclass(frozen=True, slots=True)
class Projection:
    """What the CEL variables are cut down to for a set of candidate rules (projection.py)."""

    trees: Mapping[str, Tree]
    covered: frozenset[int]  # ids of the expressions the trees were computed from
    references: frozenset[str] = frozenset()  # variables those expressions read: what the shared activation holds
    # the candidates that mutate / validate in this phase, in file order: the run's two loops
    mutating: tuple[Rule, ...] = ()
    validating: tuple[Rule, ...] = ()
    # (id of an expression, namespace uid, resourceVersion) -> (the expression, the Namespace, its result), for
    # expressions of the namespace alone (Subject._namespace_result); lives as long as the rule set
    namespace_results: dict[tuple[int, str, str], tuple[CompiledExpression, Any, Any]] = field(
        default_factory=dict, compare=False, hash=False
    )
    # id of a validating rule with an expression that can be fused -> (its condition, its validation,
    # whether each reads the namespace alone); an expression that cannot (params without a CEL
    # literal) is None and runs alone (Subject._fused_results)
    fusion: Mapping[int, tuple[CompiledExpression | None, CompiledExpression | None, bool, bool]] = field(
        default_factory=dict, compare=False, hash=False
    )
    # the fused programs of the validating phase (Subject._fused_results), by what they hold: the ids
    # of each member's fused condition and validation (0: not fused); None when one did not compile
    fused: dict[tuple[tuple[int, int], ...], FusedProgram | None] = field(
        default_factory=dict, compare=False, hash=False
    )


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


def projection_for(ruleset: RuleSet, candidates: tuple[Rule, ...], phase: Phase) -> Projection:
    """The projection for these candidates in this phase, computed once per rule set, (kind, operation), phase."""
    cache = ruleset.env.projections
    key = (id(candidates), phase)
    found = cache.get(key)
    if found is not None and found[0] is candidates:
        cached: Projection = found[1]
        return cached
    expressions = [e for rule in candidates for e in rule_expressions(rule, phase)]
    validating = tuple(rule for rule in candidates if rule.validate is not None) if phase != Phase.MUTATE else ()
    projection = Projection(
        merge(e.paths for e in expressions),
        frozenset(id(e) for e in expressions),
        frozenset().union(*(e.references for e in expressions)),
        tuple(rule for rule in candidates if rule.mutations) if phase != Phase.VALIDATE else (),
        validating,
        fusion=_fusion(validating),
    )
    cache[key] = (candidates, projection)
    return projection


def _fusion(
    rules: tuple[Rule, ...],
) -> dict[int, tuple[CompiledExpression | None, CompiledExpression | None, bool, bool]]:
    """Projection.fusion: the validating rules' expressions that a fused program may hold."""
    found = {}
    for rule in rules:
        assert rule.validate is not None
        condition = rule.match.condition
        fused_condition = condition if condition is not None and condition.bound_source is not None else None
        validation = rule.validate.expression
        fused_validation = validation if validation.bound_source is not None else None
        if fused_condition is not None or fused_validation is not None:
            found[id(rule)] = (
                fused_condition,
                fused_validation,
                fused_condition is not None and fused_condition.references <= NAMESPACE_VARIABLES,
                fused_validation is not None and fused_validation.references <= NAMESPACE_VARIABLES,
            )
    return found


# Variables made from the target's facts (pod specs, containers, counts): an activation whose
# expressions read none of them does not compute the facts.
FACT_VARIABLES = frozenset(
    {"podSpec", "podSpecs", "containers", "targetGpuCount", "deviceClaims", "containerGpus", "quantities"}
)
# An expression that reads nothing but these gives the same answer for every request in one
# version of a namespace (params and the accelerator table are fixed per rule set).
NAMESPACE_VARIABLES = frozenset({"namespaceObject", "params", "accelerators"})
# Results kept per (expression, namespace version) before the table starts over (a rule set
# has a few hundred such expressions at most; a cluster a few thousand namespaces)
NAMESPACE_RESULTS_LIMIT = 8192
# Sets of passing rules remembered per projection (each with its fused program, or None): one per
# set of rules that pass the plain checks (namespace, selectors, gpu:) on some target, a handful
# in practice. Past this, or past the rule set's share of compiled programs (cel.py
# MAX_FUSED_PER_RULE_SET: compiling costs milliseconds and memory, and a stream of odd objects
# must pay for neither), requests evaluate each expression alone, as without fusion.
FUSED_PROGRAMS_LIMIT = 64
# the name the fused program binds a condition's result to (compile() refuses free variables, so no
# rule's text can mean this binding)
_FUSED_CONDITION = "gwFusedCondition"
_MISSING = object()


@dataclass(frozen=True, slots=True)
class FusedProgram:
    """Several expressions of one phase as one CEL program: `[[c, c == true ? dyn(v) : false], [v], [c], ...]`.

    `members` says, per list item, which expression ids sit in it: (condition id, validation id),
    0 where the item has none. A validation behind a condition runs only when the condition gives
    true (the CEL conditional does not evaluate the other branch), as the rule itself would.
    """

    program: Any
    members: tuple[tuple[int, int], ...]


class Subject:
    """The object of one evaluation as the rules see it, and what is derived from it."""

    def __init__(self, ruleset: RuleSet, admission: AdmissionInput, projection: Projection, budget: Budget) -> None:
        self.ruleset = ruleset
        self.admission = admission
        self.projection = projection
        self.budget = budget
        self.working: dict[str, Any] = admission.subject  # type: ignore[assignment]
        self.patcher: Patcher | None = None
        self._templates: list[Target] | None = None
        self._object_target: Target | None = None
        self._facts: dict[tuple[str | int, ...], TargetFacts] = {}
        # target root -> (version of the working copy, the activation every params-bound expression shares)
        self._activations: dict[tuple[str | int, ...], tuple[int, Any]] = {}
        self._default_class: str | None = None
        # id of the projection trees -> projected (oldObject, request, namespaceObject)
        self._fixed: dict[int, tuple[Any, Any, Any]] = {}
        # pod spec path -> accelerators it asks for in the object as received (Decision.accelerators)
        self._received: dict[tuple[str | int, ...], int] = {}
        self._namespace_version = namespace_version(admission.namespace_object)
        # Set by fuse_validations once the working copy no longer changes: the validating rules'
        # expressions are then evaluated fused
        self.fuse = False
        # target root -> the validating rules that passed the plain checks on it, in file order
        self._passing: dict[tuple[str | int, ...], list[Rule]] = {}
        # target root -> id of an expression -> its fused result
        self._fused: dict[tuple[str | int, ...], dict[int, Any]] = {}

    def edit(self) -> Patcher:
        """The patcher of the working copy, made on the first edit.

        The working copy starts as a shallow copy of the object: the patcher copies what lies
        on an edit's path before changing it (patch.py), so the object as received (what
        ratcheting, Decision.accelerators and the audit's diff read) stays as it was.
        """
        if self.patcher is None:
            self.working = dict(self.working)
            self.patcher = Patcher(self.working)
        return self.patcher

    def version(self) -> int:
        """The working copy changes only through the Patcher: its operation count is the version."""
        return len(self.patcher.operations) if self.patcher is not None else 0

    def targets(self, rule: Rule) -> list[Target]:
        """What the rule looks at in the object: the object itself, or each pod template (autogen)."""
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

    def facts(self, target: Target) -> TargetFacts:
        """What every rule needs to know about a target, computed once per state of the working copy.

        Counting GPUs walks every container's resources; per rule it was a third of a request's
        cost. After an edit the references are re-taken, and what was read from the containers'
        resources is kept unless an edit reached into containers or replaced an ancestor.
        """
        version = self.version()
        cached = self._facts.get(target.root)
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and self.patcher is not None:
            edits = self.patcher.operations[cached.version :]
            if not edits_pod_specs(edits, target):
                # labels, annotations: the pod specs read before are still what the working copy
                # holds (the same values, if not the same dicts once the object was copied)
                cached.version = version
                return cached
        pod_specs = [get_path(self.working, path) for path in target.pod_specs]
        facts = TargetFacts(version=version, pod_specs=pod_specs, containers=pod_containers(pod_specs), gpus=0)
        accelerators = self.ruleset.accelerators
        if (
            cached is not None
            and self.patcher is not None
            and not edits_containers(self.patcher.operations[cached.version :], target)
        ):
            facts.gpus, facts.claims = cached.gpus, cached.claims
            facts._container_gpus, facts._quantities = cached._container_gpus, cached._quantities
            facts._accelerated = cached._accelerated
        else:
            admission = self.admission
            facts.claims = [
                accelerators.pod_claims(spec, admission.resource_claims, admission.resource_claim_templates)
                for spec in pod_specs
            ]
            counts = [accelerators.pod_count(s, c) for s, c in zip(pod_specs, facts.claims, strict=True)]
            facts.gpus = sum(counts)
            if version == 0:  # the object as received: Decision.accelerators needs no second count
                self._received.update(zip(target.pod_specs, counts, strict=True))
        self._facts[target.root] = facts
        return facts

    def received_accelerators(self) -> int:
        """Decision.accelerators: what the object as received asks for, reusing the counts rules made."""
        return object_accelerators(self.ruleset.accelerators, self.admission, self._received)

    def uses_accelerator_claims(self, target: Target, container: Mapping[str, Any]) -> bool:
        accelerators = self.ruleset.accelerators
        return any(accelerators.container_uses_accelerator_claims(container, c) for c in self.facts(target).claims)

    def eval(self, rule: Rule, target: Target, expression: CompiledExpression) -> Any:
        """Run one of the rule's expressions on this target within the request's limits.

        Expressions with their rule's params compiled in share one activation per target:
        the runtime converts each variable on first use and keeps it, so the object is
        converted once per request (and per state of the working copy), not once per rule.
        """
        budget = self.budget
        # the check itself only once the size has passed and until the wall-clock deadline (a call saved per expression)
        if not budget.clear or (budget.deadline is not None and time.perf_counter() > budget.deadline):
            budget.check(target, self.working)
        if self.fuse:  # only expressions the fused program holds have a result there
            fused = self._fused.get(target.root)
            if fused is None:
                self._fused[target.root] = {}  # meanwhile (the conditions it asks alone): nothing fused
                fused = self._fused[target.root] = self._fused_results(target)
            found = fused.get(id(expression), _MISSING)
            if found is not _MISSING:
                return found
        if self._namespace_version is not None and expression.references <= NAMESPACE_VARIABLES:
            return self._namespace_result(rule, target, expression, self._namespace_version)
        if expression.params_bound and id(expression) in self.projection.covered:
            return evaluate_expression(expression, self._shared_activation(target))  # the common case
        return self._evaluate(rule, target, expression)

    # -- fused evaluation ----------------------------------------------------------------------------
    # The runtime costs a few µs per evaluation whatever the expression (and the engine's Python
    # around each call as much again); a GPU pod's /validate makes ~20. While the validating rules
    # run, the working copy does not change, so the conditions and validations of every rule that
    # passes the plain checks on a target run as ONE program on the shared activation, and each
    # rule then reads its own result. Any error in the fused program (one rule's expression, or the
    # iteration budget, which counts the whole program) drops the fused results: every expression is
    # then evaluated alone, exactly as without fusion, so an error is reported by its own rule only.

    def fuse_validations(self, passing: list[tuple[Rule, Target]]) -> None:
        """From now on the working copy does not change: the expressions of these (rule, target)
        pairs, the validating rules that passed matching.gate, are evaluated fused per target."""
        for rule, target in passing:
            self._passing.setdefault(target.root, []).append(rule)
        self.fuse = True

    def _fused_results(self, target: Target) -> dict[int, Any]:
        """id of an expression -> its result, for the validating rules' expressions on this target."""
        members: list[tuple[int, int]] = []
        # an expression of the namespace alone is answered from the namespace answers, not fused
        by_namespace = self._namespace_version is not None
        fusion = self.projection.fusion
        for rule in self._passing.get(target.root, ()):
            fusible = fusion.get(id(rule))
            if fusible is None:
                continue
            fusible_condition, fusible_validation, condition_alone, validation_alone = fusible
            condition = rule.match.condition
            fused_condition = fusible_condition is not None and not (by_namespace and condition_alone)
            if condition is not None and not fused_condition and not self._condition_holds(rule, target, condition):
                continue  # the rule will not reach its validation (or its condition errs on its own turn)
            fused_validation = fusible_validation is not None and not (by_namespace and validation_alone)
            if fused_condition or fused_validation:
                members.append(
                    (
                        id(fusible_condition) if fused_condition else 0,
                        id(fusible_validation) if fused_validation else 0,
                    )
                )
        if len(members) < 2:
            return {}  # nothing to share a call with
        fused = self._fused_program(tuple(members))
        if fused is None:
            return {}
        try:
            values = plain_result(fused.program.eval(self._shared_activation(target)))
        except Exception:  # the iteration budget (RuntimeError) or a helper's failure: evaluate alone
            return {}
        if type(values) is not list or len(values) != len(fused.members):
            return {}  # an error: its plain value is its message
        results: dict[int, Any] = {}
        for (condition_id, validation_id), value in zip(fused.members, values, strict=True):
            if condition_id:
                results[condition_id] = value[0]
                if validation_id and value[0] is True:
                    results[validation_id] = value[1]
            elif validation_id:
                results[validation_id] = value[0]
        return results

    def _condition_holds(self, rule: Rule, target: Target, condition: CompiledExpression) -> bool:
        """Whether a condition the fused program does not hold (kept per namespace version, or per
        rule) is true; an error counts as no, and the rule meets it again on its own turn."""
        try:
            return self.eval(rule, target, condition) is True
        except RuleError:
            return False

    def _fused_program(self, members: tuple[tuple[int, int], ...]) -> FusedProgram | None:
        programs = self.projection.fused
        if members in programs:
            return programs[members]
        if len(programs) >= FUSED_PROGRAMS_LIMIT:
            return None
        # the members' texts: what Projection.fusion says each fusible expression runs
        texts = {
            id(e): e.bound_source for fusible in self.projection.fusion.values() for e in fusible[:2] if e is not None
        }
        items = []
        for condition_id, validation_id in members:
            if condition_id and validation_id:
                items.append(
                    # dyn(): the checker wants one type for both branches, and any condition type may meet
                    # `true`. Not null in the other branch: nothing to give back to None (cel.plain_result)
                    f"cel.bind({_FUSED_CONDITION}, dyn({texts[condition_id]}), "
                    f"[{_FUSED_CONDITION}, {_FUSED_CONDITION} == true ? dyn({texts[validation_id]}) : false])"
                )
            else:
                items.append(f"[{texts[condition_id or validation_id]}]")
        program = self.ruleset.env.compile_program("[" + ", ".join(items) + "]")
        fused = None if program is None else FusedProgram(program, members)
        programs[members] = fused
        return fused

    def _namespace_result(
        self, rule: Rule, target: Target, expression: CompiledExpression, version: tuple[str, str]
    ) -> Any:
        """An expression of the namespace alone, evaluated once per namespace version (uid, resourceVersion).

        The namespace cache holds each Namespace as the watch delivered it, and the apiserver gives
        every change a new resourceVersion: until then the answer cannot change. Offline, the same
        (uid, resourceVersion) may sit on copies with other labels (a suite or a manifest that
        copied an exported Namespace), so an answer is reused only for the same content: the very
        object (the server's case, the watch cache's own dict) or an equal one. Plain values only
        (a list or map could be edited by whoever receives it); errors are never kept.
        """
        results = self.projection.namespace_results
        namespace = self.admission.namespace_object
        key = (id(expression), *version)
        found = results.get(key)
        if found is not None and found[0] is expression and (found[1] is namespace or found[1] == namespace):
            return found[2]
        result = self._evaluate(rule, target, expression)
        if result is None or type(result) in (bool, int, float, str):
            if len(results) >= NAMESPACE_RESULTS_LIMIT:
                results.clear()
            results[key] = (expression, namespace, result)  # the expression itself: its id stays its own
        return result

    def _evaluate(self, rule: Rule, target: Target, expression: CompiledExpression) -> Any:
        if id(expression) not in self.projection.covered:
            # not an expression of the candidate rules (cannot happen with rules from the loader):
            # the projection for every expression compiled in this environment still covers it
            trees = self.ruleset.env.projection_trees()
            references = rule.references | expression.references
            return evaluate_expression(expression, self._activation(target, rule.params, references, trees))
        if not expression.params_bound:
            references = rule.references | expression.references
            activation = self._activation(target, rule.params, references, self.projection.trees)
            return evaluate_expression(expression, activation)
        return evaluate_expression(expression, self._shared_activation(target))

    def _shared_activation(self, target: Target) -> Any:
        """The activation every params-bound expression of the target shares, per state of the working copy."""
        patcher = self.patcher
        version = len(patcher.operations) if patcher is not None else 0  # self.version(), inline
        cached = self._activations.get(target.root)
        if cached is None or cached[0] != version:
            cached = (version, self._activation(target, None, self.projection.references, self.projection.trees))
            self._activations[target.root] = cached
        return cached[1]

    def _activation(self, target: Target, params: Any, references: frozenset[str], trees: Mapping[str, Tree]) -> Any:
        """The CEL variables `references` names (what the expressions to run on it read), and no others.

        Only what the expressions read: the runtime converts each variable deeply on its first use
        (projection.py), and `Activation()` itself costs ~0.4 µs per variable handed to it.
        """
        admission = self.admission
        fixed = self._fixed.get(id(trees))
        if fixed is None:  # the variables mutations do not change: projected once per request
            fixed = self._fixed[id(trees)] = (
                project(admission.old_object, trees["oldObject"]),
                project(admission.request, trees["request"]),
                project(admission.namespace_object, trees["namespaceObject"]),
            )
        variables: dict[str, Any] = {}
        if "object" in references:
            variables["object"] = project(
                admission.object if admission.object is None else self.working, trees["object"]
            )
        if "oldObject" in references:
            variables["oldObject"] = fixed[0]
        if "request" in references:
            variables["request"] = fixed[1]
        if "namespaceObject" in references:
            variables["namespaceObject"] = fixed[2]
        if "params" in references:
            variables["params"] = params  # None in the shared activation: each expression there binds its own
        if "target" in references:
            variables["target"] = target.description
        if "accelerators" in references:
            variables["accelerators"] = self.ruleset.env.accelerator_table
        if "priorityClasses" in references:
            variables["priorityClasses"] = admission.priority_classes
        if "defaultPriorityClass" in references:
            variables["defaultPriorityClass"] = self._default_priority_class()
        if references.isdisjoint(FACT_VARIABLES):
            # nothing here reads the pod specs: their facts (retaken after every edit) are not needed
            return self.ruleset.env.activation(variables)
        facts = self.facts(target)
        if "podSpec" in references:
            variables["podSpec"] = project(facts.pod_specs[0], trees["podSpec"]) if len(facts.pod_specs) == 1 else None
        if "podSpecs" in references:
            variables["podSpecs"] = facts.pod_specs
        if "containers" in references:
            variables["containers"] = facts.containers
        if "targetGpuCount" in references:
            variables["targetGpuCount"] = facts.gpus
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


def namespace_version(namespace: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(uid, resourceVersion) of a Namespace as the API serves it; None when it has no such identity (offline)."""
    metadata = namespace.get("metadata") if is_map(namespace) else None
    if not is_map(metadata):
        return None
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if isinstance(uid, str) and uid and isinstance(version, str) and version:
        return uid, version
    return None


def object_accelerators(
    accelerators: Accelerators,
    admission: AdmissionInput,
    counted: Mapping[tuple[str | int, ...], int] | None = None,
) -> int:
    """Accelerators the admission's object asks for, summed over all its pod specs (`counted`: known already)."""
    document = admission.subject
    if not isinstance(document, dict):
        return 0
    total = 0
    for path in pod_spec_paths(document):
        count = counted.get(path) if counted is not None else None
        if count is None:
            spec = get_path(document, path)
            claims = accelerators.pod_claims(spec, admission.resource_claims, admission.resource_claim_templates)
            count = accelerators.pod_count(spec, claims)
        total += count
    return total


def evaluate_expression(expression: CompiledExpression, activation: Any) -> Any:
    try:
        return expression.evaluate(activation)
    except CelEvaluationError as error:
        raise RuleError(str(error)) from None
    except Exception as error:  # a helper's own failure surfaces as a rule error, never a crash
        raise RuleError(f"{type(error).__name__}: {error}") from None


@dataclass(slots=True)
class TargetFacts:
    version: int  # of the working copy these were read from
    pod_specs: list[Any]
    containers: list[Any]
    gpus: int
    claims: list[PodClaims] = field(default_factory=list)  # per pod spec, in pod_specs order
    _container_gpus: dict[str, int] | None = None
    _quantities: dict[str, float] | None = None
    _accelerated: bool | None = None

    def accelerated(self) -> bool:
        """Whether the target asks for accelerators, as `gpu:` matching counts them (once per facts, not per rule).

        An unresolved DRA claim counts as an accelerator (resources.py explains why).
        """
        if self._accelerated is None:
            self._accelerated = self.gpus > 0 or any(claims.unresolved for claims in self.claims)
        return self._accelerated

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
                for container in pod_containers([spec]):
                    if not is_map(container) or not isinstance(container.get("name"), str):
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
                resources = container.get("resources") if is_map(container) else None
                if not is_map(resources):
                    continue
                for section in (resources.get("requests"), resources.get("limits")):
                    if is_map(section):
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


def pod_containers(pod_specs: list[Any]) -> list[Any]:
    found: list[Any] = []
    for spec in pod_specs:
        if is_map(spec):
            # ephemeral containers (kubectl debug) run on the node as well: rules about what runs
            # there see them; they cannot request resources (core/v1 EphemeralContainerCommon)
            for field_name in ("initContainers", "containers", "ephemeralContainers"):
                value = spec.get(field_name)
                if isinstance(value, list):
                    found.extend(value)
    return found


def edits_pod_specs(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations writes into, or replaces, one of the target's pod specs."""
    specs = [to_pointer(path) for path in target.pod_specs]
    for operation in operations:
        path = operation["path"]
        for spec in specs:
            if path == spec or path.startswith(spec + "/") or spec.startswith(path + "/"):
                return True
    return False


def edits_containers(operations: list[dict[str, Any]], target: Target) -> bool:
    """Whether any of these patch operations may change the target's containers (conservative)."""
    specs = [to_pointer(path) + "/" for path in target.pod_specs]
    for operation in operations:
        path = operation["path"]
        if "ontainers" in path or "resourceClaims" in path or any(spec.startswith(path + "/") for spec in specs):
            return True  # into (init)containers or DRA claims, or an ancestor of the pod spec replaced
    return False
