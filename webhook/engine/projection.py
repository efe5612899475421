"""Hand CEL only the parts of object, oldObject, namespaceObject, request and podSpec that rules read.

The CEL runtime converts a variable from Python on its first use in an activation, deeply:
the whole Pod, its managedFields and status included, although the default pack reads a few
of its fields (`object.kind`, `object.metadata.labels`, ...). The loader knows every
expression's text, so the fields each expression can read are known when it compiles
(`read_paths`); `project` then builds, per request, the smallest document with the same
answers for those reads: the objects along each path, and the whole value where a path ends.

An access the text does not make plain keeps the whole value: a variable used other than
as `var.field...` (passed to a function, bound with cel.bind, indexed with [...], compared)
is handed over whole. The one exception is a null test (`namespaceObject != null`): a
projection of a document is never null, so the test needs no field at all.

`Projection` is what one set of candidate rules (a (kind, operation) of the rule set) in one
phase needs, made once per rule set by `projection_for`: the merged trees of their expressions,
the rules the run loops over, and what the CEL programs keep for them (programs.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import celsyntax
from .request import Phase

if TYPE_CHECKING:  # cel.py reads paths with this module: what needs cel.py is for the checker only
    from .cel import CompiledExpression
    from .policy import Rule
    from .programs import FusedProgram
    from .ruleset import RuleSet

ROOTS = ("object", "oldObject", "namespaceObject", "request", "podSpec")
WHOLE = None  # a node of a projection tree that keeps the value as it is
Tree = dict[str, Any] | None  # name -> child tree; WHOLE keeps everything

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_ACCESS = re.compile(rf"\b({'|'.join(ROOTS)})\b((?:\s*\.\??\s*{_IDENT})*)")
_NAME = re.compile(_IDENT)
# tokens that bind looser than == and != (or open a new operand), around a null test
_BEFORE_NULL_TEST = re.compile(r"(?:^|[([,?:]|&&|\|\|)\s*$")
_AFTER_NULL_TEST = re.compile(r"^\s*(?:$|[)\],?:]|&&|\|\|)")


def read_paths(source: str) -> dict[str, frozenset[tuple[str, ...]]]:
    """Root variable -> the field paths `source` may read under it; () stands for the whole value."""
    blank = celsyntax.blank(source)  # string literals and comments read nothing
    found: dict[str, set[tuple[str, ...]]] = {}
    for match in _ACCESS.finditer(blank):
        if celsyntax.selected(blank, match.start()):
            continue  # a field of another value (x.object), not the variable; `.object` is the variable
        before = blank[: match.start()]
        names = _NAME.findall(match.group(2))
        after = blank[match.end() :]
        if names and after.lstrip().startswith("("):
            names.pop()  # a method or macro on the value before it: x.startsWith(...), l.all(...)
        paths = found.setdefault(match.group(1), set())
        if not names and _null_test(before, after):
            continue  # presence only: needs no field
        paths.add(tuple(names))
    return {root: frozenset(paths) for root, paths in found.items()}


def _null_test(before: str, after: str) -> bool:
    right = re.match(r"\s*[!=]=\s*null\b", after)
    if right is not None:
        return bool(_BEFORE_NULL_TEST.search(before)) and bool(_AFTER_NULL_TEST.match(after[right.end() :]))
    left = re.search(r"\bnull\s*[!=]=\s*$", before)
    if left is not None:
        return bool(_BEFORE_NULL_TEST.search(before[: left.start()])) and bool(_AFTER_NULL_TEST.match(after))
    return False


def merge(all_paths: Iterable[Mapping[str, frozenset[tuple[str, ...]]]]) -> dict[str, Tree]:
    """One projection tree per root from the paths of every expression of a rule set."""
    union: dict[str, set[tuple[str, ...]]] = {root: set() for root in ROOTS}
    for paths in all_paths:
        for root, found in paths.items():
            union[root].update(found)
    return {root: _tree(paths) for root, paths in union.items()}


def _tree(paths: set[tuple[str, ...]]) -> Tree:
    root: dict[str, Any] = {}
    for path in sorted(paths, key=len):  # shorter first: a path ending higher up keeps everything below
        if not path:
            return WHOLE
        node = root
        for depth, name in enumerate(path):
            if name in node and node[name] is WHOLE:
                break
            if depth == len(path) - 1:
                node[name] = WHOLE
            else:
                node = node.setdefault(name, {})
    return root


def project(value: Any, tree: Tree) -> Any:
    """The parts of `value` that `tree` names; anything but a plain dict is kept whole."""
    if tree is WHOLE or type(value) is not dict:
        return value
    out = {}
    for name, child in tree.items():
        if name in value:
            out[name] = project(value[name], child)
    return out


# -- per candidate rules: the trees of their expressions, computed once per rule set ----------------

# An expression that reads nothing but these gives the same answer for every request in one
# version of a namespace (params and the accelerator table are fixed per rule set).
NAMESPACE_VARIABLES = frozenset({"namespaceObject", "params", "accelerators"})


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
