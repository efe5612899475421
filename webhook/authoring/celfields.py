"""Find field references in CEL that a Pod cannot have (`podSpec.containerz`).

The rule environment declares every variable `dyn`, so the CEL checker accepts any
field name; the mistake would only show as a `no such key` error (or a `has()` that is
always false) on the first real request. Here a small CEL parser builds just enough of
a syntax tree to follow selections from the known variables (and the variables that
`all`/`exists`/`filter`/`map` bind over their lists) through the Pod field list of
`podfields`, and reports the first field that does not exist, with its offset in the
expression text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from .podfields import ANY, CONTAINER, NAMESPACE, POD, POD_ONLY_SPEC_FIELDS, POD_SPEC, FieldType, ListOf, MapOf, Struct

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0x[0-9a-fA-F]+u?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?u?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)
_MACROS = frozenset({"all", "exists", "exists_one", "filter", "map"})
_RELATIONS = frozenset({"<", "<=", ">", ">=", "==", "!=", "in"})


class CelSyntaxError(ValueError):
    """Our parser could not follow the text: the CEL compiler reports the real error."""


@dataclass(slots=True)
class Node:
    kind: str  # ident | select | call | index | other
    position: int = 0  # offset of the identifier or field name
    name: str = ""  # identifier, field or function name
    children: list[Node] = field(default_factory=list)  # select/index: [operand, ...]; call: [target?, args...]
    has_target: bool = False  # a receiver-style call: x.f(...)


@dataclass(frozen=True, slots=True)
class FieldProblem:
    offset: int  # where the bad field name starts in the expression text
    message: str


def _tokens(text: str) -> list[tuple[str, str, int]]:
    found: list[tuple[str, str, int]] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise CelSyntaxError(f"unexpected character at {position}")
        kind = match.lastgroup or ""
        if kind != "space":
            found.append((kind, match.group(), position))
        position = match.end()
    found.append(("end", "", len(text)))
    return found


class _Parser:
    """Recursive descent over CEL's grammar; precedence as in the CEL spec."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.at]

    def take(self, value: str | None = None) -> tuple[str, str, int]:
        token = self.tokens[self.at]
        if value is not None and token[1] != value:
            raise CelSyntaxError(f"expected {value!r} at {token[2]}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self.expression()
        if self.peek()[0] != "end":
            raise CelSyntaxError("trailing input")
        return node

    def expression(self) -> Node:
        node = self.binary(0)
        if self.peek()[1] == "?":
            self.take()
            yes = self.expression()
            self.take(":")
            no = self.expression()
            return Node("other", children=[node, yes, no])
        return node

    _LEVELS: tuple[frozenset[str], ...] = (
        frozenset({"||"}),
        frozenset({"&&"}),
        _RELATIONS,
        frozenset({"+", "-"}),
        frozenset({"*", "/", "%"}),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek()[1] in self._LEVELS[level] and self.peek()[0] in ("op", "ident"):
            self.take()
            node = Node("other", children=[node, self.binary(level + 1)])
        return node

    def unary(self) -> Node:
        if self.peek()[1] in ("!", "-"):
            self.take()
            return Node("other", children=[self.unary()])
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            value = self.peek()[1]
            if value == ".":
                self.take()
                kind, name, position = self.take()
                if kind != "ident":
                    raise CelSyntaxError(f"expected a field name at {position}")
                if self.peek()[1] == "(":
                    node = Node("call", position, name, [node, *self.arguments("(", ")")], has_target=True)
                else:
                    node = Node("select", position, name, [node])
            elif value == "[":
                self.take()
                index = self.expression()
                self.take("]")
                node = Node("index", children=[node, index])
            elif value == "{":  # message construction: not used on Kubernetes objects
                node = Node("other", children=[node, *self.entries()])
            else:
                return node

    def primary(self) -> Node:
        kind, value, position = self.peek()
        if value == ".":
            self.take()
            kind, value, position = self.peek()
        if kind == "ident":
            self.take()
            if self.peek()[1] == "(":
                return Node("call", position, value, self.arguments("(", ")"))
            return Node("ident", position, value)
        if value == "(":
            self.take()
            node = self.expression()
            self.take(")")
            return node
        if value == "[":
            return Node("other", children=self.arguments("[", "]"))
        if value == "{":
            return Node("other", children=self.entries())
        if kind in ("string", "number"):
            self.take()
            return Node("other")
        raise CelSyntaxError(f"unexpected {value!r} at {position}")

    def arguments(self, opening: str, closing: str) -> list[Node]:
        self.take(opening)
        found: list[Node] = []
        while self.peek()[1] != closing:
            found.append(self.expression())
            if self.peek()[1] != ",":
                break
            self.take()
        self.take(closing)
        return found

    def entries(self) -> list[Node]:
        self.take("{")
        found: list[Node] = []
        while self.peek()[1] != "}":
            found.append(self.expression())
            self.take(":")
            found.append(self.expression())
            if self.peek()[1] != ",":
                break
            self.take()
        self.take("}")
        return found


def parse(text: str) -> Node:
    return _Parser(text).parse()


@dataclass(frozen=True, slots=True)
class Scope:
    """What the rule's variables are: depends on the kinds the rule matches and on autogen."""

    variables: dict[str, FieldType]
    autogen_object: bool  # `object` may be a workload (Deployment, Job, ...) whose template holds the pod


def scope_for(kinds: list[str], autogen: bool) -> Scope:
    variables: dict[str, FieldType] = {
        "podSpec": POD_SPEC,
        "podSpecs": ListOf(POD_SPEC),
        "containers": ListOf(CONTAINER),
        "namespaceObject": NAMESPACE,
    }
    pod_only = set(kinds) == {"Pod"}
    if pod_only and not autogen:
        variables["object"] = POD
        variables["oldObject"] = POD
    return Scope(variables, autogen_object=pod_only and autogen)


def field_problems(text: str, scope: Scope) -> list[FieldProblem]:
    """Every selection of a field the Pod model does not have; [] when the text cannot be parsed."""
    try:
        tree = parse(text)
    except CelSyntaxError:
        return []  # the CEL compiler reports syntax errors with the real message
    problems: list[FieldProblem] = []
    _walk(tree, dict(scope.variables), scope, problems, guarded=False)
    return problems


def _walk(
    node: Node, variables: dict[str, FieldType], scope: Scope, problems: list[FieldProblem], guarded: bool
) -> FieldType:
    if node.kind == "ident":
        return variables.get(node.name, ANY)
    if node.kind == "select":
        (operand,) = node.children
        if scope.autogen_object and not guarded and _is_object_spec(operand) and node.name in POD_ONLY_SPEC_FIELDS:
            problems.append(
                FieldProblem(
                    node.position,
                    f"`object.spec.{node.name}`: this Pod rule also applies to pod templates (autogen), where "
                    f"`object` is the workload (a Deployment has no spec.{node.name}); use `podSpec.{node.name}`",
                )
            )
            return ANY
        owner = _walk(operand, variables, scope, problems, guarded)
        if isinstance(owner, Struct):
            if node.name in owner.fields:
                return owner.fields[node.name]
            hint = difflib.get_close_matches(node.name, list(owner.fields), n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            problems.append(FieldProblem(node.position, f"{owner.name} has no field {node.name!r}{suffix}"))
            return ANY
        if isinstance(owner, MapOf):
            return owner.value
        return ANY
    if node.kind == "index":
        owner = _walk(node.children[0], variables, scope, problems, guarded)
        _walk(node.children[1], variables, scope, problems, guarded)
        if isinstance(owner, ListOf):
            return owner.item
        if isinstance(owner, MapOf):
            return owner.value
        return ANY
    if node.kind == "call":
        if node.has_target and node.name in _MACROS and len(node.children) >= 3 and node.children[1].kind == "ident":
            target, variable, *body = node.children
            owner = _walk(target, variables, scope, problems, guarded)
            element: FieldType = owner.item if isinstance(owner, ListOf) else ANY
            inner = {**variables, variable.name: element}
            for part in body:
                _walk(part, inner, scope, problems, guarded)
            return owner if node.name == "filter" else ANY
        for child in node.children:
            # has(x.f) asks whether f is set: a guard for workload-or-pod `object` checks
            _walk(child, variables, scope, problems, guarded or node.name == "has")
        return ANY
    for child in node.children:
        _walk(child, variables, scope, problems, guarded)
    return ANY


def _is_object_spec(node: Node) -> bool:
    return (
        node.kind == "select"
        and node.name == "spec"
        and node.children[0].kind == "ident"
        and node.children[0].name in ("object", "oldObject")
    )
