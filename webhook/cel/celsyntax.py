"""CEL's lexical grammar and a small parser: the one place that knows where a string literal, a
comment, a bracket or a top-level comma is.

Used by the static cost check (cel.check_cost), the helper rewrite (celhelpers, and through it
webhook/export) and lint (authoring/celfields for field references, authoring/lint for slow forms).

Literals follow the runtime's lexer (cel-expr-python 0.1.3, checked by tests/engine/test_celsyntax.py):
a backslash escapes the next character in every literal, raw (r'') and bytes (b'') ones included
(the raw prefix changes the value, not where the literal ends: r'\\' does not compile), and
triple-quoted literals span lines. `//` starts a comment to the end of the line, outside literals.
A field name may be quoted in backticks (object.metadata.`app.kubernetes.io/name`).

Why text and not the checked tree the runtime returns (`Expression.serialize()`, a
google.protobuf.Any holding a cel.expr.CheckedExpr), measured on the default pack (rules/: 44
expressions, 20,013 characters), best of 30 in one run, 2026-11-23, shared 2-core machine:
  load_rules(rules/)                                        237 ms (min of 5)
    of which compiling the authors' texts in the runtime     23 ms
  text, a scanner each for cost check and helper rewrite    9.7 ms;  lint's parser  8.7 ms
  text, one tokenize shared by cost check and rewrite (this) 7.9 ms; lint's parser 11.1 ms
  tree: serialize() + decoding it in pure Python            23.7 ms (136 KB; no protobuf library
                                                            is a dependency: a minimal wire
                                                            decoder written for the measurement)
The tree would add ~10% to a load to replace the cheapest scan (the cost check, 2-6 ms), needs
a protobuf decoder or a new dependency, and cannot serve the rewrite at all: it carries start
offsets only (no end, so no argument text to splice back) and the macro-expanded form (all()
becomes a comprehension). So the engine keeps text, scanned by this one tokenizer.
The comparison is a decision taken; the script that measured it is in the git history.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

_STRING_BODY = (
    r"""(?:'''(?:\\[\s\S]|[^\\])*?'''|\"\"\"(?:\\[\s\S]|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")"""
)
_TOKEN = re.compile(
    rf"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{{0,2}}{_STRING_BODY})
  | (?P<number>0x[0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*|`[^`\n]*`)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{{}}])
    """,
    re.VERBOSE,
)
_STRING = re.compile(rf"[rRbB]{{0,2}}{_STRING_BODY}")
_STRING_OPEN = re.compile(r"""[rRbB]{0,2}('''|\"\"\"|'|")""")
_OPENING = {"(": ")", "[": "]", "{": "}"}


class CelSyntaxError(ValueError):
    """The text is not CEL as far as this module can follow it; the CEL compiler gives the real error."""


class Token(NamedTuple):  # a tuple: a few thousand are made per rule-set load
    kind: str  # string | number | ident | op | end
    text: str
    start: int  # offset in the expression text
    end: int


def tokens(text: str) -> list[Token]:
    """The tokens of `text` (spaces and comments dropped), closed by an `end` token."""
    found: list[Token] = []
    position = 0
    for match in _TOKEN.finditer(text):
        if match.start() != position:
            break  # a gap: nothing matched at `position`
        position = match.end()
        kind = match.lastgroup
        if kind != "space":
            found.append(Token(kind or "", match.group(), match.start(), position))
    if position != len(text):
        what = "unterminated string literal" if _STRING_OPEN.match(text, position) else "unexpected character"
        raise CelSyntaxError(f"{what} at {position}")
    found.append(Token("end", "", len(text), len(text)))
    return found


def string_end(text: str, index: int) -> int | None:
    """The index after the string literal that starts at `index`, or None when none starts there."""
    if index > 0 and (text[index - 1].isalnum() or text[index - 1] == "_"):
        return None  # inside an identifier (`attr`), not a literal's r/b prefix
    match = _STRING.match(text, index)
    if match is None and _STRING_OPEN.match(text, index):
        raise CelSyntaxError(f"unterminated string literal at {index}")
    return match.end() if match else None


