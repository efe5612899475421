"""Plain YAML scalars and keys as kubectl reads them: one set of rules for every door.

kubectl reads YAML with sigs.k8s.io/yaml, which decodes it with go-yaml v2 into interface{} and
then writes JSON; so a plain (unquoted) scalar gets go-yaml v2's meaning (gopkg.in/yaml.v2 v2.4.0
resolve.go, `resolveMapList` and `resolve()`), not YAML 1.2's and not PyYAML's YAML 1.1 regexes:
y/n are booleans, `1e3` is a float, `0o17` an int, `08` a float, `1:20` a string, and timestamps
stay strings (decode.go: "for backward compatibility reasons we set it as a string"). JSON keys
are strings, so `true:` and `1:` become "true" and "1".

The manifest readers (manifests.py, rapid.py: `audit`, `explain`) and the located loader
(located.py: rule files and the objects of GPUPolicyTest suites) all resolve scalars here, so
`gpu-webhook test`, `explain` and `audit` read one manifest to the same object.
tests/audit/test_yaml_compat.py holds the corpus of what kubectl makes of each case.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

KUBE_PLAIN = "!gpu-webhook/kube-plain"  # the reference loader's tag for every plain scalar but `<<`

# go-yaml v2's words (resolveMapList), then its number rules
_GO_WORDS: dict[str, Any] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# strconv.ParseInt(s, 0, 64) after go-yaml removed every "_": sign, then 0x / 0o / 0b / 0 (octal) / decimal
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")  # yamlStyleFloat
_INT64 = range(-(1 << 63), 1 << 64)  # ParseInt, then ParseUint


def go_plain(text: str) -> Any:
    """The value go-yaml v2 gives a plain scalar decoded into interface{} (what kubectl then sends as JSON).

    Timestamps stay strings: go-yaml v2 decode.go sets "timestamp-like values" into interface{}
    as the string "for backward compatibility".
    """
    if text in _GO_WORDS:
        return _GO_WORDS[text]
    first = text[0]
    if first == ".":
        return float(text) if _GO_FLOAT.fullmatch(text) else text
    if not (first.isdigit() and first.isascii()) and first not in "+-":
        return text
    plain = text.replace("_", "")
    number = _GO_INT.fullmatch(plain)
    if number:
        sign, digits = number.groups()
        if digits[:2] in ("0o", "0O"):
            value = int(digits[2:], 8)
        elif len(digits) > 1 and digits[0] == "0" and digits[1] in "01234567":
            value = int(digits, 8)  # a leading 0 is octal, as in Go
        else:
            value = int(digits, 0)
        value = -value if sign == "-" else value
        if value in _INT64:
            return value
    if _GO_FLOAT.fullmatch(plain):
        return float(plain)
    return text


def json_key(key: Any) -> Any:
    """sigs.k8s.io/yaml turns YAML into JSON, whose keys are strings: `true:` and `1:` become "true" and "1"."""
    if key is True or key is False:
        return "true" if key else "false"
    if type(key) is int:
        return str(key)
    return key


class KubeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (libyaml's where compiled in) with plain scalars resolved by go_plain.

    Merge keys (`<<`) stay YAML's, as go-yaml v2 also merges them. The reference manifest
    loader (manifests.Loader) and the located loader (located.load_documents) both build on it.
    """

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return KUBE_PLAIN
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]


KubeLoader.add_constructor(KUBE_PLAIN, lambda loader, node: go_plain(node.value))
