"""One AdmissionReview body in, the answer's bytes out: parse, add the cluster context, evaluate, serialise.

`Pipeline` is what the transport (app.py) calls for each body: it checks that rules are loaded,
sends a large body to the evaluation process (offload.py) and decides a small one here.
`respond` and `decide` are plain synchronous code with no server state, so the same functions
run on the event loop (small requests) and in the evaluation process (large ones).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook.engine import AdmissionInput, Decision, Limits, Mode, Phase, RuleSet, evaluate
from webhook.review import ParsedReview, ReviewError, build_response, error_response, parse_review
from webhook.server.context import Snapshot, request_snapshot

if TYPE_CHECKING:
    from webhook.server.offload import Offload
    from webhook.server.reload import RuleStore

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


@dataclass
class Pipeline:
    """One endpoint's way from a body to its answer: the rules in use, the cluster context, where large bodies go."""

    phase: Phase
    endpoint: str
    rules: RuleStore
    mode: Mode
    limits: Limits
    offload_threshold: int  # bodies larger than this are decided in the evaluation process
    offload: Offload
    context: Any | None = None  # the server's NamespaceSource, or None without a cluster

    async def __call__(self, body: bytes) -> Decided | Problem:
        ruleset = self.rules.ruleset
        if ruleset is None:
            return Problem(503, "no rule set loaded yet")
        config = DecideConfig(self.phase, self.mode, self.limits)
        if len(body) > self.offload_threshold:
            result = await self.offload.decide(
                ruleset, self.rules.generation, config, body, self.endpoint, self.context
            )
            result.offloaded = True
            return result
        review = parse(body, self.endpoint)  # the fast path: no hop for a small object
        if isinstance(review, Problem):
            return review
        admission = (await request_snapshot(self.context, review)).input_for(review, body_commas(body))
        return respond(ruleset, config, review, admission, self.endpoint)


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


def decide(
    ruleset: RuleSet,
    config: DecideConfig,
    body: bytes,
    endpoint: str,
    context: Callable[[ParsedReview], Snapshot],
) -> Decided | Problem:
    """Parse, add the cluster context (namespace, PriorityClasses, claims), evaluate, serialise."""
    review = parse(body, endpoint)
    if isinstance(review, Problem):
        return review
    return respond(ruleset, config, review, context(review).input_for(review, body_commas(body)), endpoint)


def body_commas(body: bytes) -> int:
    """The body holds the objects, so its commas bound every collection in them (one C count
    instead of re-serialising the object for the collection limit, engine/limits.py)."""
    return body.count(b",")


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
