"""Rewrites calls of the GPU helpers into plain CEL over values computed once per target.

Why: the CEL binding leaks memory on every call into a Python-implemented function that
takes arguments (measured: 49 B for an int, ~110 B for a string, ~1.9 KB for a map, per
call; zero-argument calls do not leak), and converting a map argument costs up to a
millisecond. A long-running server cannot afford either. So, at compile time:

    gpuCount(podSpec)        -> targetGpuCount
    containerGpuCount(c)     -> (has((c).name) && (c).name in containerGpus ? containerGpus[(c).name] : 0)
                                (a name repeated across templates with different counts: -1, then the Python helper)
    isAccelerator(r)         -> ((r) in accelerators.exact || accelerators.prefixes.exists(...))
    quantity('16Gi')         -> 17179869184.0                (folded)
    quantity(x)              -> (string(x) in quantities ? quantities[string(x)] : fallback)
    isQuantity('1x')         -> false                        (folded)

The argument is repeated rather than bound with cel.bind: the C++ runtime mis-resolves
a cel.bind variable that follows a nested comprehension ("Applying SELECT to
non-message type"), and arguments are nearly always a plain variable (`c`, `r`).

`containerGpus` (container name -> accelerators) and `quantities` (every quantity string
in the target's container resources -> its value) are computed in Python for the target
being evaluated. Only forms that cannot be rewritten (gpuCount of some other spec, a
quantity string that appears nowhere in the pod's resources) still call into Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from . import celsyntax
from .quantity import QuantityError, parse_quantity

HELPERS = ("gpuCount", "containerGpuCount", "isAccelerator", "quantity", "isQuantity")
QUANTITY_FALLBACK = "gwQuantityOf"
IS_QUANTITY_FALLBACK = "gwIsQuantityOf"
CONTAINER_GPU_FALLBACK = "gwContainerGpuCount"


class RewriteError(ValueError):
    pass


def rewrite(
    text: str,
    replacements: Mapping[str, Callable[[list[str], str], str]] | None = None,
    *,
    found: list[celsyntax.Token] | None = None,
) -> str:
    """The same expression with every helper call replaced by its plain-CEL form.

    `replacements` (helper name -> function of (arguments, original call text)) replaces the
    engine's table: webhook/export rewrites the same calls into the apiserver's CEL. Calls are
    found by the one CEL tokenizer (celsyntax), so nothing inside a literal or a comment counts;
    `found` is the text's tokens when the caller has them.
    """
    table = _REPLACEMENTS if replacements is None else replacements
    try:
        found = celsyntax.tokens(text) if found is None else found
    except celsyntax.CelSyntaxError as error:
        raise RewriteError(str(error)) from None
    out: list[str] = []
    position = 0
    index = 0
    blank: str | None = None  # made only for a helper name after a dot
    while index < len(found):
        token = found[index]
        if not _is_helper_name(found, index):
            index += 1
            continue
        start = token.start
        if index > 0 and found[index - 1].text == ".":
            # `.quantity(x)` is CEL's leading dot (the global function, rewritten like `quantity(x)`,
            # the dot with it); `x.quantity(y)` is a method of x, not the helper
            blank = celsyntax.blank(text) if blank is None else blank
            dot = celsyntax.leading_dot(blank, token.start)
            if dot is None:
                index += 1
                continue
            start = dot
        try:
            args, close = celsyntax.argument_texts(text, found, index + 1)
        except celsyntax.CelSyntaxError as error:
            raise RewriteError(str(error)) from None
        end = found[close].end
        out.append(text[position:start])
        out.append(table[token.text]([rewrite(arg, replacements) for arg in args], text[token.start : end]))
        position = end
        index = close + 1
    out.append(text[position:])
    return "".join(out)


def _is_helper_name(found: list[celsyntax.Token], index: int) -> bool:
    """A helper's name called as a function: `quantity(x)` (or `x.quantity(y)`, which the caller tells
    apart), not an identifier `quantity`."""
    token = found[index]
    return token.kind == "ident" and token.text in HELPERS and found[index + 1].text == "("


def call_arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """The arguments of the call whose '(' is at open_paren, and the index after its ')' (celsyntax)."""
    try:
        return celsyntax.call_arguments(text, open_paren)
    except celsyntax.CelSyntaxError as error:
        raise RewriteError(str(error)) from None


def string_literal_end(text: str, index: int) -> int | None:
    """The index after the CEL string literal that starts at index, or None when none starts there."""
    try:
        return celsyntax.string_end(text, index)
    except celsyntax.CelSyntaxError as error:
        raise RewriteError(str(error)) from None


def literal_quantity(arg: str) -> str | None:
    """The text of a simple literal argument ('16Gi', "1", 4), or None when it is an expression."""
    arg = arg.strip()
    if re.fullmatch(r"-?\d+", arg):
        return arg
    match = re.fullmatch(r"""'([^'\\\n]*)'|"([^"\\\n]*)\"""", arg)
    if match:
        return match.group(1) if match.group(1) is not None else match.group(2)
    return None


def _gpu_count(args: list[str], original: str) -> str:
    if len(args) == 1 and args[0].strip() == "podSpec":
        return "targetGpuCount"
    return f"gpuCount({', '.join(args)})"  # another spec: the Python helper (rare)


def _container_gpu_count(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    c = f"({args[0]})"
    # -1: the name is not unique across the target's pod specs; the Python helper counts that one,
    # handed only the resources it reads: the binding keeps every argument of such a call, and a
    # whole container (env, command, mounts: the tenant's bulk) made each request keep kilobytes
    fallback = f"(has({c}.resources) ? {CONTAINER_GPU_FALLBACK}({{'resources': {c}.resources}}) : 0)"
    return (
        f"((has({c}.name) && {c}.name in containerGpus) ? "
        f"(containerGpus[{c}.name] >= 0 ? containerGpus[{c}.name] : {fallback}) : 0)"
    )


def _is_accelerator(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    r = f"({args[0]})"
    return f"({r} in accelerators.exact || accelerators.prefixes.exists(_gwP, {r}.startsWith(_gwP)))"


def _literal_value(arg: str) -> float | QuantityError | None:
    """A literal argument's quantity, or why it is none; None when the argument is an expression."""
    literal = literal_quantity(arg)
    if literal is None:
        return None
    try:
        return float(parse_quantity(literal))
    except QuantityError as error:
        return error


def _quantity(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    value = _literal_value(args[0])
    if isinstance(value, QuantityError):
        return original  # the runtime reports the bad literal when it runs, as before
    if value is not None:
        return repr(value)
    q = f"string({args[0]})"
    return f"({q} in quantities ? quantities[{q}] : {QUANTITY_FALLBACK}({q}))"


def _is_quantity(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    value = _literal_value(args[0])
    if value is not None:
        return "false" if isinstance(value, QuantityError) else "true"
    q = f"({args[0]})"
    return f"({q} in quantities || {IS_QUANTITY_FALLBACK}({q}))"


_REPLACEMENTS: dict[str, Callable[[list[str], str], str]] = {
    "gpuCount": _gpu_count,
    "containerGpuCount": _container_gpu_count,
    "isAccelerator": _is_accelerator,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
}
