"""Whole manifest files through rapidyaml (C++) and JSON, where that provably reads what kubectl reads.

The libyaml path (manifests.Documents) builds a Python node object per scalar before building the value:
most of an audit's time with few rules. rapidyaml parses a file into its own C++ tree and writes
it as one JSON text, a stream as an array of its documents (quoted YAML scalars stay JSON strings;
plain ones that are JSON numbers, true, false or null are written bare, everything else quoted),
which orjson reads: ~7x less CPU, and the checks below run once per file, not per document.

That route is only taken when it cannot differ from the reference loader (manifests.Loader, whose
answers tests/audit/test_yaml_compat.py pins to kubectl's); otherwise `documents()` returns None
and the caller reads the file with the libyaml path, which then also words any error with its
file:line:column. The file is refused up front when its text has anything the JSON route does
not carry: tags (`!!binary`, `!!str 1`), anchors and aliases, merge keys, directives, complex
keys, tabs, carriage returns, backslashes (double-quoted escapes), control characters, YAML 1.1 line breaks
(NEL, LS, PS), a byte-order mark, or more than MAX_BYTES. After parsing, a document is refused
when
- a JSON string is a plain scalar go-yaml would resolve otherwise (`yes`, `0777`, `0x1F`, `1_0`,
  `~`, `.inf`: all written quoted by rapidyaml since they are no JSON literals; a string such as
  "4" that *is* a JSON literal was quoted in the YAML, else it would be bare), or a key that is
  not a plain string to go-yaml (`1.5:`, `null:`, `yes:`),
- a bare literal is not JSON (`+1`, or `1e400`, past a double), or
- orjson read fewer keys than rapidyaml wrote: a duplicate key, which the reference loader reports
  as an error and orjson would silently keep the last of.
"""

from __future__ import annotations

import os
import re
from typing import Any

import orjson
from yaml._yaml import CParser as _CParser

from .scalars import go_plain, json_key

try:  # an optional accelerator: without it every file takes the libyaml path
    import ryml
except ImportError:  # pragma: no cover - rapidyaml is a dependency; a build without it still works
    ryml = None

MAX_BYTES = 32 << 20  # larger files are streamed document by document by the libyaml path

# characters that may start something the JSON route does not carry: if none is in the file (the
# usual case: one scan in C), it is safe; else each is looked at (_unsafe)
_RARE = re.compile(rb"[!&*?%<|>\t\r\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f\xc2\xe2\xef]")
# every other byte: `data.translate(None, _COMMON)` leaves the rare ones, 10x faster than a search
_COMMON = bytes(b for b in range(256) if not _RARE.match(bytes((b,))))
# merge keys, directives, a block scalar at the top level (rapidyaml reads a `---` after it as
# text), tabs, carriage returns, backslashes, control characters, C1 controls incl.
# NEL, LS/PS, BOM, U+FFFE/U+FFFF: anywhere
_UNSAFE_ANYWHERE = re.compile(
    rb"<<|^%|^(?:--- *)?[|>]|[\t\r\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf|\xef\xbf[\xbe\xbf]",
    re.MULTILINE,
)
# tags, anchors, aliases and complex keys: where a node may start (after a space, a flow indicator
# or `:`); elsewhere (`a*b`, `http://x?y`) the character is part of a plain scalar
_INDICATOR = re.compile(rb"(?:^|(?<=[\s\[{,:]))[!&*?]", re.MULTILINE)
# JSON strings that might not be strings to go-yaml (a superset of its words and numbers: each
# match is then checked exactly with scalars.go_plain, as matches are rare)
_WORDS = "y|Y|yes|Yes|YES|true|True|TRUE|on|On|ON|n|N|no|No|NO|false|False|FALSE|off|Off|OFF|~|null|Null|NULL"
# (a number to go-yaml has only the characters of ints, floats, 0x / 0o / 0b and `_` after its first digit)
_NUMBER = rb"[-+]?\.?[0-9][0-9a-fA-FoOxX_.+-]*"
_RISKY = re.compile(
    rb'"(?=[-+.0-9yYnNtTfFoO~])((?:' + _WORDS.encode() + rb")|" + _NUMBER + rb'|[-+]?\.[a-zA-Z]+)"(\s*:)?'
)
_JSON_LITERAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")
# rapidyaml's emit_json_malloc never frees its buffer (600 KiB lost per 1,000 pods): documents are
# written into this one, grown as needed, and copied out
_out = bytearray(1 << 16)


