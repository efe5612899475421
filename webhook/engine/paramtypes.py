"""The types of a rule's params: its `spec.paramsSchema`, or the types of its shipped defaults.

A rule may declare its params' schema as a subset of JSON Schema (PARAMS_META: types, enums, bounds,
lengths, patterns, items, properties). The loader checks the effective params (after every overlay)
against it, so a site's value of the wrong type fails the load naming the param instead of failing
every request at runtime. Without a declared schema, the types of the shipped defaults serve
(inferred_schema): an overlay may change a value, not its type.

Lint type-checks each expression that reads `params.NAME` with the param declared as its CEL type
(cel_types), so `gpuCount(podSpec) <= params.max` with `max: "8"` is an error at lint, not a
`No matching overloads found : _<=_(int64, string)` on every GPU pod. Numbers stay dyn to the
checker: the runtime compares int and double values with each other (its checker would not).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from jsonschema import Draft202012Validator

from webhook.cel import celsyntax

from .cel import CelCompileError, CelEnvironment
from .resources import DEFAULT

_NODE_REF = {"$ref": "#/$defs/node"}
# The subset of JSON Schema a paramsSchema may use: a tree of typed nodes.
PARAMS_META: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "node": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["string", "integer", "number", "boolean", "array", "object"]},
                "description": {"type": "string"},
                "enum": {"type": "array", "minItems": 1},
                "minimum": {"type": "number"},
                "maximum": {"type": "number"},
                "minLength": {"type": "integer", "minimum": 0},
                "maxLength": {"type": "integer", "minimum": 0},
                "pattern": {"type": "string"},
                "minItems": {"type": "integer", "minimum": 0},
                "maxItems": {"type": "integer", "minimum": 0},
                "items": _NODE_REF,
                "properties": {"type": "object", "additionalProperties": _NODE_REF},
                "additionalProperties": {"oneOf": [{"type": "boolean"}, _NODE_REF]},
                "required": {"type": "array", "items": {"type": "string"}},
            },
        }
    },
    "allOf": [_NODE_REF, {"properties": {"type": {"const": "object"}}, "required": ["type"]}],
}
_META_VALIDATOR = Draft202012Validator(PARAMS_META)


def schema_problems(schema: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Where a paramsSchema leaves the subset, and why (paths inside the schema)."""
    errors = sorted(_META_VALIDATOR.iter_errors(schema), key=lambda e: list(map(str, e.absolute_path)))
    for error in errors:
        yield tuple(error.absolute_path), error.message
    if not errors:
        for path, pattern in _patterns(schema, ()):
            try:
                re.compile(pattern)
            except re.error as error:
                yield path, f"pattern {pattern!r} is not a regular expression: {error}"


def _patterns(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    if not isinstance(node, Mapping):
        return
    if isinstance(node.get("pattern"), str):
        yield (*path, "pattern"), node["pattern"]
    if isinstance(node.get("items"), Mapping):
        yield from _patterns(node["items"], (*path, "items"))
    for name, child in (node.get("properties") or {}).items():
        yield from _patterns(child, (*path, "properties", name))
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _patterns(node["additionalProperties"], (*path, "additionalProperties"))


def params_problems(params: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Where the params break their schema (paths inside params), and how."""
    validator = Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(dict(params)), key=lambda e: list(map(str, e.absolute_path))):
        yield tuple(error.absolute_path), error.message


def inferred_schema(params: Mapping[str, Any]) -> dict[str, Any]:
    """The schema the shipped defaults imply: each param keeps its JSON type (null: anything)."""
    properties = {str(name): _value_schema(value) for name, value in params.items()}
    return {"type": "object", "properties": {k: v for k, v in properties.items() if v}}


def _value_schema(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int | float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        items = [_value_schema(v) for v in value]
        same = items[0] if items and all(i == items[0] for i in items) and items[0] else None
        return {"type": "array", "items": same} if same else {"type": "array"}
    if isinstance(value, Mapping):
        return {"type": "object"}
    return {}


def cel_types(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Param name -> its CEL type for the checker (cel.Type), for every param the schema types."""
    properties = schema.get("properties")
    found = {}
    for name, node in (properties if isinstance(properties, Mapping) else {}).items():
        kind = _cel_type(node)
        if kind is not None:
            found[str(name)] = kind
    return found


def _cel_type(node: Any) -> Any:
    """A node's CEL type; None when the checker must take it as dyn."""
    if not isinstance(node, Mapping):
        return None
    kind = node.get("type")
    if kind is None and isinstance(node.get("enum"), list):
        values = node["enum"]
        kinds = {_value_schema(v).get("type") for v in values}
        kind = kinds.pop() if len(kinds) == 1 else None
    if kind == "string":
        return cel.Type.STRING
    if kind == "boolean":
        return cel.Type.BOOL
    if kind == "array":
        return cel.Type.List(_cel_type(node.get("items")) or cel.Type.DYN)
    if kind == "object":
        extra = node.get("additionalProperties")
        values = _cel_type(extra) if isinstance(extra, Mapping) and not node.get("properties") else None
        return cel.Type.Map(cel.Type.STRING, values or cel.Type.DYN)
    return None  # integer and number: the runtime compares int with double, the checker would refuse


@dataclass(frozen=True, slots=True)
class ParamTypes:
    """The CEL types of a rule's params, for lint: from its spec.paramsSchema, else from its params' values."""

    types: Mapping[str, Any]  # param name -> its CEL type (cel_types)

    @classmethod
    def of(cls, params: Mapping[str, Any], declared: Mapping[str, Any] | None) -> ParamTypes:
        return cls(cel_types(declared if declared is not None else inferred_schema(params)))

    def error(self, env: CelEnvironment | None, text: str) -> CelCompileError | None:
        """The checker's error for `text` with its params typed so (type_error)."""
        return type_error(env, text, self.types)


def type_error(env: CelEnvironment | None, text: str, types: Mapping[str, Any]) -> CelCompileError | None:
    """The checker's error for an expression with each `params.NAME` it reads typed as `types` says.

    Each reference (`params.NAME`, `params['NAME']`; not a field `x.params.NAME`, not inside a literal)
    is replaced by a variable of the same length declared with the param's type, so the error's
    line and column are the author's. `env`: the rule set's (its accelerator table), else the default.
    """
    try:
        found = celsyntax.tokens(text)
    except celsyntax.CelSyntaxError:
        return None  # the loader reports it
    blank = celsyntax.blank(text)
    out: list[str] = []
    typed: dict[str, Any] = {}
    position = 0
    for index, token in enumerate(found[:-3]):
        if token.kind != "ident" or token.text != "params" or celsyntax.selected(blank, token.start):
            continue
        following = found[index + 1 : index + 4]
        if following[0].text == "." and following[1].kind == "ident":
            name, end = following[1].text, following[1].end
        elif following[0].text == "[" and following[1].kind == "string" and following[2].text == "]":
            name, end = following[1].text[1:-1], following[2].end
        else:
            continue
        if name not in types or token.start < position:
            continue
        placeholder = f"gwP{len(typed)}".ljust(end - token.start, "_")
        typed[placeholder] = types[name]
        out.append(text[position : token.start])
        out.append(placeholder)
        position = end
    if not typed:
        return None
    out.append(text[position:])
    env = env if env is not None else CelEnvironment(DEFAULT)
    error = env.type_check("".join(out), typed)
    if error is None:
        return None
    message = str(error)
    for placeholder in typed:
        message = message.replace(placeholder, "params")
    return CelCompileError(message, error.line, error.column)
