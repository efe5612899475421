"""Decision.outcomes() gives what it gave before it became one pass (2e7aa4c; specified below rule by rule).

The summary every door reads (audit, test, explain) is now one pass over the trace with shared
outcomes for rules that have nothing of their own to say; this pins it, field by field and in
order, to the previous definition on random decisions: several targets per rule, patches,
errors under either policy, relaxed Deny failures, missing context, rules known only from
violations (no trace), repeated messages.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from webhook.engine import NO_NAMESPACE_CONTEXT, SEVERITY, Action, Decision, Result, RuleOutcome
from webhook.engine.decision import EvaluationError, RuleTrace, Violation

_ACTION_RESULT = {Action.DENY: Result.FAIL, Action.WARN: Result.WARN, Action.AUDIT: Result.AUDIT}


def reference_outcomes(decision: Decision) -> list[RuleOutcome]:
    """Decision.outcomes() as 2e7aa4c defined it, written rule by rule (a specification, not a fold)."""
    violations = [*decision.violations, *decision.warnings, *decision.audits]
    order = [t.rule for t in decision.trace] + [e.rule for e in decision.errors] + [v.rule for v in violations]
    summary = []
    for rule in dict.fromkeys(order):
        entries = [t for t in decision.trace if t.rule == rule]
        mine = [v for v in violations if v.rule == rule]
        # what the rule said, in order: its errors, then its violations; one made by an error
        # (failurePolicy Fail, onMissingContext Deny) counts only when nothing was said before it
        said = [(Result.ERROR, e.message) for e in decision.errors if e.rule == rule]
        for violation in mine:
            if not violation.error:
                said.append((_ACTION_RESULT[violation.action], violation.message))
            elif not said:
                said.append((Result.ERROR, violation.message))
        matched = any(t.matched for t in entries)
        result = min((r for r, _ in said), key=SEVERITY.__getitem__, default=None)
        result = result or (Result.PASS if matched else Result.SKIP)
        reason = next((t.reason for t in entries if not t.matched and t.reason), "")
        summary.append(
            RuleOutcome(
                rule=rule,
                result=result,
                messages=tuple(dict.fromkeys(m for _, m in said if m)),
                patch=tuple(op for t in entries if t.matched for op in t.patch),
                blocks=any(v.action == Action.DENY for v in mine),
                relaxed=any(v.relaxed for v in mine),
                reason=reason if result == Result.SKIP else "",
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


# the cases a random search may miss: the first reason given (not the first entry's), an error
# after a failure (no second message), a rule known only from an error
KNOWN = [
    Decision(trace=[RuleTrace("a", "pod p", False), RuleTrace("a", "pod q", False, "condition is false")]),
    Decision(
        trace=[RuleTrace("a", "pod p", True)],
        violations=[Violation("a", Action.DENY, "m1", "pod p"), Violation("a", Action.DENY, "m2", "pod p", error=True)],
    ),
    Decision(errors=[EvaluationError("b", "pod p", "boom")], warnings=[Violation("b", Action.WARN, "", "pod p")]),
]


@settings(max_examples=400, deadline=None)
@given(decisions())
@example(KNOWN[0])
@example(KNOWN[1])
@example(KNOWN[2])
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
