"""Block YAML as PyYAML writes it, for diffs and reports: `plain_yaml`, and the lines of both sides of a diff.

`plain_yaml(value)` is yaml.dump(value, sort_keys=False, default_flow_style=False) without
anchors and aliases, to the byte. A diff renders the object twice (submitted and mutated), and
PyYAML's dumper alone (`pyyaml_dump`) costs ~180 µs per pod, more than the engine spends on it.
So `Writer` builds the lines in Python for manifest-like values: mappings and lists of short
scalars, whose block layout is simple (PyYAML's defaults: indent 2, sequences inside mappings
not indented, `{}`/`[]` for empty collections). The text of each scalar is still PyYAML's: the
first time a value (or key) is met, the dumper writes it alone on one line, and that text is
kept, so quoting (`'yes'`, `'1'`, `"caf\\xE9"`) is the dumper's own. `lines()` returns None, and
the caller dumps with PyYAML, whenever the layout could differ: a scalar written on several
lines, one that PyYAML could fold at the line width, a key that is not a simple one-line
string, or a document that is not a mapping or a list. tests/audit/test_yaml_block.py compares
both on generated values.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import orjson
import yaml

_CACHE_LIMIT = 1 << 14  # distinct scalars remembered; cleared when full (memory stays flat)

# Strings PyYAML writes plain, as they are, without asking its dumper (a pod's name, an image):
# a letter, then letters, digits and `_./-`, so no indicator, space or line break (Emitter.analyze_scalar
# allows them plain). The implicit resolvers that start with a letter are YAML 1.1's booleans and
# nulls (Resolver: bool on yYnNtTfFoO, null on nN~), so only those words would come out quoted.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_WORDS = frozenset(
    f(w) for w in ("yes", "no", "true", "false", "on", "off", "null") for f in (str, str.title, str.upper)
)


# the lines of a mapping's collection-valued entries: key -> (start, end, spans of a mapping value)
Spans = dict[Any, tuple[int, int, "Spans | None"]]


def _same(before: Any, after: Any) -> bool:
    """Whether two values are written alike: equal, and equal as JSON (1, 1.0 and True are equal to
    Python, as are dicts in another key order; NaN and None are both null to orjson)."""
    if before != after:
        return False
    try:
        return orjson.dumps(before) == orjson.dumps(after)
    except TypeError:  # not a JSON value (a date, a 65-bit int): written again, not compared
        return False


class _Unsure(Exception):
    """The layout of this document is PyYAML's to decide."""


