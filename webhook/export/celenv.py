"""The apiserver's CEL, as far as exported policies use it, on the engine's runtime (cel-expr-python).

Export compiles every generated expression here: an expression that does not compile (an
engine-only helper, a function the apiserver lacks) is refused with the compiler's message.
The equivalence tests evaluate the same programs. What is emulated, and how:

- variables: object, oldObject, request, namespaceObject, params (always null: params are
  inlined), variables (the policy's variables, computed in order, as a map);
- Kubernetes quantity library: `quantity(s)` is represented by its value as a double, so
  `quantity(s).asApproximateFloat()` is exact; `isQuantity(s)`. Only these two forms are
  generated (nativecel.py), and the Quantity parser is the engine's (engine/quantity.py);
- Kubernetes lists library: `sum()`, `max()` (an error on an empty list, as in Kubernetes),
  `indexOf()` (renamed for this runtime, see LIST_INDEX_OF); MutatingAdmissionPolicy's `jsonpatch.escapeKey()` and `JSONPatch{...}` values
  (rewritten here into maps with the same fields);
- strings: cel-expr-python's strings extension (a superset of the apiserver's strings v2).

Not emulated: HomogeneousAggregateLiterals (generated literals wrap items in dyn() instead),
cost tracking (cost.py gives a static bound), and `authorizer` (no exported rule reads it).
"""

from __future__ import annotations

import re
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings
from jsonpointer import escape

from webhook.engine.cel import plain_result
from webhook.engine.quantity import QuantityError, parse_quantity, quantity_of

VARIABLES = ("object", "oldObject", "request", "namespaceObject", "params", "variables")
# how patch.py writes JSONPatch values: the newline before each field cannot occur inside a CEL string
JSONPATCH_OPEN = "JSONPatch{op: "
JSONPATCH_PATH = ",\n path: "
JSONPATCH_VALUE = ",\n value: "
# cel-expr-python's strings extension owns `indexOf`; the lists library's indexOf, which only
# targets.py generates (on the loop variables gwJ and gwW), is renamed for this runtime
LIST_INDEX_OF = "gwListIndexOf"
_LIST_INDEX_OF_CALL = re.compile(r"\.indexOf\((gw[A-Z])\)")


class CompileError(ValueError):
    pass


def _quantity(text: str) -> float:
    try:
        return float(parse_quantity(text))
    except QuantityError as error:
        raise ValueError(f"quantities must match the regular expression: {error}") from None


def _max(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max called on empty list")
    return max(items)


def _index_of(items: list[Any], item: Any) -> int:
    for index, candidate in enumerate(items):
        if candidate == item:
            return index
    return -1


class NativeEnvironment:
    """Compiles and runs generated expressions as the apiserver would (see the module docstring)."""

    def __init__(self) -> None:
        t = cel.Type
        functions = [
            cel.FunctionDecl("quantity", [cel.Overload("k8s_quantity", t.DOUBLE, [t.STRING], impl=_quantity)]),
            cel.FunctionDecl(
                "isQuantity",
                [cel.Overload("k8s_is_quantity", t.BOOL, [t.STRING], impl=lambda s: quantity_of(s) is not None)],
            ),
            cel.FunctionDecl(
                "asApproximateFloat",
                [cel.Overload("k8s_quantity_approx", t.DOUBLE, [t.DOUBLE], is_member=True, impl=float)],
            ),
            cel.FunctionDecl(
                "sum", [cel.Overload("k8s_list_sum", t.INT, [t.List(t.DYN)], is_member=True, impl=lambda x: sum(x))]
            ),
            cel.FunctionDecl("max", [cel.Overload("k8s_list_max", t.DYN, [t.List(t.DYN)], is_member=True, impl=_max)]),
            cel.FunctionDecl(
                LIST_INDEX_OF,
                [
                    cel.Overload(
                        "k8s_list_index_of",
                        t.INT,
                        [t.List(t.DYN), t.Map(t.STRING, t.DYN)],
                        is_member=True,
                        impl=_index_of,
                    )
                ],
            ),
            cel.FunctionDecl(
                "jsonpatch.escapeKey", [cel.Overload("k8s_jsonpatch_escape", t.STRING, [t.STRING], impl=escape)]
            ),
        ]
        self._programs: dict[str, Any] = {}
        self._env = cel.NewEnv(
            variables={name: t.DYN for name in VARIABLES},
            extensions=[ext_strings.ExtStrings()],
            functions=functions,
        )

    def compile(self, text: str) -> Any:
        # one export compiles the same generated text several times: rules with the same kinds share
        # their target-list variables (object and oldObject forms, 11-17 kB each), ~1 in 6 compilations
        program = self._programs.get(text)
        if program is None:
            program = self._programs[text] = self._compile(text)
        return program

    def _compile(self, text: str) -> Any:
        source = (
            text.replace(JSONPATCH_OPEN, "{'op': ")
            .replace(JSONPATCH_PATH, ",\n 'path': ")
            .replace(JSONPATCH_VALUE, ",\n 'value': ")
        )
        source = _LIST_INDEX_OF_CALL.sub(rf".{LIST_INDEX_OF}(\1)", source)
        try:
            return self._env.compile(source)
        except RuntimeError as error:
            message = re.sub(r"^[A-Z_]+: (ERROR: )?", "", str(error).strip())
            raise CompileError(message.splitlines()[0]) from None

    def evaluate(self, program: Any, variables: dict[str, Any]) -> Any:
        """The value, or raise EvaluationFailed (what the apiserver treats under failurePolicy)."""
        result = program.eval(data={name: variables.get(name) for name in VARIABLES})
        if result.type() == cel.Type.ERROR:
            raise EvaluationFailed(str(result.value()))
        return plain_result(result)  # not plain_value(): see engine/cel.plain_result


class EvaluationFailed(RuntimeError):
    pass
