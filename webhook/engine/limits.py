"""What one evaluation may cost: a CPU time budget per request and a size limit per object.

Checked before each CEL expression (programs.Programs.eval); past either, the expression raises a
RuleError and the rule's failurePolicy decides (docs/security.md, "Evaluation limits").
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from .decision import RuleError
from .request import Limits
from .workloads import Target


class Budget:
    """One evaluation's limits: the time it started, and the object's largest collection (measured once)."""

    def __init__(self, limits: Limits, json_commas: int | None = None) -> None:
        self.limits = limits
        budget = limits.time_budget
        # Wall clock first (cheap, vDSO): CPU time cannot exceed it, so the thread's CPU clock (a
        # system call) is read only once the wall-clock deadline has passed.
        self.deadline = None if budget is None else time.perf_counter() + budget
        self.cpu_start = time.thread_time() if budget is not None else 0.0
        self.json_commas = json_commas  # of the text the object was parsed from (AdmissionInput.json_commas)
        self._largest: int | None = None  # the largest collection in the object, measured once
        # True once the object's size has passed: until the wall-clock deadline, check() has nothing to do
        self.clear = False

    def check(self, target: Target, document: Any) -> None:
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
            self._largest = largest_collection(document, self.limits.max_collection, self.json_commas)
        largest = self._largest
        if largest <= self.limits.max_collection:
            self.clear = True
        else:
            raise RuleError(
                f"{target.description}: the object is too large to evaluate: a list or map of {largest} items "
                f"(limit {self.limits.max_collection})"
            )


def largest_collection(document: Any, limit: int, json_commas: int | None = None) -> int:
    """Size of the largest list or map inside document, or 0 when none can exceed limit.

    In JSON every item of a collection but its last is followed by a comma, so a document
    with fewer than `limit` commas in all has no collection over the limit: one C-speed
    count settles nearly every request. `json_commas`, the commas of a JSON text that holds
    the document (the request body), bounds its own and spares serialising it again.
    Otherwise the tree is walked, with exact type checks (JSON and YAML give plain dicts
    and lists; ABC checks cost twice as much).
    """
    if json_commas is not None and json_commas < limit:
        return 0
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
