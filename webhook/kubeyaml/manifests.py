"""Manifests read as kubectl reads them: the reference loader, and a faster way to the same objects.

`Loader` is the reference: kubectl's reading of YAML (scalars.KubeLoader: go-yaml v2's plain
scalars, JSON's string keys) that refuses duplicate keys; `explain` reads its one file with it.
`Documents` builds the same Python objects document by document, faster: `audit` reads the
streams and files that rapid.py leaves to it this way.

Profiling `audit` showed most of its time in PyYAML: libyaml scans and composes in C, but
every scalar then goes through the pure-Python resolver (a regex walk per value) and the
pure-Python constructor (several method calls per node). `Documents` still has libyaml compose
the node tree (so marks, anchors and errors are libyaml's), but:

- the resolver only says "plain" or "quoted" (no regexes), and
- one tight recursive function builds the objects; a plain scalar is resolved by the reference
  resolver and constructor once per distinct text and then looked up (keys and most values
  repeat across objects: `apiVersion`, `name`, `nvidia.com/gpu`, `"1"`).

Anything uncommon (an explicit tag such as `!!binary` or `!!set`, a merge key `<<`, an
unhashable key) leaves the fast path for that document: its plain nodes get their real tags
back and the reference constructor builds it, so the result is the reference loader's by
construction. tests/audit/test_yaml_compat.py holds the corpus that proves both loaders agree,
and what kubectl (sigs.k8s.io/yaml over go-yaml) makes of each case.
"""

from __future__ import annotations

from typing import IO, Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .scalars import KUBE_PLAIN, KubeLoader, go_plain, json_key

ParseError = yaml.YAMLError  # what every reader here raises for text it cannot read (problem_mark: where)


class DuplicateKey(yaml.constructor.ConstructorError):
    pass


class Loader(KubeLoader):
    """kubectl's reading of YAML (scalars.KubeLoader), refusing duplicate keys: YAML says they are an
    error, PyYAML keeps the last.

    Concatenated manifests without `---` between them (`cat a.yaml b.yaml`) are one document
    with every key twice; merged silently, they would audit as one object made of the last file.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = json_key(self.construct_object(key_node, deep=True))
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKey(
                    None,
                    None,
                    f"duplicate key {key!r} (are two documents missing a `---` between them?)",
                    key_node.start_mark,
                )
            seen.add(key)
        # built here rather than by SafeConstructor: `true:` and `1:` are one Python key but two JSON ones
        self.flatten_mapping(node)  # merge keys (explicit keys win over merged ones, as in go-yaml)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = json_key(self.construct_object(key_node, deep=deep))
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
                ) from None
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def kubectl_documents(text: str) -> list[Any]:
    """Every document of the stream as kubectl reads it (the reference `Loader`); a bare `---` is None."""
    return list(yaml.load_all(text, Loader=Loader))  # nosec B506: Loader is the safe loader with kubectl's scalars


_PLAIN = "?plain"  # a tag no YAML document can spell: "resolve me from the text"
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MISS = object()
_MERGE = "tag:yaml.org,2002:merge"
_CACHE_LIMIT = 1 << 13  # distinct plain scalars remembered; reset when full (memory stays flat)


class _Slow(Exception):
    """This document needs the reference constructor."""


def make_loader(reference: type) -> type:
    """A loader class built on `reference` (a CSafeLoader subclass) that composes with fast tags."""

    class FastLoader(reference):  # type: ignore[misc]
        def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
            if kind is ScalarNode:
                return _PLAIN if implicit[0] else _STR
            return _MAP if kind is MappingNode else _SEQ

        # path resolvers (unused) are entered and left around every node the composer builds:
        # C callables that ignore their arguments instead of two Python frames per node
        descend_resolver = staticmethod(slice)
        ascend_resolver = staticmethod(tuple)

    return FastLoader


class Documents:
    """Iterate the documents of a stream; values equal to the reference loader's (yaml.load_all)."""

    def __init__(self, stream: IO[str] | str | bytes, reference: type) -> None:
        self.reference = reference
        fast = _fast_loaders.get(reference)
        if fast is None:  # one class per reference loader, not one per file
            fast = _fast_loaders[reference] = make_loader(reference)
        self.loader = fast(stream)
        # a reference instance, for resolving plain text and for documents off the fast path
        self.slow = reference("")
        self.cache: dict[str, Any] = _caches.setdefault(reference, {})

    def __iter__(self) -> Any:
        loader = self.loader
        try:
            while loader.check_node():
                node = loader.get_node()
                try:
                    yield self._build(node, {})
                except _Slow:
                    yield self._reference(node)
        finally:
            loader.dispose()

    def _scalar(self, text: str) -> Any:
        cache = self.cache
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        if text == "<<":
            raise _Slow  # a merge key: the reference constructor merges
        value = go_plain(text)
        cache[text] = value
        return value

    def _build(self, node: Any, shared: dict[int, Any]) -> Any:
        kind = node.__class__
        tag = node.tag
        if kind is ScalarNode:
            if tag is _PLAIN:
                try:
                    return self.cache[node.value]
                except KeyError:
                    return self._scalar(node.value)
            if tag == _STR:
                return node.value
            raise _Slow
        # an alias is the same node object again: build it once (and share it, as PyYAML does),
        # so that a "billion laughs" document costs what it costs the reference loader
        found = shared.get(id(node))
        if found is not None:
            return found
        if kind is MappingNode:
            if tag != _MAP:
                raise _Slow
            mapping: dict[Any, Any] = {}
            shared[id(node)] = mapping
            build = self._build
            cache = self.cache
            for key_node, value_node in node.value:
                # keys and most values are plain scalars: resolved inline, without a call per node
                if key_node.__class__ is ScalarNode and key_node.tag is _PLAIN:
                    key = cache.get(key_node.value, _MISS)
                    if key is _MISS:
                        key = self._scalar(key_node.value)
                else:
                    key = build(key_node, shared)
                if key.__class__ is not str:
                    key = json_key(key)
                try:
                    duplicate = key in mapping
                except TypeError:
                    raise _Slow from None  # unhashable key: the reference constructor words the error
                if duplicate:
                    raise _Slow  # the reference loader reports it with its mark
                if value_node.__class__ is ScalarNode:
                    if value_node.tag is _PLAIN:
                        value = cache.get(value_node.value, _MISS)
                        mapping[key] = self._scalar(value_node.value) if value is _MISS else value
                        continue
                    if value_node.tag == _STR:
                        mapping[key] = value_node.value
                        continue
                mapping[key] = build(value_node, shared)
            return mapping
        if kind is SequenceNode and tag == _SEQ:
            sequence: list[Any] = []
            shared[id(node)] = sequence
            build = self._build
            sequence.extend(build(item, shared) for item in node.value)
            return sequence
        raise _Slow

    def _reference(self, node: Any) -> Any:
        """Give plain nodes their real tags back and let the reference constructor build the document."""
        seen: set[int] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if isinstance(current, ScalarNode):
                if current.tag is _PLAIN:
                    current.tag = _MERGE if current.value == "<<" else KUBE_PLAIN
            elif isinstance(current, MappingNode):
                stack.extend(part for pair in current.value for part in pair)
            else:
                stack.extend(current.value)
        return self.slow.construct_document(node)


_fast_loaders: dict[type, type] = {}
_caches: dict[type, dict[str, Any]] = {}
