"""The fields of object, oldObject, namespaceObject, request, podSpec and podMetadata that a CEL text can read.

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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import celsyntax

ROOTS = ("object", "oldObject", "namespaceObject", "request", "podSpec", "podMetadata")
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
