"""CEL: one environment with the ValidatingAdmissionPolicy variables plus the GPU helpers.

Expressions are compiled once per process and text (a reload recompiles only what changed).
At request time they run against an `Activation`, which wraps the live Python dicts lazily: building one costs ~1.5 µs
whatever the object's size. Calls into Python-implemented functions with arguments
leak memory in the binding and convert maps deeply, so the helpers are rewritten into
plain CEL over per-target values (celhelpers.py). An expression whose helpers are rewritten
is compiled twice: the author's text for diagnostics and types, the rewritten text to run.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from webhook.cel import celhelpers, celsyntax, reads
from webhook.cel.quantity import QuantityError, parse_quantity, quantity_of
from webhook.cel.results import plain_result

from .resources import Accelerators

VARIABLES = (
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
    "podSpec",
    "podMetadata",  # the metadata of the target's pod (a Pod's, or its template's); null as podSpec is
    "podSpecs",
    "containers",
    "target",
    "priorityClasses",  # name -> {value, preemptionPolicy, globalDefault}; null when unknown
    "defaultPriorityClass",  # the globalDefault class's name, '' when none, null when unknown
    "deviceClaims",  # the target's DRA pod claims, resolved (resources.Accelerators.claim_summary)
    "kueueQueues",  # the namespace's LocalQueues -> {clusterQueue, flavors} (kueue.queue_table); null when unknown
)
# Values computed in Python for the target being evaluated, read by the rewritten helpers.
# targetWholeGpuCount: targetGpuCount without MIG slices, time-sliced replicas, vGPUs and shares;
# allocatorEnv: container name -> {writes, theirs, envFrom}, the device variables an annotation-marked
# GPU allocator writes into it (resources.Allocator, facts.TargetFacts.allocator_env)
TARGET_VARIABLES = (
    "targetGpuCount",
    "targetWholeGpuCount",
    "containerGpus",
    "allocatorEnv",
    "quantities",
    "accelerators",
)
# cel-cpp's RuntimeOptions.comprehension_max_iterations, fixed by cel-expr-python (not settable from
# Python): one evaluation of one expression may run 10,000 comprehension steps in all, nested and
# sequential comprehensions counted together (measured: xs.all() fails at 10,000 items; two in a
# row at 5,000 each; nested at 100 x 100). The runtime raises RuntimeError("INTERNAL: ...").
ITERATION_BUDGET = 10_000
ITERATION_BUDGET_ERROR = "Iteration budget exceeded"
ITERATION_BUDGET_MESSAGE = (
    f"CEL iteration limit reached: one expression may take at most {ITERATION_BUDGET:,} comprehension steps "
    "in all (nested and sequential all()/exists()/map()/filter() count together), and this object has more "
    "items than that for this expression; iterate a smaller list (e.g. one container's env, not every "
    "container's), split the check into several expressions, or exclude such objects with match.condition "
    "(docs/security.md, 'Evaluation limits')"
)
_POSITION = re.compile(r"<input>:(\d+):(\d+):")

# Static cost limits (the runtime has an iteration budget but no cost limit of its own).
MAX_EXPRESSION_LENGTH = 10_000
MAX_COMPREHENSION_DEPTH = 3  # the default pack needs 2; each level multiplies the work by a list's size
_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter", "transformList", "transformMap"})


class CelCompileError(ValueError):
    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line  # 1-based, inside the expression text
        self.column = column


class CelEvaluationError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    text: str  # as the author wrote it
    program: Any  # what runs: the helpers rewritten into plain CEL
    references: frozenset[str]  # variables the program reads
    result_type: str  # the checker's type of the result: BOOL, STRING, LIST<STRING>, DYN, ...
    # True when the rule's params are compiled in as a constant (CelEnvironment.compile(params=...)):
    # the expression then runs on the activation shared by every rule of a request.
    params_bound: bool = False
    # The fields of object, oldObject, namespaceObject, request, podSpec and podMetadata the program can read (read_paths)
    paths: Mapping[str, frozenset[tuple[str, ...]]] = field(default_factory=dict)
    # The text `program` was compiled from when params_bound (the params literal bound in): what a
    # fused program (programs.py: one evaluation for a phase's expressions) embeds
    bound_source: str | None = None

    def evaluate(self, activation: Any) -> Any:
        try:
            result = self.program.eval(activation)
        except RuntimeError as error:
            if ITERATION_BUDGET_ERROR in str(error):
                raise CelEvaluationError(ITERATION_BUDGET_MESSAGE) from None
            raise
        value = plain_result(result)
        # an error's plain value is its message: only a string result needs the (slower) type() check
        if type(value) is str and result.type() == cel.Type.ERROR:
            raise CelEvaluationError(_clean(value))
        return value


class CelEnvironment:
    """Compiles expressions and builds activations; holds no per-request state."""

    def __init__(self, accelerators: Accelerators) -> None:
        self.accelerators = accelerators
        self._paths: list[Mapping[str, frozenset[tuple[str, ...]]]] = []  # read by each compiled expression
        self._projection: dict[str, reads.Tree] | None = None
        # the projection of each candidate-rule tuple of the rule sets built on this environment, per
        # phase (evaluate.py), keyed by the tuple's id; the tuple is kept in the value so its id stays its own
        self.projections: dict[tuple[int, Any], tuple[Any, Any]] = {}
        runtime = _runtime(accelerators)
        self._env, self._compiled, self._programs = runtime.env, runtime.expressions, runtime.programs
        self._fused_handed: set[str] = set()  # texts of the fused programs this rule set uses
        # bound into every activation; the same object each time, so it costs nothing per request
        self.accelerator_table = {
            "exact": dict.fromkeys(accelerators.exact, True),
            "prefixes": list(accelerators.prefixes),
        }

    def type_check(self, text: str, typed: Mapping[str, Any]) -> CelCompileError | None:
        """The checker's error for `text` with some variables declared as the given cel.Type, or None.

        For lint (paramtypes.py): every other variable stays dyn, as at load, so an error here is one
        the declared types cause. Compiled in an environment of its own, kept per set of types.
        """
        key = (self.accelerators, tuple(sorted((name, str(kind)) for name, kind in typed.items())))
        env = _TYPED_ENVS.get(key)
        if env is None:
            if len(_TYPED_ENVS) >= MAX_RUNTIMES:
                _TYPED_ENVS.clear()
            variables: dict[str, Any] = {name: cel.Type.DYN for name in (*VARIABLES, *TARGET_VARIABLES)}
            variables["targetGpuCount"] = variables["targetWholeGpuCount"] = cel.Type.INT
            variables.update(typed)
            env = _TYPED_ENVS[key] = cel.NewEnv(
                variables=variables,
                extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()],
                functions=_functions(self.accelerators),
            )
        try:
            env.compile(text)
        except RuntimeError as error:
            message = str(error)
            where = _POSITION.search(message)
            line, column = (int(where.group(1)), int(where.group(2))) if where else (1, 1)
            return CelCompileError(_clean(message), line, column)
        return None

    def compile(self, text: str, *, params: Any = None, rewrite: bool = True) -> CompiledExpression:
        """Compile one expression; `params` (the rule's, when given) is bound in as a constant.

        `rewrite=False` keeps the author's text as it is, so the helpers (gpuCount, quantity...)
        run in Python instead of as their CEL rewrite: the reference the rewrite is tested against.

        The runtime converts a variable from Python on first use in each activation, deeply:
        ~10 µs for a one-container pod, ~100 µs for ten. With `params` (the only per-rule
        variable) compiled in as `cel.bind(params, dyn(<literal>), ...)`, one activation per
        target serves every rule, so the object is converted once per request. `dyn()` keeps
        type checking exactly as for the declared `params: dyn` variable. Params that have
        no CEL literal (YAML timestamps, huge integers), or params=None, keep the per-rule
        activation (`params_bound` False).
        """
        if not isinstance(text, str) or not text.strip():
            raise CelCompileError("expression is empty")
        # `.params` (CEL's leading dot) reads the root variable, past the binding: such a text keeps
        # the per-rule variable, as params without a literal do
        params_literal = None if params is None or _reads_root(text, "params") else cel_literal(params)
        # params without a CEL literal run on the rule's own activation: its program is its own
        key = (text, params_literal, rewrite) if params is None or params_literal is not None else None
        compiled = self._compiled.get(key) if key is not None else None
        if compiled is None:
            compiled = self._compile(text, params_literal, rewrite)
            if key is not None:
                if len(self._compiled) >= MAX_COMPILED:
                    self._compiled.clear()
                self._compiled[key] = compiled
        self._paths.append(compiled.paths)
        self._projection = None
        return compiled

    def _compile(self, text: str, params_literal: str | None, rewrite: bool) -> CompiledExpression:
        if len(text) > MAX_EXPRESSION_LENGTH:
            raise CelCompileError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
        found: list[celsyntax.Token] | None = None
        unreadable: celsyntax.CelSyntaxError | None = None
        try:
            found = celsyntax.tokens(text)  # once, for the cost check and the rewrite
            check_cost(text, found)
        except celsyntax.CelSyntaxError as error:
            unreadable = error  # invalid CEL, reported by the compiler below; else refused after it
        source = _rewritten(text, found) if rewrite and unreadable is None else text
        bound_tried = False
        if unreadable is None and params_literal is not None and source == text:
            # Nothing to rewrite: the bound form alone is checked (one compile, not two). It has the
            # text's type, and it compiles exactly when the text does (params is dyn either way);
            # when it does not, the author's text below says why, with its own positions.
            bound = self._bound(params_literal, text)
            if bound is not None:
                program, bound_source = bound
                return _compiled(text, program, _references(text), str(program.return_type()), text, bound_source)
            bound_tried = True
        try:
            checked = self._env.compile(text)  # the author's text: exact positions and result types
        except RuntimeError as error:
            message = str(error)
            where = _POSITION.search(message)
            line, column = (int(where.group(1)), int(where.group(2))) if where else (1, 1)  # 1-based already
            raise CelCompileError(_clean(message), line, column) from None
        if unreadable is not None:  # fail closed: a cost limit nobody checked is no limit
            raise CelCompileError(f"the cost check cannot read this expression ({unreadable})")
        references = _references(source)
        result_type = str(checked.return_type())
        if params_literal is not None and not bound_tried:
            # Should the bound form not compile, the plain one below still runs (on a per-rule activation).
            bound = self._bound(params_literal, source)
            if bound is not None:
                return _compiled(text, bound[0], references, result_type, source, bound[1])
        try:
            program = self._env.compile(source) if source != text else checked
        except RuntimeError:
            program, source, references = checked, text, _references(text)
        return _compiled(text, program, references, result_type, source)

    def _bound(self, params_literal: str, source: str) -> tuple[Any, str] | None:
        """`source` with the rule's params bound in as a constant, compiled, and its text; None if it does not compile.

        A newline before the closing parenthesis ends a trailing // comment.
        """
        bound_source = f"cel.bind(params, dyn({params_literal}), {source}\n)"
        try:
            return self._env.compile(bound_source), bound_source
        except RuntimeError:
            return None

    def projection_trees(self) -> dict[str, reads.Tree]:
        """Root variable -> the projection tree every expression compiled here needs (projection.py).

        Any expression compiled in this environment counts, so the trees only ever grow: a rule
        set's activations are never handed less than one of its expressions reads.
        """
        if self._projection is None:
            self._projection = reads.merge(self._paths)
        return self._projection

    def activation(self, variables: Mapping[str, Any]) -> Any:
        return self._env.Activation(variables)

    def compile_program(self, text: str) -> Any:
        """A runnable program of text the engine wrote itself (a fused program), or None if it does
        not compile or this rule set has its share of them (its expressions then run alone).

        Kept by text like the expressions: a fused program takes ~13 ms to compile, on the first
        request that needs it, so a reload must not make requests pay that again for rules it kept.
        Bounded, because each costs ~1-2 MiB and tenants choose which rules pass the plain checks
        (labels, namespaces, GPUs): a stream of odd objects must neither compile nor keep more.
        """
        handed = self._fused_handed
        if text not in handed:
            if len(handed) >= MAX_FUSED_PER_RULE_SET:
                return None
            handed.add(text)
        programs = self._programs
        if text not in programs:
            try:
                program = self._env.compile(text)
            except RuntimeError:
                program = None
            if len(programs) >= MAX_FUSED_KEPT:
                programs.clear()
            programs[text] = program
        return programs[text]

    @property
    def fused_programs(self) -> int:
        """How many fused programs this rule set's requests have been handed."""
        return len(self._fused_handed)


# Compiled expressions are kept per accelerator configuration, for the life of the process: a
# reload, a `gpu-webhook test` suite or a test that loads the same rules again compiles only what
# changed (each compile runs the C++ checker twice, ~1.5 ms). Bounded: started over when full.
MAX_COMPILED = 2_000
MAX_RUNTIMES = 8
# Fused programs (programs.py) cost ~1-2 MiB each (measured: 1.8 MiB for 44 expressions): at most
# this many per rule set (a GPU pod, a CPU pod, each workload kind needs one or two), and kept
# across reloads up to the second number
MAX_FUSED_PER_RULE_SET = 16
MAX_FUSED_KEPT = 32
_Key = tuple[str, str | None, bool]  # text, params literal, rewrite


@dataclass(slots=True)
class _Runtime:
    """A runtime environment (its helpers close over one accelerator configuration) and what was compiled in it."""

    env: Any
    expressions: dict[_Key, CompiledExpression] = field(default_factory=dict)
    programs: dict[str, Any] = field(default_factory=dict)  # fused programs by text; None: does not compile


_RUNTIMES: dict[Accelerators, _Runtime] = {}
_TYPED_ENVS: dict[tuple[Accelerators, tuple[tuple[str, str], ...]], Any] = {}  # CelEnvironment.type_check


def _runtime(accelerators: Accelerators) -> _Runtime:
    found = _RUNTIMES.get(accelerators)
    if found is None:
        if len(_RUNTIMES) >= MAX_RUNTIMES:
            _RUNTIMES.clear()
        dyn = cel.Type.DYN
        variables = {name: dyn for name in (*VARIABLES, *TARGET_VARIABLES)}
        variables["targetGpuCount"] = variables["targetWholeGpuCount"] = cel.Type.INT
        env = cel.NewEnv(
            variables=variables,
            extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()],
            functions=_functions(accelerators),
        )
        found = _RUNTIMES[accelerators] = _Runtime(env)
    return found