def available() -> bool:
    return ryml is not None


def documents(data: bytes) -> list[Any] | None:
    """The file's documents as the reference loader builds them, or None: read it the other way."""
    if ryml is None or len(data) > MAX_BYTES or (data.translate(None, _COMMON) and _unsafe(data)):
        return None
    try:
        data.decode("utf-8")  # the caller's error for a file that is not UTF-8
    except UnicodeDecodeError:
        return None
    if not data.endswith(b"\n") and data:
        return None  # rapidyaml ends a block scalar at the end of the text with a line break
    try:
        # libyaml's parser, events only (C, no Python objects): rapidyaml accepts some texts that
        # libyaml (and kubectl's go-yaml, a port of it) refuses, such as `- :` or a leading `]`
        _CParser(data).raw_parse()
        tree = _parse(data)
    except Exception:  # any parse error: the libyaml path words it with its mark
        return None
    # the whole file in one JSON text (a stream is written as an array of its documents): one
    # emit, one scan and one orjson call per file rather than per document
    root = tree.root_id()
    if tree.is_stream(root):
        values = _value(_emit_json(tree, root))
        return None if values is _REFUSED else values
    if not tree.is_container(root) and not tree.has_val(root):
        return []  # no document at all (an empty file, only comments)
    value = _value(_emit_json(tree, root))
    return None if value is _REFUSED else [value]


_REFUSED = object()


def _unsafe(data: bytes) -> bool:
    return _UNSAFE_ANYWHERE.search(data) is not None or _INDICATOR.search(data) is not None


def _parse(data: bytes) -> Any:
    # rapidyaml prints a parse error to fd 2 before raising it; the libyaml path reports it instead
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        return ryml.parse_in_arena(data)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _emit_json(tree: Any, node: int) -> bytes:
    global _out
    failed, size = ryml.emit_json_to_substr(tree, node, _out)
    if failed:
        _out = bytearray(max(size, 2 * len(_out)))
        failed, size = ryml.emit_json_to_substr(tree, node, _out)
    return bytes(memoryview(_out)[:size])


def _value(text: bytes) -> Any:
    """The value of rapidyaml's JSON text (an empty document is `null`), or _REFUSED."""
    # each distinct risky string is checked once (manifests repeat them: `cpu: "4"` in every pod)
    for found, key in set(_RISKY.findall(text)):
        content = found.decode()
        value = go_plain(content)
        if value.__class__ is str:
            continue  # a string whether it was plain or quoted
        if key:
            if json_key(value) != content:  # `yes:` is the key "true", `1.5:` a float, `01:` "1"
                return _REFUSED
        elif not _JSON_LITERAL.fullmatch(content):
            # rapidyaml writes a plain JSON literal bare: a quoted one was quoted in the YAML (a string)
            return _REFUSED
    try:
        # orjson reads bare numbers as go-yaml does: int to 64 bits (signed or not), else a double
        value = orjson.loads(text)
    except orjson.JSONDecodeError:  # a bare `+1`, `1e400`
        return _REFUSED
    # a duplicate key is an error to the reference loader, and orjson keeps the last one silently:
    # count keys, each a string followed by `": ` (rapidyaml) or `":` (orjson), whose quote is no
    # escaped `\"` inside a string (the file has no backslashes, so no `\\` comes before one)
    dumped = orjson.dumps(value)
    if text.count(b'": ') - text.count(b'\\": ') != dumped.count(b'":') - dumped.count(b'\\":'):
        return _REFUSED
    return value