class Writer:
    """Lines of `dump(value)` for a dumper `dump(value, width) -> str` (pyyaml_dump below)."""

    def __init__(self, dump: Callable[[Any, int], str]) -> None:
        self.dump = dump
        self.values: dict[tuple[type, Any], str | None] = {}
        self.keys: dict[str, str | None] = {}

    def lines(self, value: Any, width: int = 80) -> list[str] | None:
        kind = value.__class__
        if kind is not dict and kind is not list:
            return None
        if not value:
            return ["{}\n" if kind is dict else "[]\n"]
        out: list[str] = []
        try:
            if kind is dict:
                self._mapping(value, 0, "", out, width)
            else:
                self._sequence(value, 0, "", out, width)
        except _Unsure:
            return None
        return out

    def _value_text(self, value: Any) -> str:
        kind = value.__class__
        key = (kind, repr(value) if kind is float else value)  # 0.0 == -0.0, and NaN != NaN
        try:
            text = self.values[key]
        except KeyError:
            if len(self.values) >= _CACHE_LIMIT:
                self.values.clear()
            if kind is str and _PLAIN.fullmatch(value) and value not in _WORDS:
                text = value
            else:
                written = self.dump({"k": value}, 1 << 20)  # one line, unless the scalar has line breaks
                text = written[3:-1] if written.startswith("k: ") and written.count("\n") == 1 else None
            self.values[key] = text
        except TypeError:  # unhashable: not a scalar
            raise _Unsure from None
        if text is None:
            raise _Unsure
        return text

    def _key_text(self, key: Any) -> str:
        if key.__class__ is not str:
            raise _Unsure
        text = self.keys.get(key, "")
        if text == "":
            if len(self.keys) >= _CACHE_LIMIT:
                self.keys.clear()
            written = self.dump({key: None}, 1 << 20)
            ok = written.endswith(": null\n") and written.count("\n") == 1 and not written.startswith("? ")
            text = self.keys[key] = written[: -len(": null\n")] if ok else None
        if text is None:
            raise _Unsure
        return text

    def _scalar(self, value: Any, column: int, width: int) -> str:
        text = self._value_text(value)
        # PyYAML breaks a plain or single-quoted scalar only at a space, and only past the width;
        # a double-quoted one anywhere past it: a text that fits, or has nothing to break at, stays
        if column + len(text) > width and (" " in text or text[:1] == '"'):
            raise _Unsure
        return text

    def pair(self, before: Any, after: Any, width: int = 80) -> tuple[list[str] | None, list[str] | None]:
        """lines(before) and lines(after), for a diff: the entries of `after` that equal `before`'s at
        the same place (a patch changes few) are copied from before's lines rather than written again."""
        if before.__class__ is not dict or after.__class__ is not dict or not before or not after:
            return self.lines(before, width), self.lines(after, width)
        first: list[str] = []
        spans: Spans = {}
        try:
            self._mapping(before, 0, "", first, width, spans)
        except _Unsure:
            return None, self.lines(after, width)
        second: list[str] = []
        try:
            self._mapping(after, 0, "", second, width, None, (before, first, spans))
        except _Unsure:
            return first, None
        return first, second

    def _mapping(
        self,
        mapping: dict[Any, Any],
        indent: int,
        first: str,
        out: list[str],
        width: int,
        spans: Spans | None = None,
        like: tuple[dict[Any, Any], list[str], Spans] | None = None,
    ) -> None:
        # spans: where each collection-valued entry's lines went (recorded for pair());
        # like: an earlier mapping at the same place, its lines and spans (the entries to copy)
        pad = " " * indent
        head = first
        keys, values = self.keys, self.values  # the caches' hits inline; the methods do the rest
        for key, value in mapping.items():
            line = f"{head}{keys.get(key) or self._key_text(key)}:"
            head = pad
            kind = value.__class__
            if (kind is dict or kind is list) and value and like is not None:
                earlier, lines, where = like
                found = where.get(key)
                # the engine's copy-on-write leaves what a patch did not touch as the same object
                if found is not None and (earlier[key] is value or _same(earlier[key], value)):
                    out.append(line + "\n")  # the entry's lines below its key depend on its value and indent only
                    out.extend(lines[found[0] : found[1]])
                    continue
                if kind is dict and found is not None and found[2] is not None:
                    out.append(line + "\n")
                    self._mapping(value, indent + 2, " " * (indent + 2), out, width, None, (earlier[key], lines, found[2]))
                    continue
            if kind is dict:
                if value:
                    out.append(line + "\n")
                    start = len(out)
                    inner: Spans | None = None if spans is None else {}
                    self._mapping(value, indent + 2, " " * (indent + 2), out, width, inner)
                    if spans is not None:
                        spans[key] = (start, len(out), inner)
                else:
                    out.append(line + " {}\n")
            elif kind is list:
                if value:
                    out.append(line + "\n")
                    start = len(out)
                    self._sequence(value, indent, pad, out, width)  # not indented inside a mapping
                    if spans is not None:
                        spans[key] = (start, len(out), None)
                else:
                    out.append(line + " []\n")
            else:
                text = values.get((kind, value)) if kind is str or kind is int else None
                if text is None or (len(line) + 1 + len(text) > width and (" " in text or text[:1] == '"')):
                    text = self._scalar(value, len(line) + 1, width)  # a miss, or _Unsure
                out.append(f"{line} {text}\n")

    def _sequence(self, sequence: list[Any], indent: int, first: str, out: list[str], width: int) -> None:
        pad = " " * indent
        head = first
        for item in sequence:
            line = head + "- "
            head = pad
            kind = item.__class__
            if kind is dict:
                if item:
                    self._mapping(item, indent + 2, line, out, width)
                else:
                    out.append(line + "{}\n")
            elif kind is list:
                if item:
                    self._sequence(item, indent + 2, line, out, width)
                else:
                    out.append(line + "[]\n")
            else:
                text = self.values.get((kind, item)) if kind is str or kind is int else None
                if text is None or (len(line) + len(text) > width and (" " in text or text[:1] == '"')):
                    text = self._scalar(item, len(line), width)  # a miss, or _Unsure
                out.append(line + text + "\n")


