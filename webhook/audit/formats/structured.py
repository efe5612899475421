"""JSON and YAML reports: `{objects: [...], summary: {...}}`, written object by object.

The surrounding document is written by hand so that no list of objects is ever held:
each object is serialised on arrival and forgotten.
"""

from __future__ import annotations

from typing import Any, TextIO

import orjson
import yaml

from ..results import ObjectResult, Tally

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def object_entry(result: ObjectResult) -> dict[str, Any]:
    ref = result.ref
    entry: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace or None,
        "name": ref.name,
        "origin": result.origin,
        "gpus": result.gpus,
        "result": result.worst,
        "rules": [
            {"rule": o.rule, "result": o.result, "messages": o.messages, "patched": o.patched} for o in result.outcomes
        ],
    }
    if result.patch:
        entry["patch"] = result.patch
        entry["diff"] = result.diff()
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
        self.out.write(yaml.dump([object_entry(result)], Dumper=_Dumper, sort_keys=False))

    def finish(self, tally: Tally) -> None:
        if self.first:
            self.out.write("objects: []\n")
        self.out.write(yaml.dump({"summary": tally.as_dict()}, Dumper=_Dumper, sort_keys=False))
