"""Decisions coming out: what evaluate() found, per rule and target, and the summary every door reads.

`Decision` holds the raw findings (violations by action, errors, the patch, the trace);
`Decision.outcomes()` folds them into one `RuleOutcome` per rule, the vocabulary of `Result`s
that audit, test, explain and the metrics all report in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .policy import Action


@dataclass(slots=True)
class Violation:
    rule: str
    action: Action
    message: str
    target: str
    relaxed: bool = False  # a Deny recorded as Audit because the server runs in audit mode
    error: bool = False  # made by an evaluation error under failurePolicy Fail (or missing context, Deny)


@dataclass(frozen=True, slots=True)
class EvaluationError:
    """A rule that could not be evaluated on one target, whatever its failurePolicy made of it."""

    rule: str
    target: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.target}: {self.message}"


class RuleError(Exception):
    """A rule failed to evaluate on one target; its failurePolicy decides what that means.

    Raised inside an evaluation (a CEL error, a limit passed) and recorded as an EvaluationError."""


class Result(StrEnum):
    """What one rule made of one object, all targets folded: the one vocabulary of every door."""

    FAIL = "fail"  # a Deny rule's validation failed (the request is denied; in audit mode: would be)
    ERROR = "error"  # the rule could not be evaluated; `blocks` says whether failurePolicy denied
    WARN = "warn"
    AUDIT = "audit"
    EXCEPTED = "excepted"  # matched, and a GPUPolicyException let the object through (`reason` says which)
    # matched, and validated or mutated without complaint (B105: a result's name, not a password)
    PASS = "pass"  # nosec B105
    SKIP = "skip"  # did not match, or was not evaluated (`reason` says which)


# worst first: how a rule's targets fold into one result, and how objects sort in reports
SEVERITY: dict[Result, int] = {r: i for i, r in enumerate(Result)}
NO_NAMESPACE_CONTEXT = "not evaluated: no namespace context"


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """One rule on one object: the summary every door reports (audit, test, explain, metrics)."""

    rule: str
    result: Result
    messages: tuple[str, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()  # the operations this rule contributed
    blocks: bool = False  # this rule makes the request denied (a Deny failure, or an error under Fail)
    relaxed: bool = False  # a Deny failure turned into Audit by the server's audit mode (would deny)
    reason: str = ""  # why a skipped rule did not act (NO_NAMESPACE_CONTEXT, the match clause that failed)

    @property
    def patched(self) -> bool:
        return bool(self.patch)

    @property
    def message(self) -> str:
        return "; ".join(self.messages)

    @property
    def context_missing(self) -> bool:
        return self.reason == NO_NAMESPACE_CONTEXT

    @property
    def plain(self) -> bool:
        """Nothing of its own to say (no messages, patch, block or relaxation): its rule, result and
        reason are all of it, and shared_outcome serves one instance for every object."""
        return not (self.messages or self.patch or self.blocks or self.relaxed)


@dataclass(slots=True)
class RuleTrace:
    """Why a rule did (or did not) act on one target: the raw material of explain and audit."""

    rule: str
    target: str
    matched: bool
    reason: str = ""  # the match clause that failed, when not matched
    result: str = "skip"  # pass | fail | error | skip | mutated | excepted
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Decision:
    allowed: bool = True
    violations: list[Violation] = field(default_factory=list)  # Deny results (and errors that fail closed)
    warnings: list[Violation] = field(default_factory=list)
    audits: list[Violation] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    trace: list[RuleTrace] = field(default_factory=list)
    errors: list[EvaluationError] = field(default_factory=list)  # evaluation errors, whatever their policy
    mutated: dict[str, Any] | None = None  # the object after the patch, when there is one
    # Accelerators the object asks for, as received (before any patch): extended resources plus
    # resolved DRA claims' devices, the scheduler's arithmetic, summed over its pod specs
    # (resources.Accelerators.pod_count). Audit counts GPUs with it; counted once, by the engine.
    accelerators: int = 0
    # rules a GPUPolicyException let through: rule -> "excepted by <namespace>/<name>: <reason>"
    excepted: dict[str, str] = field(default_factory=dict)
    # (namespace/name of the exception, rule), once per rule: what the server counts
    exceptions_used: list[tuple[str, str]] = field(default_factory=list)

    @property
    def denial_message(self) -> str:
        return "; ".join(f"[{v.rule}] {v.message}" for v in self.violations)

    def outcomes(self) -> list[RuleOutcome]:
        """One outcome per rule the engine considered, in rule order: THE summary of a decision.

        With `trace=True` (offline doors) every candidate rule appears, passes and skips included;
        without a trace (the server's hot path) only rules that failed, warned, audited, errored or
        were excepted (an excepted rule is `excepted` with the exception in its reason).
        An error is an error: a rule that could not be evaluated is `error` (with `blocks` when its
        failurePolicy denied), never a failure plus an error.
        """
        # One pass over the trace (every candidate rule, in order), then the few findings
        # (errors, violations) when there are any. A rule that passed or was skipped without
        # anything of its own (messages, patch) gets a shared outcome: they are immutable, and
        # building one per rule for every audited object would be most of this summary's cost.
        order: dict[str, str | None] = {}  # rule -> the reason it did not match; None once it matched
        patches: dict[str, list[dict[str, Any]]] = {}
        for entry in self.trace:
            rule = entry.rule
            if entry.matched:
                order[rule] = None
                if entry.patch:
                    found = patches.get(rule)
                    if found is None:
                        patches[rule] = list(entry.patch)
                    else:
                        found.extend(entry.patch)
            elif order.get(rule, "") == "":  # not matched so far and no reason yet
                order[rule] = entry.reason
        for rule in self.excepted:
            order.setdefault(rule, None)  # without a trace, an excepted rule is still reported
        findings = self._findings(order) if self.errors or self.violations or self.warnings or self.audits else None
        shared = _SHARED.get  # the lookup shared_outcome makes, inline: this loop runs for every rule
        excepted = self.excepted
        summary = [
            shared_outcome(rule, Result.EXCEPTED, excepted[rule])
            if excepted and rule in excepted
            else _quiet(rule, None, patches[rule])
            if rule in patches
            else shared(key := (rule, _PASS, "") if reason is None else (rule, _SKIP, reason)) or shared_outcome(*key)
            for rule, reason in order.items()
        ]
        if findings is None:
            return summary
        # the few rules with findings: their outcome replaces what the trace alone said
        results, messages, blocks, relaxed = findings
        for index, rule in enumerate(order):
            result = results.get(rule)
            if result is None or rule in excepted:
                continue
            said = messages.get(rule)
            if said is None and rule not in blocks and rule not in relaxed:
                summary[index] = _quiet(rule, order[rule], patches.get(rule), result)
                continue
            summary[index] = RuleOutcome(  # a finding (never skip: no reason to give)
                rule=rule,
                result=result,
                messages=tuple(said or ()),
                patch=tuple(patches.get(rule, ())),
                blocks=rule in blocks,
                relaxed=rule in relaxed,
            )
        return summary

    def _findings(
        self, order: dict[str, str | None]
    ) -> tuple[dict[str, Result], dict[str, list[str]], set[str], set[str]]:
        """Per rule, from the errors and violations: its worst result, its messages (each once, errors
        first), whether it blocks, whether it was relaxed. Rules met only here join `order`."""
        results: dict[str, Result] = {}
        messages: dict[str, list[str]] = {}
        blocks: set[str] = set()
        relaxed: set[str] = set()

        def worsen(rule: str, result: Result, message: str = "") -> None:
            order.setdefault(rule, "")
            if rule not in results or SEVERITY[result] < SEVERITY[results[rule]]:
                results[rule] = result
            if message and message not in messages.setdefault(rule, []):
                messages[rule].append(message)

        for error in self.errors:
            worsen(error.rule, Result.ERROR, error.message)
        for bucket in (self.violations, self.warnings, self.audits):
            for violation in bucket:
                if violation.action == Action.DENY:
                    blocks.add(violation.rule)
                if violation.relaxed:
                    relaxed.add(violation.rule)
                if violation.error:
                    if violation.rule not in results:  # missing context under onMissingContext: Deny
                        worsen(violation.rule, Result.ERROR, violation.message)
                    continue
                worsen(violation.rule, _ACTION_RESULT[violation.action], violation.message)
        return results, messages, blocks, relaxed


_PASS, _SKIP = Result.PASS, Result.SKIP
_SHARED: dict[tuple[str, Result, str], RuleOutcome] = {}
_SHARED_LIMIT = 1 << 12  # distinct shared outcomes kept (rules x results x reasons); cleared when full


def shared_outcome(rule: str, result: Result, reason: str = "") -> RuleOutcome:
    """RuleOutcome(rule, result, reason=reason) for a rule with nothing of its own to say (no messages,
    patch, block or relaxation): immutable, so one instance serves every object (most rules, offline)."""
    key = (rule, result, reason)
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        found = _SHARED[key] = RuleOutcome(rule, result, reason=reason)
    return found


def _quiet(
    rule: str, reason: str | None, patch: list[dict[str, Any]] | None, result: Result | None = None
) -> RuleOutcome:
    """The outcome of a rule without messages or a block: a finding's `result`, or else as the trace
    says, pass (matched: reason None) or skip (with the reason)."""
    if result is None:
        result = Result.PASS if reason is None else Result.SKIP
    if patch:
        return RuleOutcome(rule, result, patch=tuple(patch))
    return shared_outcome(rule, result, (reason or "") if result is Result.SKIP else "")


_ACTION_RESULT = {Action.DENY: Result.FAIL, Action.WARN: Result.WARN, Action.AUDIT: Result.AUDIT}