class _PlainDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """No anchors and aliases (&id001): a diff is read by people, and a patch may share values."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        # the emitter asks, twice per scalar, whether its text would read back as its tag; the
        # answers depend on the text alone, and manifests repeat their texts
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]
        key = (value, implicit[0])
        tag = _RESOLVED.get(key)
        if tag is None:
            if len(_RESOLVED) >= 1 << 16:
                _RESOLVED.clear()
            tag = _RESOLVED[key] = super().resolve(kind, value, implicit)
        return tag


_RESOLVED: dict[tuple[str, bool], str] = {}
_STR, _INT, _BOOL, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "bool", "null"))
_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _node(value: Any, dumper: Any) -> Any:
    """The node SafeRepresenter makes (default_flow_style=False, no aliases), without its dispatch.

    JSON-like values (what manifests are) are built here; anything else goes to the representer.
    """
    kind = value.__class__
    if kind is str:
        return yaml.ScalarNode(_STR, value)
    if kind is dict:
        return yaml.MappingNode(
            _MAP, [(_node(k, dumper), _node(v, dumper)) for k, v in value.items()], flow_style=False
        )
    if kind is list:
        return yaml.SequenceNode(_SEQ, [_node(v, dumper) for v in value], flow_style=False)
    if kind is bool:
        return yaml.ScalarNode(_BOOL, "true" if value else "false")
    if kind is int:
        return yaml.ScalarNode(_INT, str(value))
    if value is None:
        return yaml.ScalarNode(_NULL, "null")
    return dumper.represent_data(value)


def plain_yaml(value: Any, width: int = 80) -> str:
    """yaml.dump(value, sort_keys=False, default_flow_style=False) without aliases, the same bytes, faster."""
    lines = BLOCK_WRITER.lines(value, width)
    return "".join(lines) if lines is not None else pyyaml_dump(value, width)


def plain_yaml_pair(before: Any, after: Any, width: int = 80) -> tuple[list[str], list[str]]:
    """The lines (ends kept) of plain_yaml(before) and plain_yaml(after), for a diff: what `after`
    shares with `before` is written once."""
    first, second = BLOCK_WRITER.pair(before, after, width)
    if first is None:
        first = pyyaml_dump(before, width).splitlines(keepends=True)
    if second is None:
        second = pyyaml_dump(after, width).splitlines(keepends=True)
    return first, second


def pyyaml_dump(value: Any, width: int) -> str:
    """plain_yaml through PyYAML's dumper alone (what BLOCK_WRITER copies, and falls back to)."""
    stream = io.StringIO()
    dumper = _PlainDumper(stream, sort_keys=False, default_flow_style=False, width=width)
    try:
        dumper.open()
        dumper.serialize(_node(value, dumper))
        dumper.close()
    finally:
        dumper.dispose()
    return stream.getvalue()


BLOCK_WRITER = Writer(pyyaml_dump)  # manifest-like values line by line; PyYAML for anything it is unsure of