def _references(source: str) -> frozenset[str]:
    """The variables a program may read (what an activation must hold for it).

    Every mention of a variable's name counts but a field of another value: in
    `object.spec.containers` the pod's containers are a field of `object`, and reading them
    needs no `containers` variable (whose pod-spec facts would then be computed for nothing).
    String literals and comments mention nothing.
    """
    blank = celsyntax.blank(source)
    return frozenset(
        name
        for name in (*VARIABLES, *TARGET_VARIABLES)
        if any(not celsyntax.selected(blank, found.start()) for found in re.finditer(rf"\b{name}\b", blank))
    )


@functools.lru_cache(maxsize=4096)  # asked before the program cache: a reload's texts are answered at once
def _reads_root(source: str, name: str) -> bool:
    """Whether the text names the variable with CEL's leading dot (`.params`)."""
    if name not in source:
        return False
    blank = celsyntax.blank(source)
    return any(celsyntax.leading_dot(blank, found.start()) is not None for found in re.finditer(rf"\b{name}\b", blank))


def _rewritten(text: str, found: list[celsyntax.Token] | None) -> str:
    """The text with the GPU helpers rewritten into plain CEL (celhelpers.py), or the text itself."""
    try:
        return celhelpers.rewrite(text, found=found)
    except celhelpers.RewriteError:
        return text  # correct, only slower: the helpers run in Python


