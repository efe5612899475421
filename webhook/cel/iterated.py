"""Which collections of the object a CEL text builds a list from: what makes one expression costly.

CEL's map() and filter() (and transformList/transformMap) copy their result list at every
step, so one call over n items costs n^2 (cel-expr-python, measured: 1,000 items 12-20 ms,
4,000 items ~0.27 s, 9,000 items 1.4-2.3 s, whatever the items are). all(), exists() and
exists_one() cost n, and the runtime stops every expression after 10,000 comprehension steps
(cel.ITERATION_BUDGET): at most a few ms. So the collection limit (limits.py) guards what
map() and filter() iterate, and nothing else.

`sources` names those collections as patterns: a root variable, then field names, '*' for
"each item" (`containers.filter(c, c.env.map(e, e.name))` iterates `containers` and
`containers.*.env`). A receiver the text does not make plain (a function's result, an index
by an expression into a tenant's value) is UNKNOWN: the caller then assumes the expression may
iterate anything it reads. What the rule's author or the platform controls (params,
namespaceObject, request, a list or map literal in the text) is never tenant-sized: SAFE. A
conditional or a sum names each of its operands.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from . import celsyntax

Pattern = tuple[str, ...]  # a root variable, then field names, '*' for each item
UNKNOWN: Final = "unknown"
SAFE: Final = "safe"
Source = Pattern | str  # a Pattern, UNKNOWN or SAFE
Sources = tuple[Source, ...]  # the alternatives one receiver may be

QUADRATIC = frozenset({"map", "filter", "transformList", "transformMap", "transformMapEntry"})
COMPREHENSIONS = QUADRATIC | frozenset({"all", "exists", "exists_one"})
# what the platform controls: namespace labels, the rule's params, the request's fixed fields
TRUSTED_ROOTS = frozenset({"params", "namespaceObject", "request", "accelerators", "priorityClasses", "kueueQueues"})
TENANT_ROOTS = frozenset(
    {"object", "oldObject", "podSpec", "podSpecs", "podMetadata", "containers", "deviceClaims", "quantities"}
)


@lru_cache(maxsize=4096)
def sources(text: str) -> Sources:
    """The collections `text` hands to map()/filter(): Patterns, UNKNOWN or SAFE, one or more per call."""
    try:
        tree = celsyntax.parse(text)
    except (celsyntax.CelSyntaxError, IndexError, RecursionError):
        return (UNKNOWN,)
    found: list[Source] = []
    _walk(tree, {}, found)
    return tuple(dict.fromkeys(found))


def _walk(node: celsyntax.Node, scope: dict[str, Sources], found: list[Source]) -> None:
    if node.kind == "call" and node.has_target and node.name in COMPREHENSIONS and len(node.children) >= 3:
        receiver = node.children[0]
        _walk(receiver, scope, found)
        collection = _chain(receiver, scope)
        if node.name in QUADRATIC:
            found.extend(collection)
        variable = node.children[1]
        inner = dict(scope)
        if variable.kind == "ident":
            inner[variable.name] = _items(receiver, scope)
        for child in node.children[2:]:
            _walk(child, inner, found)
        return
    if (  # cel.bind(name, value, body): a call on the target `cel`
        node.kind == "call"
        and node.has_target
        and node.name == "bind"
        and len(node.children) == 4
        and node.children[0].kind == "ident"
        and node.children[0].name == "cel"
        and node.children[1].kind == "ident"
    ):
        _walk(node.children[2], scope, found)
        inner = dict(scope)
        inner[node.children[1].name] = _chain(node.children[2], scope)
        _walk(node.children[3], inner, found)
        return
    for child in node.children:
        _walk(child, scope, found)


def _items(node: celsyntax.Node, scope: dict[str, Sources]) -> Sources:
    """What an item of a collection may be: a literal's own elements, else each item ('*') of it."""
    if node.kind == "other" and node.name in ("[", "{"):
        return tuple(dict.fromkeys(s for child in node.children for s in _chain(child, scope))) or (SAFE,)
    return tuple((*c, "*") if isinstance(c, tuple) else c for c in _chain(node, scope))


def _chain(node: celsyntax.Node, scope: dict[str, Sources]) -> Sources:
    """What a receiver may be: Patterns from a root or a bound variable, SAFE or UNKNOWN."""
    if node.kind == "ident":
        if node.name in scope:
            return scope[node.name]
        if node.name in TRUSTED_ROOTS:
            return (SAFE,)
        if node.name in TENANT_ROOTS:
            return ((node.name,),)
        return (UNKNOWN,)
    if node.kind == "select" and node.children:
        return tuple((*c, node.name) if isinstance(c, tuple) else c for c in _chain(node.children[0], scope))
    if node.kind == "index" and node.children:
        return _items(node.children[0], scope)
    if node.kind == "other":
        if node.name in ("[", "{"):
            return (SAFE,)  # a literal: as long as the rule's text makes it
        # a conditional (condition, then, else) or a binary operator (+ of two lists): its operands
        operands = node.children[1:] if len(node.children) == 3 else node.children
        return tuple(dict.fromkeys(s for child in operands for s in _chain(child, scope))) or (UNKNOWN,)
    if node.kind == "call" and node.has_target and node.children:
        base = _chain(node.children[0], scope)
        if node.name in ("map", "filter"):
            return base  # a list no longer than its receiver
        return (SAFE,) if base == (SAFE,) else (UNKNOWN,)  # e.g. a namespace annotation's split(',')
    return (UNKNOWN,)
