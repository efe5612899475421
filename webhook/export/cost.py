"""A static bound on what an exported expression costs the apiserver, checked before export.

The apiserver meters CEL at run time (k8s.io/apiserver/pkg/apis/cel/config.go):
PerCallLimit = 1,000,000 per expression evaluation, RuntimeCELCostBudget = 10,000,000 per
policy evaluation (per binding and param), RuntimeCELCostBudgetMatchConditions = 2,500,000
for matchConditions. One unit is roughly one CEL operation (~50 ns). An expression past its
limit is an evaluation error, which the policy's failurePolicy turns into a denial or a pass.

The runtime here has no cost tracking, so this module estimates from the text: each operation
costs 1, and a comprehension (all, exists, exists_one, map, filter) or a linear list function
(sum, max, join, indexOf) multiplies its body by the size of the list it walks. List sizes are
not bounded by the API, so SIZES assumes a large but real GPU workload; an object beyond them
costs more, up to the apiserver's limits (then failurePolicy applies, as the engine's own
collection limit does).
"""

from __future__ import annotations

import re
from functools import lru_cache

from webhook.cel import celsyntax

PER_CALL_LIMIT = 1_000_000
POLICY_BUDGET = 10_000_000
MATCH_CONDITIONS_BUDGET = 2_500_000

# the list a comprehension walks, by the last field of its receiver -> assumed largest size
SIZES: dict[str, int] = {
    "containers": 8,
    "initContainers": 4,
    # pod templates x pod specs per target: a template target has one spec, an object target
    # (one per object) has all its templates' specs, so the product stays within 16 either way
    "specs": 1,
    "targets": 16,
    "replicatedJobs": 16,
    "workerGroupSpecs": 16,
    "requests": 8,
    "limits": 8,
    "tolerations": 16,
    "volumes": 32,
    "env": 32,
    "nodeSelectorTerms": 8,
    "matchExpressions": 8,
    "values": 8,
    "ownerReferences": 4,
    "labels": 32,
    "annotations": 32,
    "nodeSelector": 16,
}
DEFAULT_SIZE = 16
_LOOPS = ("all", "exists", "exists_one", "map", "filter")
_LINEAR = ("sum", "max", "join", "indexOf", "gwListIndexOf")
_CALL_BEFORE = re.compile(r"\.\s*(" + "|".join(_LOOPS + _LINEAR) + r")\s*$")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:\[]")


def estimate(expression: str) -> int:
    """An upper estimate of the expression's cost for an object within SIZES."""
    return _cost(celsyntax.blank(expression))


@lru_cache(maxsize=4096)  # generated expressions repeat their pieces (targets, accelerator tests)
def _cost(text: str) -> int:
    text = _unwrap(text.strip())
    ternary = _split_ternary(text)
    if ternary is not None:  # only one branch runs
        condition, then, otherwise = ternary
        return _cost(condition) + max(_cost(then), _cost(otherwise))
    total = 0
    flat: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "([{":
            close = _closing(text, index)
            inner = text[index + 1 : close]
            window = max(0, index - 32)
            call = _CALL_BEFORE.search(text[window:index]) if char == "(" else None
            if call is not None:
                size = _size(text[: window + call.start()])
                if call.group(1) in _LOOPS:
                    body = inner.split(",", 1)[1] if "," in inner else inner
                    total += size * (1 + _cost(body))
                else:
                    total += size + _cost(inner)
            else:
                total += 1 + sum(_cost(part) for part in _split_top(inner, ","))
            index = close + 1
            continue
        flat.append(char)
        index += 1
    return total + len(_TOKEN.findall("".join(flat)))


def _unwrap(text: str) -> str:
    while text.startswith("(") and _closing(text, 0) == len(text) - 1:
        text = text[1:-1].strip()
    return text


def _split_top(text: str, separator: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _split_ternary(text: str) -> tuple[str, str, str] | None:
    """`c ? a : b` at the top level (a nested ternary sits in `b`), or None."""
    if "?" not in text:
        return None
    depth = 0
    question = None
    pending = 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and char == "?":
            if question is None:
                question = index
            else:
                pending += 1
        elif depth == 0 and char == ":" and question is not None:
            if pending == 0:
                return text[:question], text[question + 1 : index], text[index + 1 :]
            pending -= 1
    return None


def _opening(text: str) -> int:
    """Index of the bracket that the last character of text closes."""
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        depth += text[index] in ")]}"
        depth -= text[index] in "([{"
        if depth == 0:
            return index
    return 0


def _closing(text: str, open_paren: int) -> int:
    depth = 0
    for index in range(open_paren, len(text)):
        if text[index] in "([{":
            depth += 1
        elif text[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index
    return len(text) - 1


def _size(before: str) -> int:
    """The assumed size of the receiver that ends `before`: its last field name, through filter/map chains."""
    receiver = before.rstrip()
    while receiver.endswith(")"):
        depth = 0
        for index in range(len(receiver) - 1, -1, -1):
            depth += receiver[index] == ")"
            depth -= receiver[index] == "("
            if depth == 0:
                break
        head = receiver[:index].rstrip()
        chained = re.search(r"\.\s*(filter|map)\s*$", head)
        if not chained:
            return DEFAULT_SIZE  # a parenthesised receiver (the targets of a kind, a concatenation)
        receiver = head[: chained.start()].rstrip()
    found = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", receiver)
    if receiver.endswith("]"):
        start = _opening(receiver)
        if start == 0 or not re.search(r"[\w)\]]\s*$", receiver[:start]):  # a list literal: its items
            return len(_split_top(receiver[start + 1 : -1], ","))
        return DEFAULT_SIZE
    return SIZES.get(found.group(1), DEFAULT_SIZE) if found else DEFAULT_SIZE
