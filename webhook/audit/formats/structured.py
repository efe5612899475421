"""JSON and YAML reports: `{objects: [...], summary: {...}}`, written object by object.

The surrounding document is written by hand so that no list of objects is ever held:
each object is serialised on arrival and forgotten.
"""

from __future__ import annotations

from typing import Any, TextIO

import orjson

from webhook.engine import RuleOutcome

from ..context import plain_yaml
from ..results import ObjectResult, Tally


def object_entry(result: ObjectResult) -> dict[str, Any]:
    ref = result.ref
    entry: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace or None,
        "name": ref.name,
        "origin": result.origin,
        "gpus": result.gpus,
        "result": result.worst.value,
        "rules": [_rule(o) for o in result.outcomes],
    }
    if result.patch:
        entry["patch"] = result.patch
        diff = result.diff()
        if diff:  # not with --no-diff
            entry["diff"] = diff
    return entry


def _rule(outcome: RuleOutcome) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "rule": outcome.rule,
        "result": outcome.result.value,
        "messages": list(outcome.messages) or ([outcome.reason] if outcome.reason else []),
        "patched": outcome.patched,
    }
    if outcome.blocks:
        entry["blocks"] = True  # the apiserver would refuse the object because of this rule
    return entry


class JsonReport:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.first = True

    def add(self, result: ObjectResult) -> None:
        self.out.write('{"objects":[\n' if self.first else ",\n")
        self.first = False
        # OPT_PASSTHROUGH_DATETIME is not set: YAML timestamps come out as RFC 3339 strings
        self.out.write(orjson.dumps(object_entry(result), default=str).decode())

    def finish(self, tally: Tally) -> None:
        self.out.write('{"objects":[' if self.first else "\n")
        self.out.write('],\n"summary":' + orjson.dumps(tally.as_dict()).decode() + "}\n")


class YamlReport:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.first = True

    def add(self, result: ObjectResult) -> None:
        if self.first:
            self.out.write("objects:\n")
            self.first = False
        # a one-item top-level sequence is valid as the value of `objects:` at column 0
        self.out.write(plain_yaml([object_entry(result)], width=120))

    def finish(self, tally: Tally) -> None:
        if self.first:
            self.out.write("objects: []\n")
        self.out.write(plain_yaml({"summary": tally.as_dict()}, width=120))
