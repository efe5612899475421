"""What one evaluation may cost: a CPU time budget per request and a size limit on what CEL iterates.

Checked before each CEL expression (programs.Programs.eval); past either, the expression raises a
RuleError and the rule's failurePolicy decides (docs/security.md, "Evaluation limits").

The size limit protects against what one expression cannot be stopped in: map() and filter()
over n items cost n^2 (iterated.py has the figures). So it applies to an expression only when a
collection over the limit is one that expression hands to map()/filter() (or, where the text
does not say which collection it iterates, one it can read at all). A large collection nothing
maps (a Job's 1,200 arguments, a pod's 5,000 labels) costs CEL a linear conversion and at most
the runtime's 10,000 comprehension steps per expression: it is never refused for its size, and
an object no rule can act on never meets the limit at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson

from webhook.cel.iterated import UNKNOWN, Pattern, sources

from .cel import ITERATION_BUDGET, CompiledExpression
from .decision import RuleError
from .pointer import Path, get_path
from .request import Limits
from .workloads import Target

# the CEL variables that hand over the target's containers: each container list of each pod spec
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


class Budget:
    """One evaluation's limits: the time it started, and which expressions were found within the size limit."""

    def __init__(self, limits: Limits, json_commas: int | None = None) -> None:
        self.limits = limits
        budget = limits.time_budget
        # Wall clock first (cheap, vDSO): CPU time cannot exceed it, so the thread's CPU clock (a
        # system call) is read only once the wall-clock deadline has passed.
        self.deadline = None if budget is None else time.perf_counter() + budget
        self.cpu_start = time.thread_time() if budget is not None else 0.0
        self.json_commas = json_commas  # of the text the object was parsed from (AdmissionInput.json_commas)
        self._large: bool | None = None  # whether the object may hold a collection over the limit
        self._within: set[tuple[int, tuple[str | int, ...]]] = set()  # (expression, target root) checked
        # True once the object cannot hold a collection over the limit: until the wall-clock deadline,
        # check() has nothing to do (and fused evaluation, which checks nothing, is allowed)
        self.clear = False

    def check(self, target: Target, document: Any, expression: CompiledExpression) -> None:
        """Before each expression: the request's CPU time budget, and whether the expression would
        map or filter a collection over the size limit; a RuleError past either."""
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
        limit = self.limits.max_collection
        if self._large is None:
            # once, on the object as sent: mutations only add a few small items
            self._large = may_exceed(document, limit, self.json_commas)
        if not self._large:
            self.clear = True
            return
        key = (id(expression), target.root)
        if key in self._within:
            return
        found = too_large(expression, target, document, limit)
        if found is not None:
            path, size = found
            raise RuleError(
                f"{target.description}: the object is too large to evaluate: {_pointer(path)} holds {size} "
                f"items, and this rule maps or filters it (limit {limit})"
            )
        self._within.add(key)


def may_exceed(document: Any, limit: int, json_commas: int | None = None) -> bool:
    """Whether document may hold a list or map of more than `limit` items.

    In JSON every item of a collection but its last is followed by a comma, so a document with
    fewer than `limit` commas in all has none: one C-speed count settles nearly every request.
    `json_commas`, the commas of a JSON text that holds the document (the request body), bounds
    its own and spares serialising it again.
    """
    if json_commas is not None and json_commas < limit:
        return False
    try:
        return orjson.dumps(document).count(b",") >= limit
    except (TypeError, orjson.JSONEncodeError):
        return True  # values JSON cannot carry (offline YAML): look


def too_large(expression: CompiledExpression, target: Target, document: Any, limit: int) -> tuple[Path, int] | None:
    """(path, size) of a collection over `limit` that `expression`, on `target`, may hand to map()/filter().

    Only the collections its text names are looked at (iterated.py), not the whole object: a
    pattern is resolved against the object, each '*' over at most the runtime's iteration budget of
    items (no expression gets further). An expression whose receivers the text does not make plain
    is measured on everything it reads.
    """
    found = sources(expression.text)
    if UNKNOWN in found:
        return _largest_read(expression, target, document, limit)
    for pattern in found:
        if isinstance(pattern, tuple):
            for path, value in _resolve(pattern, target, document):
                if (type(value) is dict or type(value) is list) and len(value) > limit:
                    return path, len(value)
    return None


def _resolve(pattern: Pattern, target: Target, document: Any) -> Iterator[tuple[Path, Any]]:
    """The values a pattern names in the object, with their paths."""
    root, *rest = pattern
    if root == "containers":  # each item of the variable is a container of one of the target's pod specs
        lists = [(*spec, field) for spec in target.pod_specs for field in _CONTAINER_LISTS]
        if not rest:
            yield from ((path, get_path(document, path)) for path in lists)
            return
        if rest[0] == "*":
            for path in lists:
                yield from _walk(document, path, ["*", *rest[1:]])
        return
    if root == "podSpecs" and rest and rest[0] == "*":
        for spec in target.pod_specs:
            yield from _walk(document, spec, rest[1:])
        return
    for base in _bases(root, target):
        yield from _walk(document, base, rest)


def _walk(document: Any, path: Path, rest: list[str]) -> Iterator[tuple[Path, Any]]:
    value = get_path(document, path)
    if not rest:
        yield path, value
        return
    step, after = rest[0], rest[1:]
    if step != "*":
        yield from _walk(document, (*path, step), after)
    elif type(value) is list:
        for index in range(min(len(value), ITERATION_BUDGET)):
            yield from _walk(document, (*path, index), after)
    elif type(value) is dict:
        for key in list(value)[:ITERATION_BUDGET]:
            yield from _walk(document, (*path, key), after)


def _largest_read(expression: CompiledExpression, target: Target, document: Any, limit: int) -> tuple[Path, int] | None:
    """A collection over `limit` anywhere in what the expression reads (its read paths and variables)."""
    reads: list[Path] = []
    for root, paths in expression.paths.items():
        for base in _bases(root, target):
            reads.extend((*base, *read) for read in paths)
    if expression.references & {"containers", "podSpecs", "deviceClaims"}:
        reads.extend(target.pod_specs)
    for path in reads:
        size = largest_collection(get_path(document, path), limit)
        if size > limit:
            return path, size
    return None


def largest_collection(document: Any, limit: int) -> int:
    """Size of the largest list or map inside document, walked until one over `limit` is found.

    Iterative (a 10,000-deep object must not hit the recursion limit), with exact type checks
    (JSON and YAML give plain dicts and lists; ABC checks cost twice as much).
    """
    largest = 0
    stack = [document]
    while stack:
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


def _bases(root: str, target: Target) -> list[Path]:
    """Where a CEL variable's value sits in the object: `object` at its root, `podSpec` and
    `podMetadata` at the target's one pod spec (none when it has several, where they are null)."""
    if root == "object":
        return [()]
    if root == "podSpec" and len(target.pod_specs) == 1:
        return [target.pod_specs[0]]
    if root == "podMetadata" and len(target.pod_specs) == 1:
        return [target.pod_metadata[0]]
    return []  # oldObject, namespaceObject, request: not the object as sent


def _pointer(path: Path) -> str:
    return "/" + "/".join(str(part) for part in path)