def _compiled(
    text: str, program: Any, references: frozenset[str], result_type: str, source: str, bound_source: str | None = None
) -> CompiledExpression:
    paths = reads.read_paths(source)  # of the text that runs
    return CompiledExpression(text, program, references, result_type, bound_source is not None, paths, bound_source)


def _functions(accelerators: Accelerators) -> list[Any]:
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
            [cel.Overload("is_accelerator_string", t.BOOL, [t.STRING], impl=accelerators.__contains__)],
        ),
        cel.FunctionDecl("gpuCount", [cel.Overload("gpu_count_map", t.INT, [spec_map], impl=accelerators.pod_count)]),
        cel.FunctionDecl(
            "containerGpuCount",
            [cel.Overload("container_gpu_count_map", t.INT, [spec_map], impl=accelerators.container_count)],
        ),
        # fallbacks of the rewritten quantity helpers, for strings not found in the pod's resources
        cel.FunctionDecl(
            celhelpers.QUANTITY_FALLBACK, [cel.Overload("gw_quantity_of", t.DOUBLE, [t.STRING], impl=_quantity)]
        ),
        cel.FunctionDecl(
            celhelpers.CONTAINER_GPU_FALLBACK,
            [cel.Overload("gw_container_gpu_count_map", t.INT, [spec_map], impl=accelerators.container_count)],
        ),
        cel.FunctionDecl(
            celhelpers.IS_QUANTITY_FALLBACK,
            [cel.Overload("gw_is_quantity_of", t.BOOL, [t.STRING], impl=_is_quantity)],
        ),
    ]