def blank(text: str, fill: str = " ") -> str:
    """`text` with the contents of string literals replaced by `fill` and comments by spaces.

    Same length and line breaks, so offsets stay right; prefixes and quotes are kept, so a literal
    still reads as one. What cannot be tokenized (an unterminated literal) is blanked to the end.
    """
    out: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            if _STRING_OPEN.match(text, position):
                out.append(re.sub(r"[^\n]", fill, text[position:]))
                break
            out.append(text[position])
            position += 1
            continue
        piece = match.group()
        if match.lastgroup == "string":
            opening = _STRING_OPEN.match(piece)
            assert opening is not None
            quote = len(opening.group(1))
            inner = piece[opening.end() : len(piece) - quote]
            piece = piece[: opening.end()] + re.sub(r"[^\n]", fill, inner) + piece[len(piece) - quote :]
        elif match.lastgroup == "space" and piece.startswith("//"):
            piece = " " * len(piece)
        out.append(piece)
        position = match.end()
    return "".join(out)


# a name selected from the value before it: after an identifier, a closing bracket or a literal's quote
_SELECTION = re.compile(r"(?:([A-Za-z_][A-Za-z0-9_]*)|[)\]}'\"])\s*\.\s*\??\s*$")


def selected(blank_text: str, start: int) -> bool:
    """Whether the name at `start` of a blanked text is a field of the value before it (`x.name`,
    `f(x).name`, `x.?name`), not a variable.

    A dot after an operator, a parenthesis or the `in` operator is CEL's leading dot (`.name`:
    the variable itself, resolved from the root scope), not a selection.
    """
    found = _SELECTION.search(blank_text, 0, start)
    return found is not None and found.group(1) != "in"


def leading_dot(blank_text: str, start: int) -> int | None:
    """Where CEL's leading dot before the variable name at `start` is (`.params`: the variable from
    the root scope, past any cel.bind or comprehension variable of that name), or None."""
    if selected(blank_text, start):
        return None
    index = start - 1
    while index >= 0 and blank_text[index].isspace():
        index -= 1
    return index if index >= 0 and blank_text[index] == "." else None


def split_arguments(found: list[Token], open_index: int) -> tuple[list[tuple[int, int]], int]:
    """The top-level comma-separated arguments of the bracket at found[open_index].

    Returns each argument's token range [first, last) and the index of the closing token;
    an empty argument list gives []. CelSyntaxError when the bracket is not closed.
    """
    closing = _OPENING[found[open_index].text]
    stack: list[str] = []
    ranges: list[tuple[int, int]] = []
    start = open_index + 1
    for index in range(open_index + 1, len(found)):
        token = found[index]
        if token.kind != "op":
            continue
        if token.text in _OPENING:
            stack.append(_OPENING[token.text])
        elif token.text in (")", "]", "}"):
            if stack:
                if stack.pop() != token.text:
                    raise CelSyntaxError(f"unbalanced {token.text!r} at {token.start}")
                continue
            if token.text != closing:
                raise CelSyntaxError(f"unbalanced {token.text!r} at {token.start}")
            ranges.append((start, index))
            return ([] if ranges == [(open_index + 1, open_index + 1)] else ranges), index
        elif token.text == "," and not stack:
            ranges.append((start, index))
            start = index + 1
    raise CelSyntaxError("unbalanced parentheses")


def argument_texts(text: str, found: list[Token], open_index: int) -> tuple[list[str], int]:
    """The argument texts of the bracket at found[open_index] (tokens of `text`), and its closing token's index.

    Each argument is the text between its separators, spaces and comments included, so a caller
    that splices arguments back keeps the author's text.
    """
    ranges, close = split_arguments(found, open_index)
    separators = [found[open_index], *(found[last] for _, last in ranges)]
    return [text[a.end : b.start] for a, b in itertools.pairwise(separators)], close


