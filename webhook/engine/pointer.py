"""Paths into a JSON document: the one walker (`get_path`) and the one place where a path becomes a
string (RFC 6901 escaping)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, TypeGuard

from jsonpointer import escape

Path = tuple[str | int, ...]


def get_path(document: Any, path: Path) -> Any:
    """The value at `path`, or None when a step is missing or of the wrong type (never raises).

    An int step indexes a list (0 <= index < len); a str step reads a map entry.
    """
    node = document
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return None
            node = node[part]
        elif type(node) is dict or isinstance(node, Mapping):  # JSON's dict first: an ABC check costs more
            node = node.get(part)
        else:
            return None
    return node


def is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping), JSON's dict first: the ABC check costs several times more, and
    the engine and the audit ask it for every object (get_path inlines it: once per step)."""
    return type(value) is dict or (value is not None and isinstance(value, Mapping))  # None: often, and no Mapping


def to_pointer(path: Iterable[str | int]) -> str:
    """("metadata", "labels", "kueue.x-k8s.io/queue-name") -> /metadata/labels/kueue.x-k8s.io~1queue-name"""
    return _pointer(path if isinstance(path, tuple) else tuple(path))


@lru_cache(maxsize=8192)
def _pointer(path: Path) -> str:
    # the same template paths recur on every request: escape each path once
    return "".join("/" + escape(str(part)) for part in path)
