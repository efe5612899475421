"""Engine CEL -> the apiserver's CEL: the GPU helpers and engine-only variables made plain.

A rule's expression reads variables the webhook computes in Python (`podSpec`, `containers`,
`target`, `targetGpuCount`, ...) and calls the GPU helpers. In a ValidatingAdmissionPolicy
only `object`, `oldObject`, `request`, `namespaceObject`, `params`, `authorizer` and the
policy's own `variables` exist, so:

- helper calls are rewritten into plain CEL with celhelpers' parser (the same one the
  engine uses), but towards expressions over the object instead of per-target values;
- engine variables become fields of the per-target loop variable `gwT` (see targets.py);
- `params` becomes `variables.params`, a constant literal.

The apiserver's CEL (k8s.io/apiserver/pkg/cel/environment/base.go) has the Kubernetes
quantity library (`quantity(s)` returns a Quantity, not a number: our `quantity(x)` becomes
`quantity(string(x)).asApproximateFloat()`), the lists library (`sum()`, `max()`,
`indexOf()`), strings v2 and sets, and HomogeneousAggregateLiterals: a list or map literal
must hold one type, so every generated literal wraps its items in `dyn()`. It has no
`cel.bind` (no ext.Bindings), so a rule that uses it is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from webhook.cel import celhelpers, celsyntax
from webhook.cel.quantity import QuantityError, parse_quantity
from webhook.engine import Accelerators

LOOP = "gwT"  # the per-target loop variable of every generated comprehension
# engine variable -> field of the loop variable (targets.py builds these fields)
TARGET_FIELDS = {
    "podSpec": "spec",
    "podMetadata": "metadata",
    "podSpecs": "specs",
    "containers": "containers",
    "target": "description",
    "targetGpuCount": "gpus",
    "targetWholeGpuCount": "wholeGpus",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMPREHENSION_VARIABLE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


class NotNative(ValueError):
    """The expression cannot run in the apiserver's CEL; the message says why."""


def _whole(v: str) -> str:
    """CEL: a quantity's whole positive value, else 0 (resources.whole_quantity)."""
    q = f"string({v})"
    return (
        f"(isQuantity({q}) && quantity({q}).asApproximateFloat() > 0.0 ? int(quantity({q}).asApproximateFloat()) : 0)"
    )


def _name_test(name: str, exact: frozenset[str], prefixes: tuple[str, ...]) -> str:
    """CEL: whether `name` is one of `exact` or starts with one of `prefixes`."""
    tests = [f"{name} in [{', '.join(map(string_literal, sorted(exact)))}]"] if exact else []
    tests.extend(f"{name}.startsWith({string_literal(p)})" for p in prefixes)
    return "(" + " || ".join(tests or ["false"]) + ")"


