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

    @property
    def result_type(self) -> str:
        """The checker's type of the result: BOOL, STRING, LIST<STRING>, DYN, ..."""
        return str(self.program.return_type())

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
        source = _GPU_COUNT_OF_TARGET.sub(_TARGET_GPUS, text)
        try:
            program = self._env.compile(source)
        except RuntimeError as error:
            message = str(error)
            found = _POSITION.search(message)
            # the runtime's columns are 1-based already; map them back through the gpuCount rewrite
            line, column = (int(found.group(1)), int(found.group(2))) if found else (1, 1)
            offset = _original_offset(text, _offset(source, line, column))
            line, column = _line_column(text, offset)
            raise CelCompileError(_clean(message, text, line, column), line, column) from None
        references = frozenset(name for name in (*VARIABLES, _TARGET_GPUS) if re.search(rf"\b{name}\b", source))
        return CompiledExpression(text=text, program=program, references=references)

    def activation(self, variables: Mapping[str, Any]) -> Any:
        return self._env.Activation(variables)


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


def _clean(message: str, text: str | None = None, line: int = 1, column: int = 1) -> str:
    """Drop the runtime's status-code noise; keep the text and a caret diagram of the author's text.

    The runtime's own diagram shows the rewritten source (gpuCount(podSpec) replaced), so it is
    redrawn from the original text.
    """
    message = re.sub(r"^[A-Z_]+: ", "", message.strip())
    message = re.sub(r"^ERROR: ", "", message)
    message = re.sub(r"\s*\[[A-Z_]+\]$", "", message)
    if text is None:
        return message
    first = _POSITION.sub("", message.split("\n", 1)[0]).strip()
    source_lines = text.split("\n")
    shown = source_lines[line - 1] if 0 < line <= len(source_lines) else ""
    return f"{first}\n | {shown}\n | {'.' * (column - 1)}^"


def _offset(text: str, line: int, column: int) -> int:
    """0-based offset of a 1-based (line, column) in text."""
    lines = text.split("\n")
    return sum(len(lines[i]) + 1 for i in range(min(line - 1, len(lines)))) + column - 1


def _line_column(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _original_offset(text: str, offset: int) -> int:
    """An offset in the rewritten source -> the same place in the author's text."""
    shift = 0
    for found in _GPU_COUNT_OF_TARGET.finditer(text):
        rewritten_start = found.start() - shift
        if rewritten_start >= offset:
            break
        if offset < rewritten_start + len(_TARGET_GPUS):
            return found.start()
        shift += len(found.group(0)) - len(_TARGET_GPUS)
    return offset + shift
