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

from .quantity import QuantityError, parse_quantity

HELPERS = ("gpuCount", "containerGpuCount", "isAccelerator", "quantity", "isQuantity")
QUANTITY_FALLBACK = "gwQuantityOf"
IS_QUANTITY_FALLBACK = "gwIsQuantityOf"
CONTAINER_GPU_FALLBACK = "gwContainerGpuCount"
_CALL = re.compile(r"(?<![\w.])(" + "|".join(HELPERS) + r")\s*\(")
_STRING_START = re.compile(r"""[rRbB]{0,2}('''|\"\"\"|'|")""")


class RewriteError(ValueError):
    pass


def rewrite(text: str, replacements: Mapping[str, Callable[[list[str], str], str]] | None = None) -> str:
    """The same expression with every helper call replaced by its plain-CEL form.

    `replacements` (helper name -> function of (arguments, original call text)) replaces the
    engine's table: webhook/export rewrites the same calls into the apiserver's CEL.
    """
    table = _REPLACEMENTS if replacements is None else replacements
    out: list[str] = []
    position = 0
    while True:
        found = _next_call(text, position)
        if found is None:
            out.append(text[position:])
            return "".join(out)
        start, name, open_paren = found
        args, end = _arguments(text, open_paren)
        out.append(text[position:start])
        out.append(table[name]([rewrite(arg, replacements) for arg in args], text[start:end]))
        position = end


def call_arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """The arguments of the call whose '(' is at open_paren, and the index after its ')'."""
    return _arguments(text, open_paren)


def string_literal_end(text: str, index: int) -> int | None:
    """The index after the CEL string literal that starts at index, or None when none starts there."""
    string = _STRING_START.match(text, index)
    if string is None or (index > 0 and (text[index - 1].isalnum() or text[index - 1] == "_")):
        return None
    return _skip_string(text, string.end(), string.group(1))


def literal_quantity(arg: str) -> str | None:
    """The text of a simple literal argument ('16Gi', "1", 4), or None when it is an expression."""
    return _literal_quantity(arg)


def _next_call(text: str, position: int) -> tuple[int, str, int] | None:
    """The next helper call outside string literals: (start, name, index of its '(')."""
    index = position
    while index < len(text):
        string = _STRING_START.match(text, index)
        if string and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")):
            index = _skip_string(text, string.end(), string.group(1))
            continue
        call = _CALL.match(text, index)
        if call:
            return index, call.group(1), call.end() - 1
        index += 1
    return None


def _skip_string(text: str, index: int, quote: str) -> int:
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text.startswith(quote, index):
            return index + len(quote)
        index += 1
    raise RewriteError("unterminated string literal")


def _arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """Top-level comma-separated arguments of the call whose '(' is at open_paren, and the index after ')'."""
    depth, index, start = 0, open_paren + 1, open_paren + 1
    args: list[str] = []
    while index < len(text):
        string = _STRING_START.match(text, index)
        if string:
            index = _skip_string(text, string.end(), string.group(1))
            continue
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                args.append(text[start:index])
                return [a for a in args if a.strip()] if len(args) == 1 else args, index + 1
            depth -= 1
        elif char == "," and depth == 0:
            args.append(text[start:index])
            start = index + 1
        index += 1
    raise RewriteError("unbalanced parentheses")


def _literal_quantity(arg: str) -> str | None:
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
    # -1: the name is not unique across the target's pod specs; the Python helper counts that one
    return (
        f"((has({c}.name) && {c}.name in containerGpus) ? "
        f"(containerGpus[{c}.name] >= 0 ? containerGpus[{c}.name] : {CONTAINER_GPU_FALLBACK}({args[0]})) : 0)"
    )


def _is_accelerator(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    r = f"({args[0]})"
    return f"({r} in accelerators.exact || accelerators.prefixes.exists(_gwP, {r}.startsWith(_gwP)))"


def _quantity(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    literal = _literal_quantity(args[0])
    if literal is not None:
        try:
            return repr(float(parse_quantity(literal)))
        except QuantityError:
            return original  # the runtime reports the bad literal when it runs, as before
    q = f"string({args[0]})"
    return f"({q} in quantities ? quantities[{q}] : {QUANTITY_FALLBACK}({q}))"


def _is_quantity(args: list[str], original: str) -> str:
    if len(args) != 1:
        return original
    literal = _literal_quantity(args[0])
    if literal is not None:
        try:
            parse_quantity(literal)
        except QuantityError:
            return "false"
        return "true"
    q = f"({args[0]})"
    return f"({q} in quantities || {IS_QUANTITY_FALLBACK}({q}))"


_REPLACEMENTS: dict[str, Callable[[list[str], str], str]] = {
    "gpuCount": _gpu_count,
    "containerGpuCount": _container_gpu_count,
    "isAccelerator": _is_accelerator,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
}
