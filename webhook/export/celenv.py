"""The apiserver's CEL, as far as exported policies use it, on the engine's runtime (cel-expr-python).

Export compiles every generated expression here: an expression that does not compile (an
engine-only helper, a function the apiserver lacks) is refused with the compiler's message.
The equivalence tests evaluate the same programs. What is emulated, and how:

- variables: object, oldObject, request, namespaceObject, params (always null: params are
  inlined), variables (the policy's variables, computed in order, as a map);
- Kubernetes quantity library: `quantity(s)` is represented by its value as a double, so
  `quantity(s).asApproximateFloat()` is exact; `isQuantity(s)`. Only these two forms are
  generated (nativecel.py), and the Quantity parser is webhook/cel/quantity.py;
- Kubernetes lists library: `sum()`, `max()` (an error on an empty list, as in Kubernetes),
  `indexOf()` (renamed for this runtime, see LIST_INDEX_OF); MutatingAdmissionPolicy's `jsonpatch.escapeKey()` and `JSONPatch{...}` values
  (rewritten here into maps with the same fields);
- strings: cel-expr-python's strings extension (a superset of the apiserver's strings v2).

Types: `check_type` compiles an expression a second time in a type-checking environment where a
`JSONPatch{...}` value is a call returning the opaque type JSONPatch (the runtime cannot evaluate
that type, hence two environments), and compares the result type with the one the apiserver
requires at create time: a MutatingAdmissionPolicy's JSONPatch expression must be
list(JSONPatch) (v1.36.2 refuses list(dyn), e.g. a list whose items come from a conditional with a
dyn() branch, and dyn itself), a validation bool, a messageExpression string. The checker is
cel-cpp's, not cel-go's; tests/export/test_celenv.py holds the expressions whose verdicts were
taken on the real apiserver, and the e2e test creates every generated policy there.

The JSONPatch library (JSONPatch values, `jsonpatch.escapeKey`) exists only in a
MutatingAdmissionPolicy's mutations (v1.36.2: a ValidatingAdmissionPolicy, or a variable of either
kind, that names it is refused, "undeclared reference to 'jsonpatch'"): `compile(text, mutating)`
and `check_type(..., mutating=)` use an environment with it or without it.

Not emulated: HomogeneousAggregateLiterals (generated literals wrap items in dyn() instead),
cost tracking (cost.py gives a static bound), and `authorizer` (no exported rule reads it).
"""

from __future__ import annotations

import re
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings
from jsonpointer import escape

from webhook.cel import celsyntax
from webhook.cel.quantity import QuantityError, parse_quantity, quantity_of
from webhook.cel.results import plain_result

VARIABLES = ("object", "oldObject", "request", "namespaceObject", "params", "variables")
# how patch.py writes JSONPatch values: the newline before each field cannot occur inside a CEL string
JSONPATCH_OPEN = "JSONPatch{op: "
JSONPATCH_PATH = ",\n path: "
JSONPATCH_VALUE = ",\n value: "
# cel-expr-python's strings extension owns `indexOf`; the lists library's indexOf, which only
# targets.py generates (on the loop variables gwJ and gwW), is renamed for this runtime
LIST_INDEX_OF = "gwListIndexOf"
_LIST_INDEX_OF_CALL = re.compile(r"\.indexOf\((gw[A-Z])\)")


# the result types the apiserver requires at create time, in its notation (cel-go's type names)
LIST_OF_JSONPATCH = "list(JSONPatch)"
BOOL = "bool"
STRING = "string"
# JSONPatch{...} in the type-checking environment: a call per field set (op, path, from, value)
_JSONPATCH_CALL = "gwJSONPatch"
_JSONPATCH_FIELDS = ("op", "path", "from", "value")


class CompileError(ValueError):
    pass


def type_name(cpp: str) -> str:
    """cel-cpp's name of a type (LIST<DYN>, MAP<STRING, INT>) as cel-go writes it (list(dyn), map(string, int))."""
    out = re.sub(r"\b([A-Z][A-Z0-9_]*)\b", lambda m: m.group(1).lower(), cpp)
    return out.replace("<", "(").replace(">", ")")


