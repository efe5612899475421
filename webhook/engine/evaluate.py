"""evaluate(): one object, one rule set -> one Decision. Pure: no I/O, no globals.

Mutations run first (every matching rule, in file order) on a copy of the object;
validations then see the mutated result, exactly as the apiserver runs mutating
webhooks before validating ones. The server calls one phase per endpoint; the
offline doors (audit, test, explain) call both.

This module is the run: which rules run in which order, ratcheting, and what is recorded
(trace, violations, errors). Whether a rule applies is matching.py; what it reads about the
object (the working copy, targets, GPU counts) is facts.py; how its CEL runs (activations, fused
programs) is programs.py; what it may cost is limits.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .decision import Decision, EvaluationError, RuleError, RuleTrace, Violation
from .exceptions import PolicyException, excepting
from .facts import WorkingCopy, object_accelerators
from .limits import Budget
from .matching import REFUSED_FOR_CONTEXT, after_gate, gate, mismatch
from .mutate import MutationContext, MutationError
from .patch import PatchConflict
from .policy import Action, Rule
from .programs import Programs
from .projection import Projection, projection_for
from .ratcheting import unchanged
from .request import DEFAULT_LIMITS, AdmissionInput, Limits, Mode, Phase
from .ruleset import RuleSet
from .workloads import UNMUTATED_KINDS, Target

__all__ = ["EVALUATED_SUBRESOURCES", "evaluate"]

# pods/ephemeralcontainers (kubectl debug) adds containers to a running pod. Since 1.22 its
# object is the whole Pod and the operation UPDATE (KEP-277, kubernetes/kubernetes#101034), and
# the apiserver keeps only spec.ephemeralContainers of what is written to it: rules run on it as
# on any Pod UPDATE, ratcheting keeps the existing containers from re-denying.
EVALUATED_SUBRESOURCES = frozenset({"", "ephemeralcontainers"})
INPUTS_UNCHANGED = "the UPDATE changed nothing it reads or writes (ratcheting)"


def evaluate(
    ruleset: RuleSet,
    admission: AdmissionInput,
    phase: Phase = Phase.ALL,
    mode: Mode = Mode.ENFORCE,
    trace: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> Decision:
    decision = Decision()
    subject = admission.subject
    if not isinstance(subject, dict) or admission.sub_resource not in EVALUATED_SUBRESOURCES:
        return decision  # rules never match other subresources (pods/exec, */scale, */status)
    kind = admission.kind or str(subject.get("kind", ""))
    # traced, every candidate is listed (a rule for other namespaces with its reason); untraced, as the
    # server and the audit run it, those rules are left out before any check
    if trace:
        candidates = ruleset.candidates(kind, admission.operation)
    else:
        candidates = ruleset.candidates_in(kind, admission.operation, admission.namespace or "")
    if not candidates:
        decision.accelerators = object_accelerators(ruleset.accelerators, admission)
        return decision
    projection = projection_for(ruleset, candidates, phase)  # with the phase's rules, listed once per rule set
    run = _Run(ruleset, admission, decision, mode, trace, limits, projection)
    if ruleset.exceptions or admission.exceptions:
        exceptions = (*ruleset.exceptions, *admission.exceptions)
        run.excepting = excepting(exceptions, kind, subject, admission.namespace, admission.now)
    if admission.object is not None and kind not in UNMUTATED_KINDS:
        for rule in projection.mutating:
            run.mutate(rule)
    run.validate_all(projection.validating)
    patcher = run.copy.patcher
    if patcher is not None and patcher.operations:
        decision.patch = patcher.operations
        decision.mutated = run.copy.working
    decision.accelerators = run.copy.received_accelerators()
    decision.allowed = not decision.violations
    return decision


class _Run:
    """One evaluation: the rules run on the working copy, and what they give is recorded in the decision."""

    def __init__(
        self,
        ruleset: RuleSet,
        admission: AdmissionInput,
        decision: Decision,
        mode: Mode,
        trace: bool,
        limits: Limits,
        projection: Projection,
    ) -> None:
        self.ruleset = ruleset
        self.projection = projection
        self.admission = admission
        self.decision = decision
        self.mode = mode
        self.trace = trace
        self.limits = limits
        self.copy = WorkingCopy(ruleset.accelerators, admission)
        self.programs = Programs(ruleset, admission, projection, Budget(limits, admission.json_commas), self.copy)
        self._refused_for_context: set[tuple[str, str]] = set()
        self._old_run: _Run | None = None  # the same rules on oldObject, for ratcheting (UPDATE)
        # rule name -> the GPUPolicyException that lets this object through it (exceptions.excepting)
        self.excepting: dict[str, PolicyException] = {}
        # Without a trace nobody reads the entries: one scratch entry takes what every rule writes
        self._scratch = RuleTrace(rule="", target="", matched=True)

    # -- phases ----------------------------------------------------------------------------------
    def mutate(self, rule: Rule) -> None:
        copy, programs = self.copy, self.programs
        for target in copy.targets(rule):
            entry = self._match(rule, target)
            if entry is None:
                continue
            patcher = copy.edit()
            start = len(patcher.operations)
            context = MutationContext(
                patcher=patcher,
                target=target,
                operation=self.admission.operation,
                # an activation only if a mutation has CEL, of the working copy as it then is
                evaluate=lambda expression, r=rule, t=target: programs.eval(r, t, expression),  # type: ignore[misc]
                accelerators=self.ruleset.accelerators,
                sub_resource=self.admission.sub_resource,
                gpu_otherwise=lambda container, t=target: copy.gpu_otherwise(t, container),  # type: ignore[misc]
            )
            try:
                for mutation in rule.mutations:
                    mutation.apply(context)
            except (MutationError, PatchConflict, RuleError) as error:
                self._error(rule, target, entry, f"mutation failed: {error}")
                continue
            entry.patch = patcher.operations[start:]
            entry.result = "mutated" if entry.patch else "pass"

    def validate_all(self, rules: tuple[Rule, ...]) -> None:
        """The validating rules, in file order. The working copy no longer changes, so the plain
        checks (matching.gate) of every rule come first, and the expressions of the rules that pass
        run as one CEL program per target (programs.Programs.fuse_validations)."""
        copy = self.copy
        checked = [(rule, target, gate(copy, rule, target)) for rule in rules for target in copy.targets(rule)]
        # a rule of named namespaces (a team's GPUPolicy) runs alone: fused beside the others, every such
        # namespace would compile a program of its own, past the rule set's share (cel.py MAX_FUSED_PER_RULE_SET)
        fused = [
            (rule, target)
            for rule, target, reason in checked
            if reason is None and rule.match.namespaces_include is None
        ]
        if self.excepting:
            fused = [(rule, target) for rule, target in fused if self._exception(rule) is None]
        self.programs.fuse_validations(fused)
        trace = self._entry
        for rule, target, reason in checked:
            if reason is None or reason == REFUSED_FOR_CONTEXT:
                self.validate(rule, target, reason)
            else:  # did not match (as _match would trace it): most candidates offline, with no namespace context
                trace(rule, target, reason)

    def validate(self, rule: Rule, target: Target, reason: str | None) -> None:
        """One validating rule on one target that matching.gate answered `reason` for."""
        entry = self._match(rule, target, True, reason)
        if entry is None:
            return
        try:
            messages = self._messages(rule, target)
        except RuleError as error:
            self._error(rule, target, entry, str(error))
            return
        if messages and self._ratchets(rule):
            already = self._old_messages(rule, target)
            messages = [m for m in messages if m not in already]
        if not messages:
            entry.result = "pass"
            return
        entry.result = "fail"
        entry.message = "; ".join(messages)
        self._record(rule, target, entry.message)

    def _messages(self, rule: Rule, target: Target) -> list[str]:
        """The rule's validation on this target: its failure messages (none: it passes); RuleError if it errs."""
        assert rule.validate is not None
        result = self.programs.eval(rule, target, rule.validate.expression)
        messages = [self._message(rule, target)] if result is False else _failures(result)
        if messages is None:
            raise RuleError(f"validate.expression gave {type(result).__name__}, expected bool or list")
        return messages

    # -- ratcheting ------------------------------------------------------------------------------
    def _ratchets(self, rule: Rule) -> bool:
        """Kubernetes ratchets CRD validation on UPDATE (KEP-4008, stable in 1.33): an error on a
        field the update did not change is not reported. Per rule here: a Deny rule denies on UPDATE
        only the messages the old object did not already produce. Otherwise an UPDATE that only
        removes Kueue's scheduling gate, or adds a finalizer, is denied for what the pod already was
        (a namespace label changed since), and the pod stays gated forever.
        """
        return (
            rule.ratcheting
            and rule.action == Action.DENY
            and self.admission.operation == "UPDATE"
            and isinstance(self.admission.old_object, dict)
        )

    def _old_messages(self, rule: Rule, target: Target) -> set[str]:
        """The messages this rule gives the old object's target of the same name (none if it errs)."""
        if self._old_run is None:
            old = replace(self.admission, object=self.admission.old_object, old_object=None)
            self._old_run = _Run(self.ruleset, old, Decision(), self.mode, False, self.limits, self.projection)
        run = self._old_run
        for old_target in run.copy.targets(rule):
            if old_target.description != target.description:
                continue
            try:
                if mismatch(run.copy, run.programs, rule, old_target) is not None:
                    return set()
                return set(run._messages(rule, old_target))
            except RuleError:
                return set()
        return set()

    # -- recording -------------------------------------------------------------------------------
    def _match(self, rule: Rule, target: Target, gated: bool = False, reason: str | None = None) -> RuleTrace | None:
        """The rule's trace entry when it matches this target, else None (traced with the reason).

        `gated`: the caller asked matching.gate already, and it answered `reason`.
        """
        if self.excepting:
            exception = self._exception(rule)
            if exception is not None:
                self._except(rule, target, exception, gated, reason)
                return None
        try:
            if gated:
                reason = after_gate(self.programs, rule, target, reason)
            else:
                reason = mismatch(self.copy, self.programs, rule, target)
        except RuleError as error:
            # A condition that cannot be evaluated is an error under failurePolicy, never "no match":
            # otherwise an object shaped to break the condition would slip past a Fail rule.
            entry = self._entry(rule, target, None)
            self._error(rule, target, entry, f"match.condition failed: {error}")
            return None
        if reason == REFUSED_FOR_CONTEXT:
            self._refuse_for_context(rule, target)
        elif reason is None and self._inputs_unchanged(rule, target):
            reason = INPUTS_UNCHANGED
        entry = self._entry(rule, target, reason)
        return entry if reason is None else None

    def _exception(self, rule: Rule) -> PolicyException | None:
        return self.excepting.get(rule.name) if rule.exceptable else None

    def _except(self, rule: Rule, target: Target, exception: PolicyException, gated: bool, reason: str | None) -> None:
        """`_match` for a rule an exception covers: traced `excepted` when it matches (a condition that
        errs, or a missing namespace under onMissingContext: Deny, count as matching), never run."""
        try:
            reason = (
                after_gate(self.programs, rule, target, reason)
                if gated
                else mismatch(self.copy, self.programs, rule, target)
            )
        except RuleError:
            reason = None
        if reason is not None and reason != REFUSED_FOR_CONTEXT:
            self._entry(rule, target, reason)
            return None
        entry = self._entry(rule, target, None)
        entry.result = "excepted"
        entry.message = exception.verdict
        if rule.name not in self.decision.excepted:
            self.decision.excepted[rule.name] = exception.verdict
            self.decision.exceptions_used.append((exception.key, rule.name))
        return None

    def _inputs_unchanged(self, rule: Rule, target: Target) -> bool:
        """An UPDATE that changed nothing the rule reads or writes on this target (ratcheting.py): it does not act."""
        old = self.admission.old_object
        return (
            rule.ratcheting
            and self.admission.operation == "UPDATE"
            and isinstance(old, dict)
            and unchanged(rule.inputs, target, self.copy.working, old)
        )

    def _entry(self, rule: Rule, target: Target, reason: str | None) -> RuleTrace:
        """The trace entry of this rule on this target (the scratch entry when not tracing)."""
        if not self.trace:
            return self._scratch
        # positional: half the cost of keywords, for every candidate rule and target of every object offline
        entry = RuleTrace(rule.name, target.description, reason is None, reason or "")
        self.decision.trace.append(entry)
        return entry

    def _refuse_for_context(self, rule: Rule, target: Target) -> None:
        """onMissingContext: Deny: the namespace is unknown, so the rule denies (once per rule and target)."""
        key = (rule.name, target.description)
        if key not in self._refused_for_context:  # a rule that mutates and validates refuses once
            self._refused_for_context.add(key)
            message = f"namespace {self.admission.namespace!r} is not known yet (onMissingContext: Deny); retry shortly"
            self._record(rule, target, message, error=True)

    def _message(self, rule: Rule, target: Target) -> str:
        validation = rule.validate
        assert validation is not None
        if validation.message_expression is not None:
            try:
                message = self.programs.eval(rule, target, validation.message_expression)
                if isinstance(message, str) and message.strip():
                    return message
            except RuleError:
                pass  # fall back to the static message: a broken message must not hide the denial
        if validation.message:
            return validation.message
        return f"{target.description} violates {rule.name}"

    def _record(self, rule: Rule, target: Target, message: str, error: bool = False) -> None:
        action = rule.action
        relaxed = action == Action.DENY and self.mode == Mode.AUDIT
        if relaxed:
            action = Action.AUDIT
        violation = Violation(
            rule=rule.name, action=action, message=message, target=target.description, relaxed=relaxed, error=error
        )
        bucket = {
            Action.DENY: self.decision.violations,
            Action.WARN: self.decision.warnings,
            Action.AUDIT: self.decision.audits,
        }[action]
        bucket.append(violation)

    def _error(self, rule: Rule, target: Target, entry: RuleTrace, message: str) -> None:
        entry.result = "error"
        entry.message = message
        self.decision.errors.append(EvaluationError(rule.name, target.description, message))
        if rule.failure_policy == "Fail":
            self._record(rule, target, f"rule {rule.name} could not be evaluated: {message}", error=True)


def _failures(result: Any) -> list[str] | None:
    """true passes; a list of strings is one failure each (empty passes); anything else is None."""
    if result is True:
        return []
    if isinstance(result, list) and all(isinstance(item, str) for item in result):
        return list(result)
    return None
