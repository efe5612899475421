"""JSON and YAML reports: `{objects: [...], inputProblems: [...], summary: {...}}`, written object by object.

An object's entry lists the rules that judged it under `rules` and, folded, the names of the
rules not evaluated for want of namespace context under `notEvaluated` (their count, reason and
fix are in the summary's `notEvaluated`, once per rule). An input that could not be read is an
entry of `inputProblems`: its origin (file, file:line:column) and the reason.

The surrounding document is written by hand so that no list of objects is ever held:
each object is serialised on arrival and forgotten. `object_entry` is what an object's entry
holds; the JSON report writes the bytes `orjson.dumps(object_entry(result))` would give without
building the dictionaries: a rule's entry without messages repeats across objects (`pass`), so
its bytes are made once; and the report goes out in blocks of about 64 KiB.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, TextIO

import orjson

from webhook.engine import Result, RuleOutcome
from webhook.kubeyaml import plain_yaml

from ..results import ObjectResult, Tally
from ..sources import InputProblem
from . import ReportOptions


def problem_entry(problem: InputProblem) -> dict[str, str]:
    return {"origin": problem.origin, "reason": problem.reason}


def object_entry(result: ObjectResult) -> dict[str, Any]:
    entry = _head(result)
    entry["rules"] = [_rule(o) for o in result.outcomes if o.result is not Result.SKIP]
    folded = result.not_evaluated
    if folded:
        entry["notEvaluated"] = list(folded)
    if result.patch:
        entry["patch"] = result.patch
        diff = result.diff()
        if diff:  # not with --no-diff
            entry["diff"] = diff
    return entry


def _head(result: ObjectResult) -> dict[str, Any]:
    """What an entry says before its rules: the object and its result."""
    ref = result.ref
    return {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace or None,
        "name": ref.name,
        "origin": result.origin,
        "gpus": result.gpus,
        "result": result.worst.value,
    }


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


_SKIP = Result.SKIP
_RESULT = attrgetter("result")
_BLOCK = 1 << 16  # bytes of report written at once
_RULE_CACHE_LIMIT = 1 << 12  # distinct rule entries kept as bytes; cleared when full


class JsonEntries:
    """The bytes of one object's entry in the JSON report (its rule entries without messages kept).
    The report makes them; so do `audit --jobs` workers, which send the parent bytes to write."""

    def __init__(self) -> None:
        self.rules: dict[tuple[Any, ...], bytes] = {}
        # the engine shares one outcome per rule, result and reason among objects (webhook.engine.shared_outcome):
        # those are looked up by identity; each is kept here beside its bytes, so that its id cannot be
        # another object's while it is here
        self.shared: dict[int, tuple[RuleOutcome, bytes]] = {}
        self.not_evaluated: dict[tuple[str, ...], bytes] = {}  # the folded names' bytes, per list of names

    def entry(self, result: ObjectResult) -> bytes:
        """orjson.dumps(object_entry(result), default=str), byte for byte (tests/audit/test_report_bytes.py)."""
        # the head's `}` gives way to the rules (then the patch and diff), as object_entry orders them
        shared, rule = self.shared.get, self.rule
        if _SKIP in map(_RESULT, result.outcomes):
            outcomes = [o for o in result.outcomes if o.result is not _SKIP]
            names = tuple(o.rule for o in result.outcomes if o.result is _SKIP)
            folded = self.not_evaluated.get(names)
            if folded is None:
                if len(self.not_evaluated) >= _RULE_CACHE_LIMIT:
                    self.not_evaluated.clear()
                folded = self.not_evaluated[names] = b',"notEvaluated":' + orjson.dumps(names)
        else:
            outcomes, folded = result.outcomes, b""
        rules = [found[1] if (found := shared(id(o))) is not None else rule(o) for o in outcomes]
        parts = [orjson.dumps(_head(result))[:-1], b',"rules":[', b",".join(rules), b"]", folded]
        if result.patch:
            # OPT_PASSTHROUGH_DATETIME is not set: YAML timestamps come out as RFC 3339 strings
            parts += (b',"patch":', orjson.dumps(result.patch, default=str))
            diff = result.diff()
            if diff:  # not with --no-diff
                parts += (b',"diff":', orjson.dumps(diff))
        parts.append(b"}")
        return b"".join(parts)

    def rule(self, outcome: RuleOutcome) -> bytes:
        if outcome.messages:  # messages name the object: seldom the same twice, not worth keeping
            return orjson.dumps(_rule(outcome))
        key = (outcome.rule, outcome.result, outcome.reason, bool(outcome.patch), outcome.blocks)
        found = self.rules.get(key)
        if found is None:
            if len(self.rules) >= _RULE_CACHE_LIMIT:
                self.rules.clear()
            found = self.rules[key] = orjson.dumps(_rule(outcome))
        if outcome.plain:  # a shared one (webhook.engine.shared_outcome): next time by identity
            if len(self.shared) >= _RULE_CACHE_LIMIT:
                self.shared.clear()
            self.shared[id(outcome)] = (outcome, found)
        return found


class JsonReport:
    shows_diffs = takes_entries = True

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.first = True
        self.pending: list[bytes] = []
        self.size = 0
        self.entries = JsonEntries()
        self.problems: list[InputProblem] = []

    def problem(self, problem: InputProblem) -> None:
        self.problems.append(problem)

    def add(self, result: ObjectResult) -> None:
        self.add_entry(self.entries.entry(result))

    def add_entry(self, entry: bytes) -> None:
        """An object's entry as JsonEntries.entry made it (here, or in an `audit --jobs` worker)."""
        self.pending.append(b'{"objects":[\n' if self.first else b",\n")
        self.pending.append(entry)
        self.first = False
        self.size += len(entry)
        if self.size >= _BLOCK:
            self.flush()

    def flush(self) -> None:
        self.out.write(b"".join(self.pending).decode())
        self.pending.clear()
        self.size = 0

    def finish(self, tally: Tally) -> None:
        self.flush()
        self.out.write('{"objects":[' if self.first else "\n")
        problems = b",\n".join(orjson.dumps(problem_entry(p)) for p in self.problems).decode()
        self.out.write(
            f'],\n"inputProblems":[{problems}],\n"summary":' + orjson.dumps(tally.as_dict()).decode() + "}\n"
        )


class YamlReport:
    shows_diffs, takes_entries = True, False

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.first = True
        self.problems: list[InputProblem] = []

    def problem(self, problem: InputProblem) -> None:
        self.problems.append(problem)

    def add(self, result: ObjectResult) -> None:
        if self.first:
            self.out.write("objects:\n")
            self.first = False
        # a one-item top-level sequence is valid as the value of `objects:` at column 0
        self.out.write(plain_yaml([object_entry(result)], width=120))

    def finish(self, tally: Tally) -> None:
        if self.first:
            self.out.write("objects: []\n")
        problems = [problem_entry(p) for p in self.problems]
        self.out.write(plain_yaml({"inputProblems": problems, "summary": tally.as_dict()}, width=120))
