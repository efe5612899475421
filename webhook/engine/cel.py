"""CEL: one environment with the ValidatingAdmissionPolicy variables plus the GPU helpers.

Expressions are compiled once per rule-set load. At request time they run against an
`Activation`, which wraps the live Python dicts lazily: building one costs ~1.5 µs
whatever the object's size, whereas passing a map into a Python-implemented function
converts it deeply (over 1 ms for a 50-container pod). So helpers that need the
whole pod spec are computed in Python once per target and bound as variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

from .quantity import QuantityError, parse_quantity
from .resources import Accelerators

VARIABLES = (
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
    "podSpec",
    "podSpecs",
    "containers",
    "target",
)
# `gpuCount(podSpec)` is by far the most common helper call; it reads the value computed for the target.
_GPU_COUNT_OF_TARGET = re.compile(r"\bgpuCount\(\s*podSpec\s*\)")
_TARGET_GPUS = "targetGpuCount"
_POSITION = re.compile(r"<input>:(\d+):(\d+):")

# Static cost limits (the runtime has an iteration budget but no cost limit of its own).
MAX_EXPRESSION_LENGTH = 10_000
MAX_COMPREHENSION_DEPTH = 3  # the default pack needs 2; each level multiplies the work by a list's size
_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter", "transformList", "transformMap"})
_STRING_LITERAL = re.compile(
    r"""[rRbB]{0,2}(?:'{3}.*?'{3}|"{3}.*?"{3}|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""", re.DOTALL
)
_CALL = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_LITERAL = "\x00"  # stands for a string literal once literals are blanked out


class CelCompileError(ValueError):
    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line  # 1-based, inside the expression text
        self.column = column


class CelEvaluationError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    text: str
    program: Any
    references: frozenset[str]

    def evaluate(self, activation: Any) -> Any:
        result = self.program.eval(activation)
        if result.type() == cel.Type.ERROR:
            raise CelEvaluationError(_clean(str(result.value())))
        return result.plain_value()


class CelEnvironment:
    """Compiles expressions and builds activations; holds no per-request state."""

    def __init__(self, accelerators: Accelerators) -> None:
        self.accelerators = accelerators
        dyn = cel.Type.DYN
        variables = {name: dyn for name in VARIABLES}
        variables[_TARGET_GPUS] = cel.Type.INT
        self._env = cel.NewEnv(
            variables=variables,
            extensions=[ext_strings.ExtStrings()],
            functions=self._functions(),
        )

    def _functions(self) -> list[Any]:
        t = cel.Type
        spec_map = t.Map(t.STRING, t.DYN)
        return [
            cel.FunctionDecl(
                "quantity",
                [
                    cel.Overload("quantity_string", t.DOUBLE, [t.STRING], impl=_quantity),
                    cel.Overload("quantity_int", t.DOUBLE, [t.INT], impl=float),
                ],
            ),
            cel.FunctionDecl("isQuantity", [cel.Overload("is_quantity_string", t.BOOL, [t.STRING], impl=_is_quantity)]),
            cel.FunctionDecl(
                "isAccelerator",
                [cel.Overload("is_accelerator_string", t.BOOL, [t.STRING], impl=self._is_accelerator)],
            ),
            cel.FunctionDecl(
                "gpuCount", [cel.Overload("gpu_count_map", t.INT, [spec_map], impl=self.accelerators.pod_count)]
            ),
            cel.FunctionDecl(
                "containerGpuCount",
                [cel.Overload("container_gpu_count_map", t.INT, [spec_map], impl=self._container_count)],
            ),
        ]

    def _is_accelerator(self, name: str) -> bool:
        return name in self.accelerators

    def _container_count(self, container: Mapping[str, Any]) -> int:
        return self.accelerators.container_count(container)

    def compile(self, text: str) -> CompiledExpression:
        if not isinstance(text, str) or not text.strip():
            raise CelCompileError("expression is empty")
        check_cost(text)
        source = _GPU_COUNT_OF_TARGET.sub(_TARGET_GPUS, text)
        try:
            program = self._env.compile(source)
        except RuntimeError as error:
            message = str(error)
            found = _POSITION.search(message)
            line, column = (int(found.group(1)), int(found.group(2)) + 1) if found else (1, 1)
            raise CelCompileError(_clean(message), line, column) from None
        references = frozenset(name for name in (*VARIABLES, _TARGET_GPUS) if re.search(rf"\b{name}\b", source))
        return CompiledExpression(text=text, program=program, references=references)

    def activation(self, variables: Mapping[str, Any]) -> Any:
        return self._env.Activation(variables)


def check_cost(text: str) -> None:
    """Refuse expressions whose cost could grow without bound with the object's size.

    A static estimate on the text, since the runtime exposes no syntax tree: comprehension
    nesting depth, and replace() with a computed replacement (x.replace('a', x) squares the
    string's size on every call). Literals are blanked first so their contents do not count.
    """
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    blank = _STRING_LITERAL.sub(_LITERAL, text)
    calls = {match.end() - 1: match.group(1) for match in _CALL.finditer(blank)}
    stack: list[tuple[str | None, int]] = []  # (function called at this parenthesis, argument start)
    depth = deepest = 0
    for position, char in enumerate(blank):
        if char == "(":
            name = calls.get(position)
            stack.append((name, position + 1))
            if name in _COMPREHENSIONS:
                depth += 1
                deepest = max(deepest, depth)
        elif char == ")" and stack:
            name, start = stack.pop()
            if name in _COMPREHENSIONS:
                depth -= 1
            elif name == "replace" and not _literal_replacement(blank[start:position]):
                raise CelCompileError("replace() needs a string literal as its replacement (cost limit)")
    if deepest > MAX_COMPREHENSION_DEPTH:
        raise CelCompileError(
            f"comprehensions nested {deepest} deep (limit {MAX_COMPREHENSION_DEPTH}): the cost would grow "
            f"with the {deepest}th power of the object's list sizes"
        )


def _literal_replacement(arguments: str) -> bool:
    """replace(old, new[, n]): is `new` a literal? Splits at top-level commas."""
    parts, level, current = [], 0, ""
    for char in arguments:
        if char in "([{":
            level += 1
        elif char in ")]}":
            level -= 1
        if char == "," and level == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return len(parts) >= 2 and parts[1] == _LITERAL


def target_gpu_variable() -> str:
    return _TARGET_GPUS


def _quantity(text: str) -> float:
    try:
        return float(parse_quantity(text))
    except QuantityError as error:
        raise ValueError(str(error)) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _clean(message: str) -> str:
    """Drop the runtime's status-code noise; keep the text and the caret diagram."""
    message = re.sub(r"^[A-Z_]+: ", "", message.strip())
    message = re.sub(r"^ERROR: ", "", message)
    return re.sub(r"\s*\[[A-Z_]+\]$", "", message)