def check_cost(text: str, found: list[celsyntax.Token] | None = None) -> None:
    """Refuse expressions whose cost could grow without bound with the object's size.

    A static estimate on the tokens (celsyntax; literals and comments do not count):
    comprehension nesting depth, and replace() with a computed replacement
    (x.replace('a', x) squares the string's size on every call). `found`: the text's tokens,
    when the caller has them. celsyntax.CelSyntaxError when the tokenizer cannot follow the
    text: CelEnvironment.compile lets the compiler report invalid CEL, and refuses valid CEL
    whose cost it could not check.
    """
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    if found is None:
        found = celsyntax.tokens(text)
    stack: list[tuple[str | None, int]] = []  # (method called at this parenthesis, index of the parenthesis)
    depth = deepest = 0
    for index, token in enumerate(found):
        if token.kind != "op":
            continue
        if token.text == "(":
            method = found[index - 1].text if index >= 2 and found[index - 2].text == "." else None
            stack.append((method, index))
            if method in _COMPREHENSIONS:
                depth += 1
                deepest = max(deepest, depth)
        elif token.text == ")" and stack:
            method, opening = stack.pop()
            if method in _COMPREHENSIONS:
                depth -= 1
            elif method == "replace" and not _literal_replacement(found, opening):
                raise CelCompileError("replace() needs a string literal as its replacement (cost limit)")
    if deepest > MAX_COMPREHENSION_DEPTH:
        raise CelCompileError(
            f"comprehensions nested {deepest} deep (limit {MAX_COMPREHENSION_DEPTH}): the cost would grow "
            f"with the {deepest}th power of the object's list sizes"
        )


def _literal_replacement(found: list[celsyntax.Token], opening: int) -> bool:
    """replace(old, new[, n]): is `new` a string literal?"""
    try:
        ranges, _ = celsyntax.split_arguments(found, opening)
    except celsyntax.CelSyntaxError:
        return False
    if len(ranges) < 2:
        return False
    first, last = ranges[1]
    return last - first == 1 and found[first].kind == "string"


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


def _is_quantity(text: str) -> bool:
    return quantity_of(text) is not None


def _clean(message: str) -> str:
    """Drop the runtime's status-code noise; keep the text and its caret diagram."""
    message = re.sub(r"^[A-Z_]+: ", "", message.strip())
    message = re.sub(r"^ERROR: ", "", message)
    message = re.sub(r"\s*\[[A-Z_]+\]$", "", message)
    first, _, diagram = message.partition("\n")
    first = _POSITION.sub("", first).strip()
    return f"{first}\n{diagram}" if diagram else first
