"""Edits a working copy of the object and records each edit as a JSON Patch operation.

The apiserver applies our patch to the object it sent, operation by operation. Each
operation here is computed against the working copy as it stands after the previous
ones and applied to it at once, so the recorded sequence applies cleanly by
construction. A missing parent is created together with its child, in one `add`.

Copy on write: the document's root is the patcher's own, and everything below it may be
shared with the object as received (facts.WorkingCopy hands it a shallow copy of the root). An edit
first copies the maps and lists along its path that the patcher did not make itself, so the
received object is never changed, and a request's few edits copy a few small containers
instead of the whole object (managedFields and status included).
"""

from __future__ import annotations

from typing import Any

from .pointer import Path, get_path, to_pointer


class Patcher:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.operations: list[dict[str, Any]] = []
        # each operation's path as steps (an append's last step "-"): what programs.py checks a
        # kept activation against without parsing the pointers back
        self.paths: list[Path] = []
        # The containers this patcher may edit in place: the root, and the copies it made. Kept with
        # the objects themselves, so that no id here can be reused by another object meanwhile.
        self._own: dict[int, Any] = {id(document): document}

    def _owned(self, path: Path) -> Any:
        """The container at `path` (every step present), copying each one on the way that is not our own."""
        node: Any = self.document
        own = self._own
        for part in path:
            child = node[part]
            if id(child) not in own:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[part] = child
                own[id(child)] = child
            node = child
        return node

    def get(self, path: Path) -> Any:
        return get_path(self.document, path)

    def set(self, path: Path, value: Any) -> None:
        """Set a map entry (or replace an existing list item), creating missing parent maps in one operation."""
        parent_path, key = path[:-1], path[-1]
        existing = 0
        node: Any = self.document
        for part in parent_path:
            if isinstance(part, int):
                if not isinstance(node, list) or not 0 <= part < len(node):
                    raise PatchConflict(f"cannot set {to_pointer(path)}: no list item {part}")
                node = node[part]
            elif not isinstance(node, dict):
                raise PatchConflict(f"cannot set {to_pointer(path)}: parent is not an object")
            elif node.get(part) is None:
                break
            else:
                node = node[part]
            existing += 1
        if existing < len(parent_path):
            if not isinstance(node, dict) or any(isinstance(p, int) for p in path[existing:]):
                raise PatchConflict(f"cannot set {to_pointer(path)}: parent is not an object")
            # first missing parent: add it with the rest of the path nested inside
            nested: Any = value
            for part in reversed(path[existing + 1 :]):
                nested = {part: nested}
            self._record("add", path[: existing + 1], nested)
            self._owned(parent_path[:existing])[path[existing]] = nested
            return
        if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            self._record("replace", path, value)  # an existing list item (addEnv override)
            self._owned(parent_path)[key] = value
            return
        if not isinstance(node, dict) or isinstance(key, int):  # JSON has no int keys: a list index into a map
            raise PatchConflict(f"cannot set {to_pointer(path)}: parent is not an object")
        op = "replace" if key in node else "add"
        self._record(op, path, value)
        self._owned(parent_path)[key] = value

    def append(self, path: Path, item: Any) -> None:
        """Append to a list, creating it (and missing parents) when absent."""
        current = self.get(path)
        if current is None:
            self.set(path, [item])
            return
        if not isinstance(current, list):
            raise PatchConflict(f"cannot append to {to_pointer(path)}: not a list")
        self._record("add", (*path, "-"), item)
        self._owned(path).append(item)

    def remove(self, path: Path) -> None:
        parent = self.get(path[:-1])
        key = path[-1]
        if isinstance(parent, dict) and key in parent:
            self._record("remove", path, None)
            del self._owned(path[:-1])[key]

    def _record(self, op: str, path: Path, value: Any) -> None:
        entry: dict[str, Any] = {"op": op, "path": to_pointer(path)}
        if op != "remove":
            entry["value"] = _copy(value)
        self.operations.append(entry)
        self.paths.append(path)


class PatchConflict(ValueError):
    """The object's shape prevents an edit (e.g. `labels` is a string): reported, never crashes."""


def _copy(value: Any) -> Any:
    # The recorded value must not alias the working copy, which later operations may edit.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