def jsonpatch_calls(text: str) -> str:
    """Each `JSONPatch{op: .., path: .., value: ..}` literal as a call `gwJSONPatch_op_path_value(.., ..)`.

    The last literal of the text is rewritten first, so no rewritten literal holds another one.
    CompileError for a field outside JSONPatch's (op, path, from, value)."""
    while True:
        try:
            found = celsyntax.tokens(text)
        except celsyntax.CelSyntaxError as error:
            raise CompileError(str(error)) from None
        starts = [
            i
            for i in range(len(found) - 1)
            if found[i].kind == "ident" and found[i].text == "JSONPatch" and found[i + 1].text == "{"
        ]
        if not starts:
            return text
        index = starts[-1]
        try:
            arguments, close = celsyntax.argument_texts(text, found, index + 1)
        except celsyntax.CelSyntaxError as error:
            raise CompileError(str(error)) from None
        names, values = [], []
        for argument in arguments:
            name, colon, value = argument.partition(":")
            if not colon or name.strip() not in _JSONPATCH_FIELDS:
                raise CompileError(f"JSONPatch has no field {name.strip()!r}")
            names.append(name.strip())
            values.append(value)
        if sorted(names, key=_JSONPATCH_FIELDS.index) != names:
            raise CompileError(f"JSONPatch fields out of order: {', '.join(names)}")
        call = f"{_JSONPATCH_CALL}_{'_'.join(names)}({','.join(values)})"
        text = text[: found[index].start] + call + text[found[close].end :]


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
        ]
        # the JSONPatch library (JSONPatch values, jsonpatch.escapeKey) is a MutatingAdmissionPolicy's
        # alone: a ValidatingAdmissionPolicy that names it is refused ("undeclared reference")
        escape_key = cel.FunctionDecl(
            "jsonpatch.escapeKey", [cel.Overload("k8s_jsonpatch_escape", t.STRING, [t.STRING], impl=escape)]
        )
        self._programs: dict[tuple[str, bool], Any] = {}
        self._types: dict[tuple[str, bool], str] = {}
        variables = {name: t.DYN for name in VARIABLES}
        self._envs = {
            mutating: cel.NewEnv(
                variables=variables,
                extensions=[ext_strings.ExtStrings()],
                functions=[*functions, escape_key] if mutating else functions,
            )
            for mutating in (True, False)
        }
        # for check_type only: JSONPatch values as calls returning an opaque type (never evaluated)
        jsonpatch = t.AbstractType("JSONPatch")
        calls = []
        for names in (("op", "path"), ("op", "path", "value"), ("op", "path", "from"), ("op", "from", "path")):
            parameters = [t.DYN if name == "value" else t.STRING for name in names]
            overload = cel.Overload(f"gw_jsonpatch_{'_'.join(names)}", jsonpatch, parameters)
            calls.append(cel.FunctionDecl(f"{_JSONPATCH_CALL}_{'_'.join(names)}", [overload]))
        self._checkers = {
            mutating: cel.NewEnv(
                variables=variables,
                extensions=[ext_strings.ExtStrings()],
                functions=[*functions, escape_key, *calls] if mutating else functions,
            )
            for mutating in (True, False)
        }

    def compile(self, text: str, mutating: bool = True) -> Any:
        """The program of an expression of a MutatingAdmissionPolicy (`mutating`) or a ValidatingAdmissionPolicy."""
        # one export compiles the same generated text several times: rules with the same kinds share
        # their target-list variables (object and oldObject forms, 11-17 kB each), ~1 in 6 compilations
        program = self._programs.get((text, mutating))
        if program is None:
            program = self._programs[text, mutating] = self._compile(text, mutating)
        return program

    def _compile(self, text: str, mutating: bool) -> Any:
        source = text
        if mutating:
            source = (
                text.replace(JSONPATCH_OPEN, "{'op': ")
                .replace(JSONPATCH_PATH, ",\n 'path': ")
                .replace(JSONPATCH_VALUE, ",\n 'value': ")
            )
        source = _LIST_INDEX_OF_CALL.sub(rf".{LIST_INDEX_OF}(\1)", source)
        return _compiled(self._envs[mutating], source)

    def result_type(self, text: str, mutating: bool = True) -> str:
        """The type the checker gives the expression, in cel-go's notation (list(JSONPatch), dyn, bool)."""
        found = self._types.get((text, mutating))
        if found is None:
            source = jsonpatch_calls(text) if mutating else text
            source = _LIST_INDEX_OF_CALL.sub(rf".{LIST_INDEX_OF}(\1)", source)
            found = self._types[text, mutating] = type_name(
                str(_compiled(self._checkers[mutating], source).return_type())
            )
        return found

    def check_type(self, text: str, *expected: str, mutating: bool = True) -> None:
        """CompileError unless the expression's type is one of `expected`, as the apiserver refuses a
        policy at create time ("must evaluate to list(JSONPatch) but got list(dyn)")."""
        found = self.result_type(text, mutating)
        if found not in expected:
            raise CompileError(f"must evaluate to {' or '.join(expected)} but got {found}")

    def evaluate(self, program: Any, variables: dict[str, Any]) -> Any:
        """The value, or raise EvaluationFailed (what the apiserver treats under failurePolicy)."""
        result = program.eval(data={name: variables.get(name) for name in VARIABLES})
        if result.type() == cel.Type.ERROR:
            raise EvaluationFailed(str(result.value()))
        return plain_result(result)  # not plain_value(): see webhook/cel/results.py


def _compiled(env: Any, source: str) -> Any:
    try:
        return env.compile(source)
    except RuntimeError as error:
        message = re.sub(r"^[A-Z_]+: (ERROR: )?", "", str(error).strip())
        raise CompileError(message.splitlines()[0]) from None


class EvaluationFailed(RuntimeError):
    pass
