"""JsonEntries: an entry's bytes are orjson.dumps(object_entry(result)) whatever its outcomes' history.

Rule entries of outcomes the engine shares are kept by identity; outcomes made and dropped one
after the other (ids reused by CPython) must never get another outcome's bytes.
"""

from __future__ import annotations

import orjson

from webhook.audit.formats import structured
from webhook.audit.formats.structured import JsonEntries, object_entry
from webhook.audit.results import ObjectRef, ObjectResult
from webhook.engine import NO_NAMESPACE_CONTEXT, Result, RuleOutcome, shared_outcome

RESULTS = list(Result)


def result_with(outcomes: list[RuleOutcome]) -> ObjectResult:
    ref = ObjectRef("v1", "Pod", "team-a", "p")
    return ObjectResult(ref, "f.yaml#0", 1, outcomes, [], {}, None, "")


def test_entries_of_fresh_outcomes_never_take_another_ones_bytes(monkeypatch) -> None:
    monkeypatch.setattr(structured, "_RULE_CACHE_LIMIT", 8)  # clear often as well
    entries = JsonEntries()
    for i in range(3000):
        # a new outcome each time (the previous one freed: its id is free for the next)
        outcome = RuleOutcome(f"rule-{i % 5}", RESULTS[i % len(RESULTS)], reason="why" if i % 3 else "")
        result = result_with([outcome, shared_outcome("kept", Result.SKIP, NO_NAMESPACE_CONTEXT)])
        assert entries.entry(result) == orjson.dumps(object_entry(result), default=str)
        del outcome, result


def test_shared_outcomes_are_written_as_themselves() -> None:
    entries = JsonEntries()
    shared = [shared_outcome(f"r{i}", Result.PASS) for i in range(4)] + [shared_outcome("s", Result.SKIP, "x")]
    for _ in range(3):
        result = result_with(shared)
        assert entries.entry(result) == orjson.dumps(object_entry(result), default=str)
    blocked = RuleOutcome("b", Result.FAIL, blocks=True)
    result = result_with([blocked, *shared])
    assert entries.entry(result) == orjson.dumps(object_entry(result), default=str)
