"""Plain Python values out of cel-expr-python results, for every CEL program the package runs."""

from __future__ import annotations

import ctypes
from typing import Any

_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [ctypes.py_object]


def plain_result(result: Any) -> Any:
    """`result.plain_value()`, with the reference to None that cel-expr-python 0.1.3 drops given back.

    Its plain_value() releases None once for every null in the value it returns without taking a
    reference first; on Python 3.11 (the image's) None is not immortal, so a few thousand null
    results (a mutation expression giving null, a list with a null) end the process with
    "Fatal Python error: none_dealloc". Each null taken is given back here.
    """
    value = result.plain_value()
    if value is None or type(value) is list or type(value) is dict:
        for _ in range(_nulls(value)):
            _incref(None)
    return value


def _nulls(value: Any) -> int:
    """How many None a plain value holds (CEL map keys are never null)."""
    if value is None:
        return 1
    count = 0
    stack = [value]
    while stack:  # no call per nested list: a fused program's result is a list of small lists
        node = stack.pop()
        for item in node.values() if type(node) is dict else node:
            if item is None:
                count += 1
            elif (type(item) is list or type(item) is dict) and item:
                stack.append(item)
    return count