def native_literal(value: Any) -> str:
    """A CEL literal of a params value, every list item and map value wrapped in dyn()."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise NotNative(f"params value {value} does not fit a CEL int")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotNative(f"params value {value} has no CEL literal")
        return repr(value)
    if isinstance(value, str):
        return string_literal(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(f"dyn({native_literal(item)})" for item in value) + "]"
    if isinstance(value, Mapping):
        entries = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotNative(f"params key {key!r} is not a string")
            entries.append(f"{string_literal(key)}: dyn({native_literal(item)})")
        return "{" + ", ".join(entries) + "}"
    raise NotNative(f"params value of type {type(value).__name__} has no CEL literal")


def string_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return "'" + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", escaped) + "'"


class Translator:
    """Rewrites engine CEL into apiserver CEL for one accelerator configuration."""

    def __init__(self, accelerators: Accelerators) -> None:
        self.accelerators = accelerators
        self._replacements: dict[str, Callable[[list[str], str], str]] = {
            "gpuCount": self._gpu_count,
            "containerGpuCount": lambda args, original: self.container_gpus(_one(args, original)),
            "isAccelerator": lambda args, original: self.is_accelerator(_one(args, original)),
            "quantity": self._quantity,
            "isQuantity": self._is_quantity,
        }

    # -- the helpers as plain CEL over a pod spec / container / resource name ------------------
    def is_accelerator(self, name: str) -> str:
        return _name_test(name, self.accelerators.exact, self.accelerators.prefixes)

    def container_gpus(self, c: str, whole_only: bool = False, exact: bool = False) -> str:
        """Accelerators one container asks for: a request, else the limit; whole, positive (resources.py).

        The engine counts share resources (GPU memory, cores) as one device for a container that asks
        for no device resource. `exact` writes that (pod_gpus: counts are compared); else each share
        resource with a positive quantity counts one, in the same flat sum: the same sign, which is all
        a rule's containerGpuCount(c) > 0 reads, within the nesting the apiserver's parser allows
        (32 levels; a rule's expression sits deep inside the generated targets). `whole_only` leaves
        slices and shares out (Accelerators.container_count).
        """
        c = f"({c})"
        table = self.accelerators
        # one flat name test per kind of resource, for the same nesting limit
        names = table.exact - table.share_exact
        prefixes = tuple(p for p in table.prefixes if p not in table.share_prefixes)
        if whole_only:
            names = frozenset(n for n in names if n not in table.slice_exact and not n.startswith(table.slice_prefixes))
            prefixes = tuple(p for p in prefixes if p not in table.slice_prefixes)
        device = _name_test("gwR", names, prefixes)
        if whole_only or not exact or not (table.share_exact or table.share_prefixes):
            # shares counted by their quantity: the same sign as the engine's count, all that a rule's
            # containerGpuCount(c) > 0 reads (a rule's expression sits deep in the generated targets,
            # and the apiserver's parser allows 32 levels of nesting)
            return self._resource_sum(c, device if whole_only else self.is_accelerator("gwR"))
        share = _name_test("gwR", table.share_exact, table.share_prefixes)
        devices = self._resource_sum(c, device)
        return f"{devices} + ({self._any_resource(c, share)} && !{self._any_resource(c, device)} ? 1 : 0)"

    def device_count(self, c: str) -> str:
        """Devices of a container's device resources (share resources left out)."""
        table = self.accelerators
        names = table.exact - table.share_exact
        prefixes = tuple(p for p in table.prefixes if p not in table.share_prefixes)
        return self._resource_sum(f"({c})", _name_test("gwR", names, prefixes))

    def _any_resource(self, c: str, test: str) -> str:
        """Whether a container names a resource passing `test` (of gwR) in its limits: an extended
        resource requested must have a limit (the apiserver's validation, before admission policies)."""
        limits = f"{c}.resources.limits"
        return f"(has({c}.resources) && has({limits}) && {limits}.exists(gwR, {test}))"

    def _resource_sum(self, c: str, test: str) -> str:
        """The whole positive quantities of a container's resources that pass `test` (of gwR): each name's
        request, else its limit."""
        asked = f"{c}.resources.requests"
        limits = f"{c}.resources.limits"
        return (
            f"(has({c}.resources) ? ("
            f"(has({asked}) ? {asked}.filter(gwR, {test}).map(gwR, {_whole(f'{asked}[gwR]')}) "
            f": []) + "
            f"(has({limits}) ? {limits}.filter(gwR, {test} && "
            f"!(has({asked}) && gwR in {asked})).map(gwR, {_whole(f'{limits}[gwR]')}) : [])"
            f").sum() : 0)"
        )

    def pod_gpus(self, spec: str, whole_only: bool = False) -> str:
        """max(app + sidecar containers, largest regular init container + the sidecars before it), as the
        scheduler counts (resources.Accelerators.pod_count, without DRA claims: see policies.context_refusal)."""
        s = f"({spec})"
        sidecar = "(has(gwC.restartPolicy) && gwC.restartPolicy == 'Always')"
        count = self.container_gpus("gwC", whole_only, exact=True)
        running = (
            f"(has({s}.containers) ? {s}.containers.map(gwC, {count}).sum() : 0) + "
            f"(has({s}.initContainers) ? {s}.initContainers.filter(gwC, {sidecar}).map(gwC, {count}).sum() : 0)"
        )
        # a regular init container runs beside the sidecars started before it (names are unique:
        # indexOf gives each container's place)
        # (init containers count their devices only: one holding nothing but a GPU share adds no device
        # here, where the engine adds one; the share test would take the expression past the
        # apiserver's cost limit)
        sidecar_count = self.container_gpus("gwD", whole_only=True) if whole_only else self.device_count("gwD")
        init_count = self.container_gpus("gwC", whole_only=True) if whole_only else self.device_count("gwC")
        inits = f"{s}.initContainers"
        before = (
            f"{inits}.filter(gwD, has(gwD.restartPolicy) && gwD.restartPolicy == 'Always' && "
            f"{inits}.indexOf(gwD) < {inits}.indexOf(gwC)).map(gwD, {sidecar_count}).sum()"
        )
        largest_init = (
            f"(has({inits}) ? ([0] + {inits}.filter(gwC, !{sidecar}).map(gwC, {init_count} + {before})).max() : 0)"
        )
        return f"({s} == null ? 0 : [{running}, {largest_init}].max())"

    # -- rewriting an author's expression ------------------------------------------------------
    def translate(self, text: str) -> str:
        """The expression with helpers and engine variables made native; NotNative when impossible."""
        text = inline_bindings(text)
        shadowed = {m.group(1) for m in _COMPREHENSION_VARIABLE.finditer(celsyntax.blank(text))}
        clash = {n for n in shadowed if n in TARGET_FIELDS or n in ("params", "variables") or n.startswith("gw")}
        if clash:
            raise NotNative(
                f"a comprehension variable is named {', '.join(sorted(clash))}, a name the exported policy uses "
                "itself: rename it in the rule's CEL to export the rule"
            )
        try:
            rewritten = _rewrite(text, self._replacements)
        except celhelpers.RewriteError as error:
            raise NotNative(f"cannot parse the expression: {error}") from None
        return _substitute(rewritten)

    def _gpu_count(self, args: list[str], original: str) -> str:
        arg = _one(args, original)
        return "targetGpuCount" if arg.strip() == "podSpec" else self.pod_gpus(arg)

    def _quantity(self, args: list[str], original: str) -> str:
        arg = _one(args, original)
        literal = celhelpers.literal_quantity(arg)
        if literal is not None:
            try:
                return repr(float(parse_quantity(literal)))  # folded, as the engine does
            except QuantityError:
                pass  # the apiserver reports the bad literal when it runs, as the engine does
        return f"quantity(string({arg})).asApproximateFloat()"

    def _is_quantity(self, args: list[str], original: str) -> str:
        arg = _one(args, original)
        return f"isQuantity(string({arg}))"


_BIND = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(")


def inline_bindings(text: str) -> str:
    """cel.bind(x, value, body) -> body with x replaced by (value): the apiserver has no bindings extension.

    CEL is side-effect free, so evaluating `value` at each use gives the same result (at the cost
    of evaluating it more than once). A body that reuses the name for a comprehension variable is
    refused rather than renamed.
    """
    while True:
        found = _BIND.search(celsyntax.blank(text))
        if found is None:
            return text
        try:
            args, end = celhelpers.call_arguments(text, found.end() - 1)
        except celhelpers.RewriteError as error:
            raise NotNative(f"cannot parse cel.bind: {error}") from None
        if len(args) != 3 or not _IDENTIFIER.fullmatch(args[0].strip()):
            raise NotNative("cel.bind needs a name, a value and an expression")
        name, value, body = args[0].strip(), inline_bindings(args[1]), inline_bindings(args[2])
        if name in {m.group(1) for m in _COMPREHENSION_VARIABLE.finditer(celsyntax.blank(body))}:
            raise NotNative(
                f"cel.bind({name}, ...) is shadowed by a comprehension variable of the same name (the apiserver has "
                "no cel.bind, so export inlines it): rename one of them to export the rule"
            )
        text = text[: found.start()] + "(" + _replace_identifier(body, name, f"({value.strip()})") + ")" + text[end:]


def _replace_identifier(text: str, name: str, replacement: str) -> str:
    blank = celsyntax.blank(text)
    out: list[str] = []
    position = 0
    for match in _IDENTIFIER.finditer(blank):
        if match.group() != name or blank[: match.start()].rstrip().endswith("."):
            continue
        out += [text[position : match.start()], replacement]
        position = match.end()
    return "".join(out) + text[position:]


def _one(args: list[str], original: str) -> str:
    if len(args) != 1:
        raise NotNative(f"{original}: the helper takes one argument")
    return args[0]


def _rewrite(text: str, replacements: Mapping[str, Callable[[list[str], str], str]]) -> str:
    """celhelpers.rewrite's walk (the engine's parser), with this module's replacement table."""
    return celhelpers.rewrite(text, replacements)


def _substitute(text: str) -> str:
    """Engine variables -> loop-variable fields; params -> variables.params. Strings and fields untouched.

    Whether a name is a field (`x.target`) or the variable is the engine's own answer
    (celsyntax.selected): CEL's leading dot (`.containers`, `x in .params.list`) names the
    variable from the root scope, so it is substituted too, and its dot goes with it.
    """
    blank = celsyntax.blank(text)
    out: list[str] = []
    position = 0
    for match in _IDENTIFIER.finditer(blank):
        name, start = match.group(), match.start()
        if (start > 0 and blank[start - 1].isdigit()) or celsyntax.selected(blank, start):
            continue  # part of a number (1e5), or a field selection (x.target)
        if name in TARGET_FIELDS:
            replacement = f"{LOOP}.{TARGET_FIELDS[name]}"
        elif name == "params":
            replacement = "variables.params"
        else:
            continue
        dot = celsyntax.leading_dot(blank, start)
        start = start if dot is None else dot  # `gwT.containers`, not `.gwT.containers`
        out.append(text[position:start])
        out.append(replacement)
        position = match.end()
    out.append(text[position:])
    return "".join(out)


def references(text: str) -> set[str]:
    """Engine variables an expression reads (after translation: the loop fields it needs)."""
    blank = celsyntax.blank(text)
    found = set()
    for match in re.finditer(rf"\b{LOOP}\.([A-Za-z]+)", blank):
        found.add(match.group(1))
    return found
