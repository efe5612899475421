"""Decision.outcomes() gives what the fold it replaced (2e7aa4c, kept below as the reference) gave.

The summary every door reads (audit, test, explain) is now one pass over the trace with shared
outcomes for rules that have nothing of their own to say; this pins it, field by field and in
order, to the previous definition on random decisions: several targets per rule, patches,
errors under either policy, relaxed Deny failures, missing context, rules known only from
violations (no trace), repeated messages.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.model import (
    NO_NAMESPACE_CONTEXT,
    SEVERITY,
    Action,
    Decision,
    EvaluationError,
    Result,
    RuleOutcome,
    RuleTrace,
    Violation,
)

_ACTION_RESULT = {Action.DENY: Result.FAIL, Action.WARN: Result.WARN, Action.AUDIT: Result.AUDIT}


def reference_outcomes(decision: Decision) -> list[RuleOutcome]:
    """Decision.outcomes() as it was at 2e7aa4c."""
    order: dict[str, None] = {}
    matched: set[str] = set()
    reasons: dict[str, str] = {}
    patches: dict[str, list[dict[str, Any]]] = {}
    messages: dict[str, list[str]] = {}
    results: dict[str, Result] = {}
    blocks: set[str] = set()
    relaxed: set[str] = set()

    def worsen(rule: str, result: Result, message: str = "") -> None:
        order.setdefault(rule)
        if rule not in results or SEVERITY[result] < SEVERITY[results[rule]]:
            results[rule] = result
        if message and message not in messages.setdefault(rule, []):
            messages[rule].append(message)

    for entry in decision.trace:
        order.setdefault(entry.rule)
        if entry.matched:
            matched.add(entry.rule)
            if entry.patch:
                patches.setdefault(entry.rule, []).extend(entry.patch)
        elif entry.reason:
            reasons.setdefault(entry.rule, entry.reason)
    for error in decision.errors:
        worsen(error.rule, Result.ERROR, error.message)
    for bucket in (decision.violations, decision.warnings, decision.audits):
        for violation in bucket:
            if violation.action == Action.DENY:
                blocks.add(violation.rule)
            if violation.relaxed:
                relaxed.add(violation.rule)
            if violation.error:
                if violation.rule not in results:
                    worsen(violation.rule, Result.ERROR, violation.message)
                continue
            worsen(violation.rule, _ACTION_RESULT[violation.action], violation.message)
    summary = []
    for rule in order:
        result = results.get(rule) or (Result.PASS if rule in matched else Result.SKIP)
        summary.append(
            RuleOutcome(
                rule=rule,
                result=result,
                messages=tuple(messages.get(rule, ())),
                patch=tuple(patches.get(rule, ())),
                blocks=rule in blocks,
                relaxed=rule in relaxed,
                reason=reasons.get(rule, "") if result == Result.SKIP else "",
            )
        )
    return summary


RULES = st.sampled_from(["a", "b", "c", "d", "e"])
TARGETS = st.sampled_from(["pod p", "replica Worker of PyTorchJob j"])
REASONS = st.sampled_from(["", NO_NAMESPACE_CONTEXT, "condition is false", "namespaceSelector does not match"])
MESSAGES = st.sampled_from(["", "m1", "m2", "rule x could not be evaluated: boom"])
PATCHES = st.lists(
    st.fixed_dictionaries({"op": st.just("add"), "path": st.sampled_from(["/a", "/b"]), "value": st.integers(0, 3)}),
    max_size=2,
)


@st.composite
def traces(draw: st.DrawFn) -> RuleTrace:
    matched = draw(st.booleans())
    entry = RuleTrace(rule=draw(RULES), target=draw(TARGETS), matched=matched, reason="" if matched else draw(REASONS))
    if matched:
        entry.patch = draw(PATCHES)
        entry.result = "mutated" if entry.patch else "pass"
    return entry


@st.composite
def violations(draw: st.DrawFn) -> Violation:
    action = draw(st.sampled_from(list(Action)))
    relaxed = action == Action.AUDIT and draw(st.booleans())
    return Violation(
        rule=draw(RULES),
        action=action,
        message=draw(MESSAGES),
        target=draw(TARGETS),
        relaxed=relaxed,
        error=draw(st.booleans()),
    )


@st.composite
def decisions(draw: st.DrawFn) -> Decision:
    decision = Decision(trace=draw(st.lists(traces(), max_size=8)))
    decision.errors = [
        EvaluationError(draw(RULES), draw(TARGETS), draw(MESSAGES)) for _ in range(draw(st.integers(0, 2)))
    ]
    for violation in draw(st.lists(violations(), max_size=4)):
        bucket = {Action.DENY: decision.violations, Action.WARN: decision.warnings, Action.AUDIT: decision.audits}
        bucket[violation.action].append(violation)
    return decision


@settings(max_examples=400, deadline=None)
@given(decisions())
def test_outcomes_are_the_previous_fold(decision: Decision) -> None:
    assert decision.outcomes() == reference_outcomes(decision)
    assert decision.outcomes() == reference_outcomes(decision)  # again: with the shared outcomes kept


def test_shared_outcomes_are_not_shared_with_patched_or_failed_rules() -> None:
    patched = RuleTrace(rule="a", target="pod p", matched=True, result="mutated", patch=[{"op": "add", "path": "/x"}])
    plain = RuleTrace(rule="a", target="pod q", matched=True, result="pass")
    first = Decision(trace=[plain]).outcomes()
    assert first == [RuleOutcome("a", Result.PASS)]
    assert Decision(trace=[patched]).outcomes() == [RuleOutcome("a", Result.PASS, patch=({"op": "add", "path": "/x"},))]
    failed = Decision(trace=[plain], violations=[Violation("a", Action.DENY, "no", "pod q")])
    assert failed.outcomes() == [RuleOutcome("a", Result.FAIL, messages=("no",), blocks=True)]
    assert Decision(trace=[plain]).outcomes() == first
