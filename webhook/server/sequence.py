"""The one admission sequence: an AdmissionReview body in, the answer's bytes out.

parse -> input (built once from the request and its context's Snapshot) -> evaluate -> respond.
`sequence` is plain synchronous code with no server state and no I/O: it stops once, after the
parse, for the request's Snapshot, which its caller reads its own way. The event loop awaits the
watch caches for it (pipeline.py, small bodies); the evaluation process takes the one the server
sent with the body (offload.py, large ones) through `decide`. Both run this same sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from webhook.engine import AdmissionInput, Decision, Limits, Mode, Phase, RuleSet, evaluate
from webhook.review import ParsedReview, ReviewError, build_response, error_response, parse_review
from webhook.server.context import Snapshot

log = logging.getLogger("gpu_webhook.server")


@dataclass(frozen=True)
class DecideConfig:
    phase: Phase
    mode: Mode
    limits: Limits

    @property
    def include_patch(self) -> bool:
        return self.phase == Phase.MUTATE


@dataclass
class Decided:
    answer: bytes
    operation: str
    kind: str
    outcome: str  # allowed, patched, denied, error
    rule_results: list[tuple[str, str]] = field(default_factory=list)  # (rule, deny|warn|audit|would_deny)
    rule_errors: list[str] = field(default_factory=list)
    exceptions_used: list[tuple[str, str]] = field(default_factory=list)  # (namespace/name, rule)
    offloaded: bool = False  # decided in the evaluation process


@dataclass
class Problem:
    """A request refused before evaluation: HTTP status and message (and the metric's code)."""

    status: int
    message: str
    offloaded: bool = False


# Yields the parsed review once, is sent its Snapshot, returns the answer (or returns at once: a Problem).
Sequence = Generator[ParsedReview, Snapshot, "Decided | Problem"]


def sequence(ruleset: RuleSet, config: DecideConfig, body: bytes, endpoint: str) -> Sequence:
    """parse -> input -> evaluate -> respond for one body, asking for the request's context once."""
    review = parse(body, endpoint)
    if isinstance(review, Problem):
        return review
    context = yield review
    # the body holds the objects, so its commas bound every collection in them (one C count instead
    # of re-serialising the object for the collection limit, engine/limits.py)
    admission = review.to_input(context.namespace_object, context.cluster, json_commas=body.count(b","))
    return respond(ruleset, config, review, admission, endpoint)


def first_step(steps: Sequence) -> ParsedReview | Decided | Problem:
    """Runs the sequence to its question: the review whose context it needs, or its answer already."""
    try:
        return next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def last_step(steps: Sequence, context: Snapshot) -> Decided | Problem:
    """Answers the sequence's question with `context` and returns its answer."""
    try:
        steps.send(context)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise RuntimeError("the admission sequence asks for its context once")


def decide(
    ruleset: RuleSet,
    config: DecideConfig,
    body: bytes,
    endpoint: str,
    context: Callable[[ParsedReview], Snapshot],
) -> Decided | Problem:
    """The sequence with a context read without waiting (the evaluation process, benches)."""
    steps = sequence(ruleset, config, body, endpoint)
    review = first_step(steps)
    if not isinstance(review, ParsedReview):
        return review
    return last_step(steps, context(review))


def parse(body: bytes, endpoint: str) -> ParsedReview | Problem:
    try:
        return parse_review(body)
    except ReviewError as error:
        log.info("malformed AdmissionReview", extra={"error": str(error), "endpoint": endpoint})
        return Problem(400, f"malformed AdmissionReview: {error}")


def respond(
    ruleset: RuleSet, config: DecideConfig, review: ParsedReview, admission: AdmissionInput, endpoint: str
) -> Decided:
    """Evaluate a parsed review with its context and serialise the answer; never raises."""
    include_patch = config.include_patch
    try:
        decision = evaluate(
            ruleset,
            admission,
            phase=config.phase,
            mode=config.mode,
            trace=log.isEnabledFor(logging.DEBUG),
            limits=config.limits,
        )
        answer = build_response(review.uid, decision, include_patch)
    except Exception:  # a bug must refuse this one request, loudly, and keep the server up
        log.exception("evaluation failed", extra={"uid": review.uid, "kind": review.kind})
        answer = error_response(review.uid, 500, "gpu-webhook could not evaluate this request (see its logs)")
        return Decided(answer, review.operation, review.kind, "error")
    outcome = "denied" if not decision.allowed else ("patched" if include_patch and decision.patch else "allowed")
    decided = Decided(answer, review.operation, review.kind, outcome)
    try:
        for bucket, action in ((decision.violations, "deny"), (decision.warnings, "warn"), (decision.audits, "audit")):
            decided.rule_results.extend((v.rule, "would_deny" if v.relaxed else action) for v in bucket)
        decided.rule_errors.extend(error.rule for error in decision.errors)
        decided.exceptions_used.extend(decision.exceptions_used)
        _log_decision(review, decision, outcome, endpoint)
    except Exception:  # bookkeeping must never turn an answer into an error
        log.exception("recording the decision failed", extra={"uid": review.uid})
    return decided


def _field(value: Any, name: str) -> Any:
    """value[name] when value is an object: the tenant may send any type where one is expected."""
    return value.get(name) if isinstance(value, dict) else None


def _log_decision(review: Any, decision: Decision, outcome: str, endpoint: str) -> None:
    # denials, and what audit mode let through that enforce mode would have denied, at info
    would_deny = [f"{v.rule}: {v.message}" for v in decision.audits if v.relaxed]
    level = logging.INFO if outcome == "denied" or would_deny else logging.DEBUG
    if not log.isEnabledFor(level):
        return
    extra: dict[str, Any] = {
        "uid": review.uid,
        "endpoint": endpoint,
        "operation": review.operation,
        "kind": review.kind,
        "namespace": review.namespace,
        "object_name": _field(_field(review.object or review.old_object, "metadata"), "name"),
        "user": _field(review.request.get("userInfo"), "username"),
        "dryRun": review.dry_run,
        "decision": outcome,
        "violations": [f"{v.rule}: {v.message}" for v in decision.violations],
        "warnings": [f"{v.rule}: {v.message}" for v in decision.warnings],
        "audits": [f"{v.rule}: {v.message}" for v in decision.audits],
        "wouldDeny": would_deny,
        "patch": decision.patch,
    }
    if decision.trace:
        extra["trace"] = [
            {"rule": t.rule, "target": t.target, "result": t.result, "reason": t.reason} for t in decision.trace
        ]
    log.log(level, "admission decision", extra=extra)
