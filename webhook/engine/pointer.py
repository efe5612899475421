"""JSON Pointer paths: the one place where a path becomes a string (RFC 6901 escaping)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from jsonpointer import escape

Path = tuple[str | int, ...]


def to_pointer(path: Iterable[str | int]) -> str:
    """("metadata", "labels", "kueue.x-k8s.io/queue-name") -> /metadata/labels/kueue.x-k8s.io~1queue-name"""
    return _pointer(path if isinstance(path, tuple) else tuple(path))


@lru_cache(maxsize=8192)
def _pointer(path: Path) -> str:
    # the same template paths recur on every request: escape each path once
    return "".join("/" + escape(str(part)) for part in path)
