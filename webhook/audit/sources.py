"""Where audited objects come from: manifest files, directories and stdin, one object at a time.

Everything here is a generator so that memory stays flat however large the input is:
a file is parsed document by document (libyaml's C loader, the fast one), and a
`kind: List` is unpacked as it is met. Only JSON files are read whole (orjson is far
faster than any YAML loader, and a JSON file holds one document anyway).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# The C loader is 5-10x faster than the pure-Python one; fall back only where libyaml is missing.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SourceError(Exception):
    """An input that cannot be read or parsed: a usage error for the command (exit 2)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One object to audit and where it came from (`file.yaml#2` or `cluster`)."""

    object: dict[str, Any]
    origin: str


def manifest_files(paths: Iterable[str]) -> Iterator[str]:
    """Expand directories recursively (sorted, so reports are stable); `-` stands for stdin."""
    for path in paths:
        if path == "-" or os.path.isfile(path):
            yield path
        elif os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # skip .git and friends
                for name in sorted(files):
                    if name.endswith(MANIFEST_SUFFIXES):
                        yield os.path.join(root, name)
        else:
            raise SourceError(f"no such file or directory: {path}")


def read_manifests(paths: Iterable[str], stdin: IO[str] | None = None) -> Iterator[Item]:
    """Every Kubernetes object in the given files, directories and stdin, in order."""
    for path in manifest_files(paths):
        if path == "-":
            yield from _documents(stdin or sys.stdin, "<stdin>")
            continue
        try:
            if path.endswith(".json"):
                yield from _unpack(orjson.loads(Path(path).read_bytes()), path, 0)
            else:
                with open(path, encoding="utf-8") as stream:
                    yield from _documents(stream, path)
        except orjson.JSONDecodeError as error:
            raise SourceError(f"{path}: invalid JSON: {error}") from None
        except OSError as error:
            raise SourceError(f"{path}: {error.strerror}") from None


def _documents(stream: IO[str], name: str) -> Iterator[Item]:
    try:
        for index, document in enumerate(yaml.load_all(stream, Loader=Loader)):
            yield from _unpack(document, name, index)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise SourceError(f"{where}: invalid YAML: {getattr(error, 'problem', None) or error}") from None


def _unpack(document: Any, name: str, index: int) -> Iterator[Item]:
    """A document may be an object, a `kind: List` (kubectl get -o yaml), or empty (`---` at the end)."""
    if not isinstance(document, dict):
        return
    if document.get("kind") == "List" or (
        str(document.get("kind", "")).endswith("List") and isinstance(document.get("items"), list)
    ):
        for position, item in enumerate(document.get("items") or []):
            if isinstance(item, dict):
                yield Item(item, f"{name}#{index}.items[{position}]")
        return
    if "kind" in document:
        yield Item(document, f"{name}#{index}")


def read_namespaces(path: str) -> dict[str, dict[str, Any]]:
    """Namespace objects by name, for `namespaceObject` in offline audits (--namespace-objects)."""
    namespaces: dict[str, dict[str, Any]] = {}
    for item in read_manifests([path]):
        if item.object.get("kind") == "Namespace":
            name = (item.object.get("metadata") or {}).get("name")
            if isinstance(name, str):
                namespaces[name] = item.object
    return namespaces
