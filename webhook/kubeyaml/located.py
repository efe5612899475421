"""Safe YAML loading that remembers where every value and key came from (file:line:column).

Rule files and GPUPolicyTest suites are read here, so that schema and CEL errors name the
file, line and column. Only the safe loader is used: no tag can build a Python object.
Plain scalars are kubectl's (scalars.py). Duplicate keys are reported rather than silently
keeping the last one. Aliases share the value built for their anchor, and a document whose
aliases would expand past MAX_EXPANDED_VALUES (a "billion laughs"), or refer to themselves,
is refused: code that walks or copies rule values (schema checks, the `merge` mutation on
every request) must never meet one.

Beside it, the reads that need no positions: `plain_documents` and `plain_document`
(yaml.safe_load at libyaml's speed, for the project's own YAML: kustomize files, the rules
ConfigMap) and `document_kinds` (the top-level kinds, without building the values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .scalars import KubeLoader, json_key

Path = tuple[str | int, ...]  # keys and list indexes from the document's root (webhook.engine.pointer's Path)
MAX_EXPANDED_VALUES = 100_000
_PLAIN_COLLECTIONS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # libyaml not compiled in
    _Loader = yaml.SafeLoader


def plain_documents(text: str) -> list[Any]:
    """Every document of a YAML stream as plain values, without positions: yaml.safe_load_all at
    libyaml's speed (the pure-Python loader is ~10x slower on the rule pack and the manifests)."""
    return list(yaml.load_all(text, Loader=_Loader))  # nosec B506: _Loader is the safe loader (C or Python)


def document_kinds(text: str) -> list[str | None]:
    """The top-level `kind` of each mapping document (None: it has none), read from the node tree
    without building the values; documents that are not mappings are left out."""
    nodes = yaml.compose_all(text, Loader=_Loader)  # nosec B506: composes nodes, builds nothing
    return [_node_kind(node) for node in nodes if isinstance(node, yaml.MappingNode)]


def _node_kind(node: yaml.Node) -> str | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    found = [v.value for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "kind"]
    return found[-1] if found and isinstance(found[-1], str) else None


def plain_document(text: str) -> Any:
    """The one document of a YAML stream as plain values (yaml.safe_load at libyaml's speed)."""
    return yaml.load(text, Loader=_Loader)  # nosec B506: _Loader is the safe loader (C or Python)


@dataclass(slots=True)
class Document:
    data: Any
    file: str
    index: int  # position of the document in its file
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)  # path -> (line, column), 1-based
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)  # path of a map entry -> its key's position
    duplicate_keys: list[tuple[Path, tuple[int, int]]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the file's text, shared by its documents

    def text_position(self, path: Path, offset: int) -> tuple[int, int]:
        """Where character `offset` of the string value at `path` sits in the file.

        CEL reports positions inside the expression text; authors need them in the file.
        Block scalars (| and >) and multi-line plain or quoted scalars join their lines
        with one character (a newline or a folding space), so walking the lines with
        that one-character separator maps an offset back to a line and column.
        """
        line, column = self.position(path)
        if not 0 < line <= len(self.lines):
            return line, column
        first = self.lines[line - 1]
        indicator = first[column - 1 : column]
        segments: list[tuple[int, int, int]] = []  # (line, column of its first character, length)
        if indicator in ("|", ">"):
            indent = None
            for number in range(line + 1, len(self.lines) + 1):
                text = self.lines[number - 1]
                stripped = text.lstrip(" ")
                if not stripped.strip():
                    segments.append((number, 1, 0))
                    continue
                here = len(text) - len(stripped)
                if indent is None:
                    indent = here
                if here < indent:
                    break
                segments.append((number, indent + 1, len(text) - indent))
        else:
            start = column + (1 if indicator in ("'", '"') else 0)
            segments.append((line, start, len(first) - start + 1))
            for number in range(line + 1, len(self.lines) + 1):
                text = self.lines[number - 1]
                stripped = text.lstrip(" ")
                segments.append((number, len(text) - len(stripped) + 1, len(stripped)))
        remaining = offset
        for number, start, length in segments:
            if remaining <= length:
                return number, start + remaining
            remaining -= length + 1
        return line, column

    def position(self, path: Path, key: bool = False) -> tuple[int, int]:
        """The closest known position for a path: the key itself when asked, else the value."""
        path = tuple(path)
        while True:
            if key and path in self.keys:
                return self.keys[path]
            if path in self.values:
                return self.values[path]
            if not path:
                return (1, 1)
            path = path[:-1]


class YamlError(ValueError):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


def load_documents(text: str, file: str, skip_kinds: frozenset[str] = frozenset()) -> list[Document]:
    """All documents of a YAML stream, with positions; raises YamlError on a syntax error.

    Mappings whose top-level `kind` is in `skip_kinds` are left out unbuilt (the rule loader
    skips the test suites beside the rules: most of the pack's bytes).
    """
    # rule files and the objects in suites as kubectl reads YAML, like `audit` and `explain` (scalars.py)
    loader = KubeLoader(text)
    documents: list[Document] = []
    lines = text.splitlines()
    index = -1
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            index += 1
            if skip_kinds and _node_kind(node) in skip_kinds:
                continue
            document = Document(data=None, file=file, index=index, lines=lines)
            document.data = _build(loader, node, (), document, {})
            _check_expansion(document.data, node)
            documents.append(document)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = " ".join(str(p) for p in (error.context, error.problem) if p)
        raise YamlError(problem or str(error), line, column) from None
    except yaml.YAMLError as error:
        raise YamlError(str(error), 1, 1) from None
    finally:
        loader.dispose()
    return documents


def _check_expansion(data: Any, node: yaml.Node) -> None:
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    line = node.start_mark.line + 1

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise YamlError("an alias refers to a value that contains it (recursive aliases)", line, 1)
        open_.add(key)
        total = 1 + sum(size(v) for v in (value.values() if isinstance(value, dict) else value))
        open_.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_VALUES:
            raise YamlError(f"aliases expand this document past {MAX_EXPANDED_VALUES} values", line, 1)
        return total

    try:
        size(data)
    except RecursionError:
        raise YamlError("document is nested too deeply", line, 1) from None


def _build(loader: Any, node: yaml.Node, path: Path, document: Document, built: dict[int, Any]) -> Any:
    # An alias reuses the value already built for its anchor: no "billion laughs" expansion.
    if id(node) in built:
        return built[id(node)]
    document.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_COLLECTIONS:
        # maps and lists are built here, not by the loader's constructors: refuse explicit tags
        # (!!python/object/apply:..., !!set) instead of silently building a plain value from them
        raise YamlError(f"tag {node.tag!r} is not allowed in rule files", node.start_mark.line + 1, 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<` merge keys the way the safe loader does
        result: dict[Any, Any] = {}
        built[id(node)] = result
        for key_node, value_node in node.value:
            key = json_key(loader.construct_object(key_node, deep=True))
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise YamlError("mapping keys must be scalars", key_node.start_mark.line + 1, 1)
            child: Path = (*path, key)  # type: ignore[arg-type]  # float/bool/null keys: never looked up
            position = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in result:
                document.duplicate_keys.append((child, position))
            document.keys[child] = position
            result[key] = _build(loader, value_node, child, document, built)
        return result
    if isinstance(node, yaml.SequenceNode):
        items: list[Any] = []
        built[id(node)] = items
        items.extend(_build(loader, item, (*path, index), document, built) for index, item in enumerate(node.value))
        return items
    return loader.construct_object(node, deep=True)
