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
from typing import Any

import orjson

from .cel import CompiledExpression
from .decision import RuleError
from .iterated import SAFE, UNKNOWN, Pattern, sources
from .pointer import Path
from .request import Limits
from .workloads import Target

# the CEL variables that hand over the target's containers: each container list of each pod spec
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


class Budget:
    """One evaluation's limits: the time it started, and the object's collections over the size limit."""

    def __init__(self, limits: Limits, json_commas: int | None = None) -> None:
        self.limits = limits
        budget = limits.time_budget
        # Wall clock first (cheap, vDSO): CPU time cannot exceed it, so the thread's CPU clock (a
        # system call) is read only once the wall-clock deadline has passed.
        self.deadline = None if budget is None else time.perf_counter() + budget
        self.cpu_start = time.thread_time() if budget is not None else 0.0
        self.json_commas = json_commas  # of the text the object was parsed from (AdmissionInput.json_commas)
        self._oversized: list[tuple[Path, int]] | None = None  # measured once, on the object as sent
        # True once the object holds no collection over the limit: until the wall-clock deadline,
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
        if self._oversized is None:
            # once, on the object as sent: mutations only add a few small items
            self._oversized = oversized_collections(document, self.limits.max_collection, self.json_commas)
        if not self._oversized:
            self.clear = True
            return
        for path, size in self._oversized:
            if iterates(expression, target, path):
                raise RuleError(
                    f"{target.description}: the object is too large to evaluate: {_pointer(path)} holds {size} "
                    f"items, and this rule maps or filters it (limit {self.limits.max_collection})"
                )


def iterates(expression: CompiledExpression, target: Target, path: Path) -> bool:
    """Whether `expression`, on `target`, may hand the collection at `path` to map()/filter()."""
    found = sources(expression.text)
    if UNKNOWN in found:
        return reads(expression, target, path)
    return any(_matches(pattern, target, path) for pattern in found if pattern != SAFE and isinstance(pattern, tuple))


def reads(expression: CompiledExpression, target: Target, path: Path) -> bool:
    """Whether `expression` may be handed the collection at `path` at all (its read paths and variables)."""
    for root, paths in expression.paths.items():
        for base in _bases(root, target):
            if path[: len(base)] != base:
                continue
            rest = path[len(base) :]
            if any(tuple(rest[: len(read)]) == read for read in paths):
                return True
    in_pod_specs = any(path[: len(spec)] == spec for spec in target.pod_specs)
    return in_pod_specs and bool(expression.references & {"containers", "podSpecs", "deviceClaims"})


def _matches(pattern: Pattern, target: Target, path: Path) -> bool:
    root, *rest = pattern
    if root == "containers":  # each item of the variable is a container of one of the target's pod specs
        bases = [(*spec, field, "*") for spec in target.pod_specs for field in _CONTAINER_LISTS]
        if rest and rest[0] == "*":
            rest = rest[1:]
        else:  # the container list itself
            return any(path == (*spec, field) for spec in target.pod_specs for field in _CONTAINER_LISTS)
    elif root == "podSpecs":
        bases = [spec for spec in target.pod_specs]
        rest = rest[1:] if rest and rest[0] == "*" else rest
    else:
        bases = _bases(root, target)
    for base in bases:
        full = (*base, *rest)
        if len(full) == len(path) and all(want == "*" or want == have for want, have in zip(full, path, strict=True)):
            return True
    return False


def _bases(root: str, target: Target) -> list[Path]:
    """Where a CEL variable's value sits in the object: `object` at its root, `podSpec` and
    `podMetadata` at the target's one pod spec (none when it has several, where they are null)."""
    if root == "object":
        return [()]
    if root == "podSpec" and len(target.pod_specs) == 1:
        return [target.pod_specs[0]]
    if root == "podMetadata" and len(target.pod_specs) == 1:
        return [target.pod_metadata[0]]
    if root in ("containers", "podSpecs", "deviceClaims"):
        return list(target.pod_specs)
    return []  # oldObject, namespaceObject, request: not the object as sent


def _pointer(path: Path) -> str:
    return "/" + "/".join(str(part) for part in path)


def oversized_collections(document: Any, limit: int, json_commas: int | None = None) -> list[tuple[Path, int]]:
    """(path, size) of every list or map inside document with more than `limit` items; [] when none can.

    In JSON every item of a collection but its last is followed by a comma, so a document
    with fewer than `limit` commas in all has no collection over the limit: one C-speed
    count settles nearly every request. `json_commas`, the commas of a JSON text that holds
    the document (the request body), bounds its own and spares serialising it again.
    Otherwise the tree is walked, with exact type checks (JSON and YAML give plain dicts
    and lists; ABC checks cost twice as much).
    """
    if json_commas is not None and json_commas < limit:
        return []
    try:
        if orjson.dumps(document).count(b",") < limit:
            return []
    except (TypeError, orjson.JSONEncodeError):
        pass  # values JSON cannot carry (offline YAML): walk instead
    found: list[tuple[Path, int]] = []
    stack: list[tuple[Path, Any]] = [((), document)]
    while stack:  # iterative: a 10,000-deep object must not hit the recursion limit
        path, node = stack.pop()
        if type(node) is dict:
            items: Any = node.items()
        elif type(node) is list:
            items = enumerate(node)
        else:
            continue
        if len(node) > limit:
            found.append((path, len(node)))
        stack.extend(((*path, key), value) for key, value in items if type(value) is dict or type(value) is list)
    return found
