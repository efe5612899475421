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
# `containerGpuCount(c)` over a loop variable: hand Python only `c.resources` (a few entries)
# instead of the whole container (env, probes, mounts), whose conversion cost ~16 µs each.
_CONTAINER_GPU_COUNT = re.compile(r"\bcontainerGpuCount\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
_RESOURCES_GPU_COUNT = "resourcesGpuCount"
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
            cel.FunctionDecl(
                _RESOURCES_GPU_COUNT,
                [cel.Overload("resources_gpu_count_map", t.INT, [spec_map], impl=self.accelerators.resources_count)],
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
        source = _CONTAINER_GPU_COUNT.sub(rf"(has(\1.resources) ? {_RESOURCES_GPU_COUNT}(\1.resources) : 0)", source)
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
