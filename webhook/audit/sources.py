"""Where audited objects come from: manifest files, directories and stdin, one object at a time.

Everything here is a generator so that memory stays flat however large the input is:
a file is read through rapidyaml and JSON where that provably builds what the reference
loader builds (webhook.kubeyaml: rapid.py, files up to 32 MiB, one file in memory at a time),
else parsed document by document (libyaml's C composer and manifests.Documents), and a
`kind: List` is unpacked as it is met. Only JSON files are read whole (orjson is far
faster than any YAML loader, and a JSON file holds one document anyway).

A file that cannot be read (not UTF-8, invalid JSON) is reported through `problems` as an
InputProblem and the stream goes on with the next file. YAML is split at its `---` lines (which
YAML forbids inside any scalar), so a broken document (invalid YAML, a duplicate key) loses
only itself, on stdin as in a file. Documents that are not Kubernetes objects (scalars, plain
YAML, AdmissionReviews) go to `notes`: they are skipped, never audited.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from webhook.kubeyaml import Documents, Loader, ParseError, rapid

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class SourceError(Exception):
    """An input that cannot be read or parsed: a usage error for the command (exit 2)."""


STDIN = "<stdin>"  # how every message and report names standard input (`-` on the command line)


class InputProblem(str):
    """An input that could not be read: "origin: reason" as text, with its two parts for reports."""

    origin: str
    reason: str

    def __new__(cls, origin: str, reason: str) -> InputProblem:
        problem = super().__new__(cls, f"{origin}: {reason}")
        problem.origin, problem.reason = origin, reason
        return problem

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        return (self.origin, self.reason)


Problem = Callable[[str], None]  # told an InputProblem ("file:line: what is wrong"); the stream goes on


def _raise(message: str) -> None:
    raise SourceError(message)


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


def read_manifests(
    paths: Iterable[str],
    stdin: IO[str] | None = None,
    problems: Problem = _raise,
    notes: Problem | None = None,
) -> Iterator[Item]:
    """Every Kubernetes object in the given files, directories and stdin, in order.

    `problems` hears of inputs that could not be read (by default: raise SourceError);
    `notes` of documents skipped because they are not Kubernetes objects (default: problems).
    """
    notes = notes or problems
    for path in manifest_files(paths):
        try:
            if path == "-":
                yield from _documents(stdin or sys.stdin, STDIN, notes, problems)
            elif path.endswith(".json"):
                yield from _unpack(orjson.loads(Path(path).read_bytes()), path, 0, notes)
            else:
                yield from _file_documents(path, notes, problems)
        except orjson.JSONDecodeError as error:
            problems(InputProblem(path, f"invalid JSON: {error}"))
        except UnicodeDecodeError as error:
            problems(InputProblem(input_name(path), f"not UTF-8 text (byte {error.start}): is it a binary file?"))
        except OSError as error:
            problems(InputProblem(input_name(path), str(error.strerror or error)))


def input_name(path: str) -> str:
    """A path as messages name it: `-` is `<stdin>`."""
    return STDIN if path == "-" else path


def _file_documents(path: str, notes: Problem, problems: Problem) -> Iterator[Item]:
    """A YAML file: through rapidyaml when that reads it exactly as the reference loader, else libyaml."""
    if rapid.available() and os.path.getsize(path) <= rapid.MAX_BYTES:
        values = rapid.documents(Path(path).read_bytes())
        if values is not None:
            for index, document in enumerate(values):
                if _plain_object(document):  # the usual document: yielded here, not by a generator of its own
                    yield Item(document, f"{path}#{index}")
                else:
                    yield from _unpack(document, path, index, notes)
            return
    with open(path, encoding="utf-8") as stream:
        yield from _documents(stream, path, notes, problems)


# a document start marker: a line that is `---` alone or followed by a space (YAML forbids one inside a scalar)
_DOCUMENT_START = re.compile(r"---(?:[ \t].*)?\r?\n?")


def _chunks(stream: IO[str]) -> Iterator[tuple[int, str]]:
    """The stream's text cut before each `---` line, with the line each piece starts on (0-based):
    one document at a time in memory, and a piece libyaml parses alone as it would in the stream."""
    lines: list[str] = []
    start = 0
    for number, line in enumerate(stream):
        if line.startswith("---") and _DOCUMENT_START.fullmatch(line) and lines:
            yield start, "".join(lines)
            lines, start = [], number
        lines.append(line)
    if lines:
        yield start, "".join(lines)


def _documents(stream: IO[str], name: str, notes: Problem, problems: Problem) -> Iterator[Item]:
    """Each document of a YAML stream; one that cannot be parsed is a problem and costs only itself."""
    index = 0
    for first_line, text in _chunks(stream):
        try:
            documents = list(Documents(text, Loader))
        except ParseError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{name}:{first_line + mark.line + 1}:{mark.column + 1}" if mark else f"{name}#{index}"
            problems(InputProblem(where, f"invalid YAML: {getattr(error, 'problem', None) or error}"))
            index += 1
            continue
        for document in documents:
            yield from _unpack(document, name, index, notes)
            index += 1


_NOT_AUDITED = frozenset({"AdmissionReview", "GPUPolicy", "GPUPolicyTest", "GPUWebhookConfig", "List"})


def _plain_object(document: Any) -> bool:
    """Whether _unpack would yield the document itself: an object of a kind audited as it is."""
    if document.__class__ is not dict:
        return False
    kind, api_version = document.get("kind"), document.get("apiVersion")
    return (
        kind.__class__ is str
        and api_version.__class__ is str
        and bool(api_version)
        and kind not in _NOT_AUDITED
        and not kind.endswith("List")
        and bool(kind)
    )


def _unpack(document: Any, name: str, index: int, notes: Problem) -> Iterator[Item]:
    """A document may be an object, a `kind: List` (kubectl get -o yaml), or empty (`---` at the end)."""
    where = f"{name}#{index}"
    if document is None:
        return
    if not isinstance(document, dict):
        notes(f"{where}: not a Kubernetes object (a {type(document).__name__}): skipped")
        return
    kind, api_version = document.get("kind"), document.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str) or not kind or not api_version:
        notes(f"{where}: not a Kubernetes object (no apiVersion and kind): skipped")
        return
    if kind in ("AdmissionReview", "GPUPolicy", "GPUPolicyTest", "GPUWebhookConfig"):
        hint = " (explain -f reads the object inside it)" if kind == "AdmissionReview" else ""
        notes(f"{where}: {kind} is not a workload manifest{hint}: skipped")
        return
    items = list_items(document)
    if items is not None:
        for position, item in enumerate(items):
            if isinstance(item, dict):
                yield Item(item, f"{where}.items[{position}]")
        return
    yield Item(document, where)


def list_items(document: dict[str, Any]) -> list[Any] | None:
    """The items of a `kind: List` (kubectl get -o yaml) or a typed list (PodList), else None:
    every door unpacks lists the same way."""
    kind = document.get("kind")
    if not isinstance(kind, str):
        return None
    if kind == "List" or (kind.endswith("List") and isinstance(document.get("items"), list)):
        items = document.get("items")
        return items if isinstance(items, list) else []
    return None


def read_namespaces(paths: Iterable[str], problems: Problem = _raise) -> dict[str, dict[str, Any]]:
    """Namespace objects by name, for `namespaceObject` in offline audits (--namespace-objects)."""
    namespaces: dict[str, dict[str, Any]] = {}
    for item in read_manifests(list(paths), problems=problems, notes=lambda _: None):
        if item.object.get("kind") == "Namespace":
            name = (item.object.get("metadata") or {}).get("name")
            if isinstance(name, str):
                namespaces[name] = item.object
    return namespaces
