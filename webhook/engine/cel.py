"""CEL: one environment with the ValidatingAdmissionPolicy variables plus the GPU helpers.

Expressions are compiled once per rule-set load. At request time they run against an
`Activation`, which wraps the live Python dicts lazily: building one costs ~1.5 µs
whatever the object's size, whereas passing a map into a Python-implemented function
converts it deeply (over 1 ms for a 50-container pod). So helpers that need the
whole pod spec are computed in Python once per target and bound as variables.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from .quantity import QuantityError, parse_quantity
from .resources import Accelerators, whole_quantity

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
# cel-expr-python 0.1.3 leaks the argument tuple (and the converted arguments) of every
# call from CEL into a Python function: ~50 bytes for an int, ~110 for a short string,
# the whole converted container for a map. So the helpers that run per container or per
# resource name are rewritten into plain CEL where the argument is a simple name:
# `isAccelerator(r)` becomes a membership test built from the configured list, and
# `containerGpuCount(c)` picks the accelerator entries in CEL (requests first, a limit
# alone counts as the request) and calls Python only for what is not one plain integer.
# Converting a whole container into Python also cost ~16 µs; this is faster as well.
_IS_ACCELERATOR = re.compile(r"\bisAccelerator\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)")
_CONTAINER_GPU_COUNT = re.compile(r"\bcontainerGpuCount\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
_QUANTITY_SUM = "acceleratorQuantitySum"
_CONTAINER_GPUS = (
    "cel.bind(acceleratorQuantities, "
    "(has({c}.resources) && has({c}.resources.requests) ? {c}.resources.requests"
    ".filter(acceleratorResource, isAccelerator(acceleratorResource))"
    ".map(acceleratorResource, string({c}.resources.requests[acceleratorResource])) : [])"
    " + (has({c}.resources) && has({c}.resources.limits) ? {c}.resources.limits"
    ".filter(acceleratorResource, isAccelerator(acceleratorResource) &&"
    " !(has({c}.resources.requests) && acceleratorResource in {c}.resources.requests))"
    ".map(acceleratorResource, string({c}.resources.limits[acceleratorResource])) : []), "
    "acceleratorQuantities.size() == 0 ? 0 : "
    "acceleratorQuantities.size() == 1 && acceleratorQuantities[0].size() < 10 && acceleratorQuantities[0].matches('^[0-9]+$') ? "
    "int(acceleratorQuantities[0]) : {sum}(acceleratorQuantities.join(',')))"
)
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
    # True when the rule's params are compiled in as a constant (CelEnvironment.rule_params):
    # the expression then runs on the activation shared by every rule of a request.
    params_bound: bool = False

    def evaluate(self, activation: Any) -> Any:
        result = self.program.eval(activation)
        if result.type() == cel.Type.ERROR:
            raise CelEvaluationError(_clean(str(result.value())))
        return result.plain_value()


class CelEnvironment:
    """Compiles expressions and builds activations; holds no per-request state."""

    def __init__(self, accelerators: Accelerators) -> None:
        self.accelerators = accelerators
        self._params_literal: str | None = None  # set only while a rule's expressions compile
        dyn = cel.Type.DYN
        variables = {name: dyn for name in VARIABLES}
        variables[_TARGET_GPUS] = cel.Type.INT
        self._env = cel.NewEnv(
            variables=variables,
            extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()],
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
                _QUANTITY_SUM, [cel.Overload("accelerator_quantity_sum_string", t.INT, [t.STRING], impl=_quantity_sum)]
            ),
        ]

    def _is_accelerator(self, name: str) -> bool:
        return name in self.accelerators

    def _container_count(self, container: Mapping[str, Any]) -> int:
        return self.accelerators.container_count(container)

    @contextlib.contextmanager
    def rule_params(self, params: Any) -> Iterator[None]:
        """Compile the expressions of one rule with its params bound as a constant.

        The runtime converts a variable from Python on first use in each activation, deeply:
        ~10 µs for a one-container pod, ~100 µs for ten. With `params` (the only per-rule
        variable) compiled in as `cel.bind(params, dyn(<literal>), ...)`, one activation per
        target serves every rule, so the object is converted once per request. `dyn()` keeps
        type checking exactly as for the declared `params: dyn` variable. Params that have
        no CEL literal (YAML timestamps, huge integers) keep the per-rule activation.
        """
        literal = cel_literal(params)
        self._params_literal = literal
        try:
            yield
        finally:
            self._params_literal = None

    def compile(self, text: str) -> CompiledExpression:
        if not isinstance(text, str) or not text.strip():
            raise CelCompileError("expression is empty")
        source = _GPU_COUNT_OF_TARGET.sub(_TARGET_GPUS, text)
        source = _CONTAINER_GPU_COUNT.sub(lambda m: _CONTAINER_GPUS.format(sum=_QUANTITY_SUM, c=m.group(1)), source)
        source = _IS_ACCELERATOR.sub(lambda m: self._accelerator_test(m.group(1)), source)
        references = frozenset(name for name in (*VARIABLES, _TARGET_GPUS) if re.search(rf"\b{name}\b", source))
        if self._params_literal is not None:
            # A newline before the closing parenthesis ends a trailing // comment. If this does
            # not compile, the plain form below reports the error at the author's own positions.
            with contextlib.suppress(RuntimeError):
                bound = self._env.compile(f"cel.bind(params, dyn({self._params_literal}), {source}\n)")
                return CompiledExpression(text=text, program=bound, references=references, params_bound=True)
        try:
            program = self._env.compile(source)
        except RuntimeError as error:
            message = str(error)
            found = _POSITION.search(message)
            line, column = (int(found.group(1)), int(found.group(2)) + 1) if found else (1, 1)
            raise CelCompileError(_clean(message), line, column) from None
        return CompiledExpression(text=text, program=program, references=references)

    def _accelerator_test(self, name: str) -> str:
        """`isAccelerator(name)` as plain CEL over the configured resource names and prefixes."""
        exact = ", ".join(_cel_string(n) for n in sorted(self.accelerators.exact))
        tests = [f"{name} in [{exact}]"] + [f"{name}.startsWith({_cel_string(p)})" for p in self.accelerators.prefixes]
        return "(" + " || ".join(tests) + ")"

    def activation(self, variables: Mapping[str, Any]) -> Any:
        return self._env.Activation(variables)


def target_gpu_variable() -> str:
    return _TARGET_GPUS


def _quantity(text: str) -> float:
    try:
        return float(parse_quantity(text))
    except QuantityError as error:
        raise ValueError(str(error)) from None


def _cel_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", escaped) + '"'


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT64 = range(-(2**63), 2**63)


def cel_literal(value: Any) -> str | None:
    """A CEL literal that evaluates to the same value as the runtime's conversion of `value`, or None."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value in _INT64 else None
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return _cel_string(value)
    if isinstance(value, list | tuple):
        items = [cel_literal(item) for item in value]
        return None if None in items else "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        entries = []
        for key, item in value.items():
            key_literal = cel_literal(key) if isinstance(key, str | int) else None
            item_literal = cel_literal(item)
            if key_literal is None or item_literal is None:
                return None
            entries.append(f"{key_literal}: {item_literal}")
        return "{" + ", ".join(entries) + "}"
    return None


def _quantity_sum(joined: str) -> int:
    """Whole accelerators in comma-separated quantities, as Accelerators.container_count counts them."""
    return sum(whole_quantity(text) for text in joined.split(",") if text)


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