def call_arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """The argument texts of the call whose '(' is at offset `open_paren`, and the offset after its ')'."""
    found = tokens(text)
    index = next((i for i, t in enumerate(found) if t.start == open_paren and t.text == "("), None)
    if index is None:
        raise CelSyntaxError(f"no '(' at {open_paren}")
    args, close = argument_texts(text, found, index)
    return args, found[close].end


# -- a parser, for lint's field checks (authoring/celfields.py) --------------------------------------------

_RELATIONS = frozenset({"<", "<=", ">", ">=", "==", "!=", "in"})


@dataclass(slots=True)
class Node:
    kind: str  # ident | select | call | index | other
    position: int = 0  # offset of the identifier or field name
    name: str = ""  # identifier, field or function name
    children: list[Node] = field(default_factory=list)  # select/index: [operand, ...]; call: [target?, args...]
    has_target: bool = False  # a receiver-style call: x.f(...)


class _Parser:
    """Recursive descent over CEL's grammar; precedence as in the CEL spec."""

    _LEVELS: tuple[frozenset[str], ...] = (
        frozenset({"||"}),
        frozenset({"&&"}),
        _RELATIONS,
        frozenset({"+", "-"}),
        frozenset({"*", "/", "%"}),
    )

    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        self.at = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self, value: str | None = None) -> Token:
        token = self.tokens[self.at]
        if value is not None and token.text != value:
            raise CelSyntaxError(f"expected {value!r} at {token.start}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self.expression()
        if self.peek().kind != "end":
            raise CelSyntaxError("trailing input")
        return node

    def expression(self) -> Node:
        node = self.binary(0)
        if self.peek().text == "?":
            self.take()
            yes = self.expression()
            self.take(":")
            no = self.expression()
            return Node("other", children=[node, yes, no])
        return node

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek().text in self._LEVELS[level] and self.peek().kind in ("op", "ident"):
            self.take()
            node = Node("other", children=[node, self.binary(level + 1)])
        return node

    def unary(self) -> Node:
        if self.peek().text in ("!", "-"):
            self.take()
            return Node("other", children=[self.unary()])
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            value = self.peek().text
            if value == ".":
                self.take()
                name = self.take()
                if name.kind != "ident":
                    raise CelSyntaxError(f"expected a field name at {name.start}")
                if self.peek().text == "(":
                    node = Node("call", name.start, name.text, [node, *self.arguments("(", ")")], has_target=True)
                else:  # a backtick-quoted field name selects the name inside the quotes
                    node = Node("select", name.start, name.text.strip("`"), [node])
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
        token = self.peek()
        if token.text == ".":
            self.take()
            token = self.peek()
        if token.kind == "ident":
            self.take()
            if self.peek().text == "(":
                return Node("call", token.start, token.text, self.arguments("(", ")"))
            return Node("ident", token.start, token.text)
        if token.text == "(":
            self.take()
            node = self.expression()
            self.take(")")
            return node
        if token.text == "[":  # a list literal: its length is in the text (iterated.py)
            return Node("other", token.start, "[", self.arguments("[", "]"))
        if token.text == "{":  # a map literal
            return Node("other", token.start, "{", self.entries())
        if token.kind in ("string", "number"):
            self.take()
            return Node("other")
        raise CelSyntaxError(f"unexpected {token.text!r} at {token.start}")

    def arguments(self, opening: str, closing: str) -> list[Node]:
        self.take(opening)
        found: list[Node] = []
        while self.peek().text != closing:
            found.append(self.expression())
            if self.peek().text != ",":
                break
            self.take()
        self.take(closing)
        return found

    def entries(self) -> list[Node]:
        self.take("{")
        found: list[Node] = []
        while self.peek().text != "}":
            found.append(self.expression())
            self.take(":")
            found.append(self.expression())
            if self.peek().text != ",":
                break
            self.take()
        self.take("}")
        return found


def parse(text: str) -> Node:
    """Just enough of a syntax tree to follow selections (celfields); CelSyntaxError when lost."""
    return _Parser(text).parse()
