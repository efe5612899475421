"""What one set of candidate rules in one phase hands CEL: `Projection`, made once per rule set.

`projection_for` gives, per (kind, operation) of the rule set and phase, the merged read trees
of the candidates' expressions (webhook/cel/reads.py), the rules the run loops over, and what the CEL
programs keep for them (programs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook.cel.reads import Tree, merge

from .request import Phase

if TYPE_CHECKING:
    from .cel import CompiledExpression
    from .policy import Rule
    from .ruleset import RuleSet


# -- per candidate rules: the trees of their expressions, computed once per rule set ----------------

# An expression that reads nothing but these gives the same answer for every request in one
# version of a namespace (params and the accelerator table are fixed per rule set).
NAMESPACE_VARIABLES = frozenset({"namespaceObject", "params", "accelerators"})


@dataclass(frozen=True, slots=True)
class FusedProgram:
    """Several expressions of one phase as one CEL program (programs.py builds and runs it): `[[c, c == true ? dyn(v) : false], [v], [c], ...]`.

    `members` says, per list item, which expression ids sit in it: (condition id, validation id),
    0 where the item has none. A validation behind a condition runs only when the condition gives
    true (the CEL conditional does not evaluate the other branch), as the rule itself would.
    """

    program: Any
    members: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Projection:
    """What the CEL variables are cut down to for a set of candidate rules in one phase, and how they run."""

    trees: Mapping[str, Tree]
    covered: frozenset[int]  # ids of the expressions the trees were computed from
    references: frozenset[str] = frozenset()  # variables those expressions read: what the shared activation holds
    # the candidates that mutate / validate in this phase, in file order: the run's two loops
    mutating: tuple[Rule, ...] = ()
    validating: tuple[Rule, ...] = ()
    # (id of an expression, namespace uid, resourceVersion) -> (the expression, the Namespace, its result), for
    # expressions of the namespace alone (programs.Programs._namespace_result); lives as long as the rule set
    namespace_results: dict[tuple[int, str, str], tuple[CompiledExpression, Any, Any]] = field(
        default_factory=dict, compare=False, hash=False
    )
    # id of a validating rule with an expression that can be fused -> (its condition, its validation,
    # whether each reads the namespace alone); an expression that cannot (params without a CEL
    # literal) is None and runs alone (programs.Programs._fused_results)
    fusion: Mapping[int, tuple[CompiledExpression | None, CompiledExpression | None, bool, bool]] = field(
        default_factory=dict, compare=False, hash=False
    )
    # id of an expression -> its own read trees of object, podSpec and podMetadata (the roots mutations
    # change; the projection's trees for the others): what an edit must reach for a kept activation
    # to give that expression another answer (programs.Programs._stale)
    own_trees: Mapping[int, Mapping[str, Tree]] = field(default_factory=dict, compare=False, hash=False)
    # the fused programs of the validating phase (programs.Programs._fused_results), by what they hold: the ids
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
    found.extend(e for mutation in mutations for e in mutation.cel())
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
    trees = merge(e.paths for e in expressions)
    projection = Projection(
        trees,
        frozenset(id(e) for e in expressions),
        frozenset().union(*(e.references for e in expressions)),
        tuple(rule for rule in candidates if rule.mutations) if phase != Phase.VALIDATE else (),
        validating,
        fusion=_fusion(validating),
        own_trees={id(e): _own_trees(trees, e) for e in expressions},
    )
    cache[key] = (candidates, projection)
    return projection


def _own_trees(trees: Mapping[str, Tree], expression: CompiledExpression) -> dict[str, Tree]:
    """Projection.own_trees of one expression: its own read trees of the roots a mutation can change,
    the projection's (the same objects) for those it cannot."""
    own = merge([expression.paths])
    return {root: own[root] if root in ("object", "podSpec", "podMetadata") else tree for root, tree in trees.items()}


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
