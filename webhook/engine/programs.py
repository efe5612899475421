"""How one evaluation runs its rules' CEL: which activation an expression gets, and fused programs.

Every expression a rule runs goes through `Programs.eval`, within the request's limits. Most
share one activation per target and state of the working copy (the runtime converts each
variable once per activation); an expression of the namespace alone is answered once per
namespace version; and once the working copy no longer changes, the validating rules'
expressions run as one fused CEL program per target. The activation holds only the variables
the expressions read, each projected to the fields they read (projection.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from webhook.cel.reads import WHOLE, Tree, project
from webhook.cel.results import plain_result

from .cel import CelEvaluationError, CompiledExpression
from .decision import RuleError
from .facts import WorkingCopy
from .limits import Budget
from .pointer import Path, get_path, is_map
from .policy import Rule
from .projection import NAMESPACE_VARIABLES, FusedProgram, Projection
from .request import AdmissionInput, default_priority_class
from .ruleset import RuleSet
from .workloads import Target

# Variables made from the target's facts (pod specs, containers, counts): an activation whose
# expressions read none of them does not compute the facts.
FACT_VARIABLES = frozenset(
    {
        "podSpec",
        "podSpecs",
        "containers",
        "targetGpuCount",
        "targetWholeGpuCount",
        "deviceClaims",
        "containerGpus",
        "allocatorEnv",
        "quantities",
    }
)
# The variables that hold the facts' own values (podSpec, a projection, is checked on its own)
FACTS_HELD = FACT_VARIABLES - {"podSpec"}
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


class Programs:
    """The CEL of one evaluation: each expression evaluated on its target's activation, or fused."""

    def __init__(
        self, ruleset: RuleSet, admission: AdmissionInput, projection: Projection, budget: Budget, copy: WorkingCopy
    ) -> None:
        self.ruleset = ruleset
        self.admission = admission
        self.projection = projection
        self.budget = budget
        self.copy = copy  # what the expressions read: the working copy and its targets' facts
        # target root -> (version of the working copy it was made at, the activation every params-bound
        # expression shares, the target's facts it holds or None)
        self._activations: dict[tuple[str | int, ...], tuple[int, Any, Any]] = {}
        self._default_class: str | None = None
        # id of the projection trees -> projected (oldObject, request, namespaceObject)
        self._fixed: dict[int, tuple[Any, Any, Any]] = {}
        self._namespace_version = namespace_version(admission.namespace_object, admission.namespace_unchanging)
        # Set by fuse_validations once the working copy no longer changes: the validating rules'
        # expressions are then evaluated fused
        self.fuse = False
        # target root -> the validating rules that passed the plain checks on it, in file order
        self._passing: dict[tuple[str | int, ...], list[Rule]] = {}
        # target root -> id of an expression -> its fused result
        self._fused: dict[tuple[str | int, ...], dict[int, Any]] = {}

    def eval(self, rule: Rule, target: Target, expression: CompiledExpression) -> Any:
        """Run one of the rule's expressions on this target within the request's limits.

        Expressions with their rule's params compiled in share one activation per target:
        the runtime converts each variable on first use and keeps it, so the object is
        converted once per request (and per state of the working copy), not once per rule.
        """
        budget = self.budget
        # the check itself only once the size has passed and until the wall-clock deadline (a call saved per expression)
        if not budget.clear or (budget.deadline is not None and time.perf_counter() > budget.deadline):
            budget.check(target, self.copy.working, expression)
        # only expressions the fused program holds have a result there; it runs them unchecked, so
        # not while the object holds a collection over the size limit (limits.py)
        if self.fuse and budget.clear:
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
            # the common case
            return evaluate_expression(expression, self._shared_activation(target, expression))
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
                    # `true`. Not null in the other branch: nothing to give back to None (webhook/cel/results.py)
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
        """An expression of the namespace alone, evaluated once per namespace version (namespace_version).

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
        return evaluate_expression(expression, self._shared_activation(target, expression))

    def _shared_activation(self, target: Target, expression: CompiledExpression | None = None) -> Any:
        """The activation every params-bound expression of the target shares, for `expression` (None:
        for any of the projection's, as the fused program).

        Made again after an edit only when the edit reaches what the expression reads of the working
        copy (`_stale`): the runtime converts each variable of an activation once, deeply, on its
        first use, so a kept activation spares converting the object again for the mutating rules
        after an edit that reads none of what it changed (a toleration added, then labels read).
        """
        patcher = self.copy.patcher
        version = len(patcher.operations) if patcher is not None else 0  # self.copy.version(), inline
        cached = self._activations.get(target.root)
        if cached is None or (cached[0] != version and self._stale(target, cached, expression)):
            projection = self.projection
            facts = None if projection.references.isdisjoint(FACT_VARIABLES) else self.copy.facts(target)
            cached = (version, self._activation(target, None, projection.references, projection.trees), facts)
            self._activations[target.root] = cached
        return cached[1]

    def _stale(self, target: Target, cached: tuple[int, Any, Any], expression: CompiledExpression | None) -> bool:
        """Whether the edits since `cached` was made may change what `expression` (None: any of the
        projection's) reads of its variables.

        An expression's answer depends only on the fields it reads (webhook/cel/reads.py: its read
        trees, a superset); those of object, podSpec and podMetadata are what the activation held
        when made unless an edit since reaches one of them (`edit_reaches`), whether the runtime
        converted the variable before the edit or converts it now: each is a projection, a document
        of its own down to the trees' leaves, which keep the working copy's values. The other
        variables of the pod specs are their facts': kept while facts() keeps them (facts.py).
        """
        patcher = self.copy.patcher
        assert patcher is not None  # the version moved: something was edited
        edits = patcher.paths[cached[0] :]
        if expression is None:
            reads, trees = self.projection.references, self.projection.trees
        else:
            reads, trees = expression.references, self.projection.own_trees[id(expression)]
        if "object" in reads and any(edit_reaches(trees["object"], path) for path in edits):
            return True
        if len(target.pod_specs) == 1:
            for name, place in (("podSpec", target.pod_specs[0]), ("podMetadata", target.pod_metadata[0])):
                if name in reads and any(edit_reaches(trees[name], path, place) for path in edits):
                    return True
        return not reads.isdisjoint(FACTS_HELD) and self.copy.facts(target) is not cached[2]

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
                admission.object if admission.object is None else self.copy.working, trees["object"]
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
        if "kueueQueues" in references:
            variables["kueueQueues"] = admission.kueue_queues
        if "defaultPriorityClass" in references:
            variables["defaultPriorityClass"] = self._default_priority_class()
        if "podMetadata" in references:
            # not a fact: facts outlive edits of labels and annotations (facts.py), this must not
            variables["podMetadata"] = project(self._pod_metadata(target), trees["podMetadata"])
        if references.isdisjoint(FACT_VARIABLES):
            # nothing here reads the pod specs: their facts (retaken after every edit) are not needed
            return self.ruleset.env.activation(variables)
        facts = self.copy.facts(target)
        if "podSpec" in references:
            variables["podSpec"] = project(facts.pod_specs[0], trees["podSpec"]) if len(facts.pod_specs) == 1 else None
        if "podSpecs" in references:
            variables["podSpecs"] = facts.pod_specs
        if "containers" in references:
            variables["containers"] = facts.containers
        if "targetGpuCount" in references:
            variables["targetGpuCount"] = facts.gpus
        if "targetWholeGpuCount" in references:
            variables["targetWholeGpuCount"] = facts.whole_gpus(self.ruleset.accelerators)
        if "deviceClaims" in references:
            variables["deviceClaims"] = [claim for claims in facts.claims for claim in claims.items] + facts.own_claims
        if "containerGpus" in references:
            variables["containerGpus"] = facts.container_gpus(self.ruleset.accelerators)
        if "allocatorEnv" in references:
            variables["allocatorEnv"] = facts.allocator_env(self.ruleset.accelerators)
        if "quantities" in references:
            variables["quantities"] = facts.quantities()
        return self.ruleset.env.activation(variables)

    def _pod_metadata(self, target: Target) -> Any:
        """The metadata beside the target's one pod spec (a Pod's own, a template's); None when it has
        several pod specs (as podSpec) or the object has none there."""
        if len(target.pod_specs) != 1:
            return None
        return get_path(self.copy.working, target.pod_metadata[0])

    def _default_priority_class(self) -> str | None:
        classes = self.admission.priority_classes
        if classes is None:
            return None
        if self._default_class is None:
            self._default_class = default_priority_class(classes) or ""
        return self._default_class


def namespace_version(namespace: Mapping[str, Any] | None, unchanging: bool = False) -> tuple[str, str] | None:
    """What names this content of a Namespace: (uid, resourceVersion) as the API serves it; else, when
    the door never edits it (AdmissionInput.namespace_unchanging), the dict itself (`_namespace_result`
    then reuses an answer only for that very dict, which its table keeps alive, so the id stays its
    own); else None: nothing is kept."""
    if not is_map(namespace):
        return None
    metadata = namespace.get("metadata")
    if is_map(metadata):
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if isinstance(uid, str) and uid and isinstance(version, str) and version:
            return uid, version
    return ("", str(id(namespace))) if unchanging else None


def edit_reaches(tree: Tree, path: Path, place: Path = ()) -> bool:
    """Whether an edit at `path` (a Patcher's steps) may change what a projection by `tree` of the
    value at `place` holds: it writes at or below one of the tree's leaves, or replaces a node on
    the way to one. A list index (or an append's "-") below a node the tree still cuts counts as
    reaching it: project() keeps lists whole."""
    if path[: len(place)] != place:
        return place[: len(path)] == path  # outside the value, unless it replaces an ancestor of it
    node = tree
    for step in path[len(place) :]:
        if node is WHOLE or type(step) is not str or step == "-":
            return True
        if step not in node:
            return False
        node = node[step]
    return True  # at a node of the tree: the edit replaces what it reads


def evaluate_expression(expression: CompiledExpression, activation: Any) -> Any:
    try:
        return expression.evaluate(activation)
    except CelEvaluationError as error:
        raise RuleError(str(error)) from None
    except Exception as error:  # a helper's own failure surfaces as a rule error, never a crash
        raise RuleError(f"{type(error).__name__}: {error}") from None
