"""Text or tree for the engine's static CEL checks: the figures behind engine/celsyntax.py's decision.

Times, on the default pack's expressions, the one tokenizer (cost check + helper rewrite sharing
its tokens, and lint's parser) against reading the checked syntax tree the runtime returns
(`Expression.serialize()`: a google.protobuf.Any holding a cel.expr.CheckedExpr) with a minimal
pure-Python protobuf decoder (no protobuf library is a dependency). `python -m bench.cel_syntax`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from webhook.engine import celhelpers, celsyntax, load_rules
from webhook.engine.cel import CelEnvironment, check_cost
from webhook.engine.evaluate import rule_expressions
from webhook.engine.resources import DEFAULT

RULES = Path(__file__).resolve().parents[1] / "rules"


def _varint(data: bytes, index: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, index = _varint(data, index)
        elif wire == 2:
            size, index = _varint(data, index)
            value, index = data[index : index + size], index + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, index = data[index : index + width], index + width
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def _expr(data: bytes) -> dict[str, Any]:
    """cel.expr.Expr -> a dict tree: what a tree-based cost check or field walk would read."""
    node: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 2:
            node["id"] = value
        elif number == 4:
            node["ident"] = dict(_fields(value)).get(1, b"").decode()
        elif number == 5:
            node["select"] = {n: (_expr(v) if n == 1 else v) for n, v in _fields(value)}
        elif number == 6:
            node["call"] = [(n, _expr(v) if n in (1, 3) else v) for n, v in _fields(value)]
        elif number == 7:
            node["list"] = [_expr(v) for n, v in _fields(value) if n == 1]
        elif number == 9:
            node["comprehension"] = {n: (v if n in (1, 3, 8) else _expr(v)) for n, v in _fields(value)}
    return node


def decode_checked(serialized: bytes) -> dict[str, Any]:
    """The expression tree and its positions (id -> offset) of a serialized CheckedExpr."""
    checked = dict(_fields(serialized))[2]  # google.protobuf.Any.value
    out: dict[str, Any] = {"positions": {}}
    for number, value in _fields(checked):
        if number == 4:
            out["expr"] = _expr(value)
        elif number == 5:
            for field, entry in _fields(value):
                if field == 4:
                    pair = dict(_fields(entry))
                    out["positions"][pair.get(1, 0)] = pair.get(2, 0)
    return out


def best_ms(function: Callable[[], object], repeat: int = 30) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    ruleset = load_rules(RULES).require()
    texts = [e.text for rule in ruleset.rules for e in rule_expressions(rule)]
    env = CelEnvironment(DEFAULT)
    checked = [env._env.compile(text) for text in texts]

    def scan() -> None:
        for text in texts:
            found = celsyntax.tokens(text)
            check_cost(text, found)
            celhelpers.rewrite(text, found=found)

    rows = {
        "load_rules(rules/) (min of 5)": best_ms(lambda: load_rules(RULES), 5),
        "runtime compile of the authors' texts": best_ms(lambda: [env._env.compile(t) for t in texts], 10),
        "text: tokenize + cost check + rewrite": best_ms(scan),
        "text: lint's parser (celsyntax.parse)": best_ms(lambda: [celsyntax.parse(t) for t in texts]),
        "tree: serialize() + decode": best_ms(lambda: [decode_checked(c.serialize()) for c in checked]),
    }
    print(f"{len(texts)} expressions, {sum(map(len, texts)):,} characters")
    for name, ms in rows.items():
        print(f"{name:40s} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
