"""Admission of policy objects: a broken GPUPolicy, GPUPolicyOverlay or GPUPolicyException is refused at apply.

The validating webhook entry `policies.gpu-webhook.io` (webhook/install/registration.py) sends their
CREATEs and UPDATEs to `POST /policies`. The object is checked as the server would load it: `lint`
(which runs the loader first) over the rule files and the cluster's other policy objects, with this
object in place of its stored version. Only the problems located in this object refuse it, each with
its field path (`spec.action: 'Block' is not one of: Deny, Warn, Audit`); a problem elsewhere is not
the applicant's to fix. A name already defined by a rule file is such a problem: the object would
never load.

The check compiles the rules (the CEL programs are kept per process, so only what changed is
compiled): about 0.5 s of CPU with the shipped pack. Whoever may write a GPUPolicyException in a
namespace can send it, so its cost is bounded, cheapest first, and every refusal fails closed
(the policy is not admitted) without holding any other request:

1. a review body over `MAX_REVIEW_BYTES` is refused (413) before it is parsed; an object of more than
   `MAX_VALUES` values (every list item, map entry and scalar, counted with an early stop) is refused
   before any lint (the CRDs bound their fields far below both: webhook/install/crds.py);
2. a new GPUPolicyException in a namespace that already has `max_exceptions_per_namespace` is refused
   (the server would not apply it: webhook/kube/caches.py);
3. one check runs at a time and `queue` more may wait in each of two lanes (turns.py): the platform's
   GPUPolicies and overlays first, then GPUPolicyExceptions, at most `per_namespace` of them from one
   namespace; beyond, the answer is at once a refusal with code 429 and `details.retryAfterSeconds`, which the apiserver passes on as its own 429 with a
   `Retry-After` header (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go
   `ErrorNegotiated`), so kubectl and client-go retry by themselves;
4. the check runs in a child process (checker.py) under a deadline: the registration's
   `timeoutSeconds` (webhook/install/registration.py) less a margin, counted from the request's
   arrival, queueing included. Past it the process is killed, the result never read, and the answer
   a refusal that says so, sent while the apiserver still waits for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from webhook.engine import LoadError, RuleSet, exception_errors
from webhook.engine.documents import EXCEPTION_KIND, MAX_EXCEPTIONS_PER_NAMESPACE, POLICY_RESOURCES
from webhook.install.registration import TIMEOUT_SECONDS
from webhook.kube.policyobjects import errors_about, policy_object, summary
from webhook.policies.checker import Checker, CheckTimeout
from webhook.policies.turns import Turns
from webhook.review import API_VERSION, KIND, ParsedReview, ReviewError, error_response, parse_review

PATH = "/policies"
CHECKED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
# An UPDATE's review holds the object twice; a policy object within its CRD's bounds is tens of KiB.
MAX_REVIEW_BYTES = 1024 * 1024
MAX_VALUES = 20_000  # values of one object: the 32-rule pack's largest GPUPolicy has ~300
ANSWER_MARGIN = 0.5  # seconds before the apiserver's timeout at which a check is abandoned
PLATFORM, NAMESPACES = "platform", "namespaces"  # the lanes: cluster-scoped kinds, then exceptions


@dataclass(frozen=True)
class CheckLimits:
    """How much work `/policies` takes on. `deadline`: seconds from a request's arrival to its answer."""

    queue: int = 4  # checks waiting behind the running one, per lane; one more gets a 429
    per_namespace: int = 2  # of the exceptions' places, what one namespace may hold
    deadline: float = TIMEOUT_SECONDS - ANSWER_MARGIN
    max_exceptions_per_namespace: int = MAX_EXCEPTIONS_PER_NAMESPACE


def limits_of(config: Any) -> CheckLimits:
    """The limits a ServerConfig sets (webhook/server/app.py)."""
    deadline = config.policy_check_deadline
    return CheckLimits(
        queue=config.policy_check_queue,
        deadline=CheckLimits.deadline if deadline is None else deadline,
        max_exceptions_per_namespace=config.max_exceptions_per_namespace,
    )


class ExceptionCount(Protocol):
    """The server's GPUPolicyException cache (webhook/kube/caches.py ExceptionCache): how many a namespace has."""

    def count(self, namespace: str) -> int: ...


class RuleSources(Protocol):
    """Where the server's rules come from (its RuleStore): the rule files, and the cluster's policy objects."""

    paths: list[str]
    ruleset: RuleSet | None  # the rules in use

    def cluster_objects(self) -> list[dict[str, Any]]: ...


def problems(obj: Mapping[str, Any], paths: Iterable[str], others: Iterable[Mapping[str, Any]]) -> list[LoadError]:
    """What lint (and the loader before it) finds in `obj`, among the rule files and the other policy objects."""
    from webhook.authoring.lint import lint  # the server imports lint only when a policy is applied

    candidate = policy_object(obj)
    documents = [policy_object(o) for o in others]
    documents = [o for o in documents if o.key != candidate.key]
    found = lint(list(paths), [*(o.document for o in documents), candidate.document], suites=False)
    return errors_about(found, candidate.label)


def exception_check(obj: Mapping[str, Any], rules: Mapping[str, bool]) -> list[LoadError]:
    """What the loader finds in a GPUPolicyException among the rules in use (name -> exceptable), as lint
    says it, at the cost of this one object: an exception changes no rule, so the rule files and the
    other policy objects need no lint again."""
    candidate = policy_object(obj)
    return errors_about(exception_errors([candidate.document], rules), candidate.label)


def answer(uid: str, kind: str, name: str, found: list[LoadError]) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": not found}
    if found:
        message = f"gpu-webhook refused {kind} {name or '(unnamed)'}:\n{summary(found)}"
        response["status"] = {"code": 422, "reason": "Invalid", "message": message}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def refusal(uid: str, code: int, reason: str, message: str, retry_after: int | None = None) -> bytes:
    """A refusal that is not about the object's content: too big, too many, busy, too slow."""
    status: dict[str, Any] = {"code": code, "reason": reason, "message": message}
    if retry_after is not None:
        status["details"] = {"retryAfterSeconds": retry_after}
    response = {"uid": uid, "allowed": False, "status": status}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def too_many_values(obj: Any, limit: int = MAX_VALUES) -> bool:
    """Whether `obj` holds more than `limit` values (list items, map entries, scalars); stops at the limit."""
    pending, seen = [obj], 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


class PolicyCheck:
    """`POST /policies`: the cheap bounds, the queue, then `problems` in a killable process under a deadline."""

    def __init__(
        self,
        sources: RuleSources,
        observe: Callable[[str, str, str, float], None],
        limits: CheckLimits = CheckLimits(),
        exceptions: ExceptionCount | None = None,
    ) -> None:
        self.sources, self.observe, self.limits, self.exceptions = sources, observe, limits, exceptions
        self.checker = Checker()
        self._turns = Turns({PLATFORM: limits.queue, NAMESPACES: limits.queue}, limits.per_namespace)
        self._seconds = 1.0  # a recent check's duration (moving average): the Retry-After hint

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        too_big = web.json_response(
            {"error": f"a policy object's review is at most {MAX_REVIEW_BYTES} bytes"}, status=413
        )
        if (request.content_length or 0) > MAX_REVIEW_BYTES:  # refused from the header, the body unread
            return too_big
        body = await request.read()
        if len(body) > MAX_REVIEW_BYTES:
            return too_big
        try:
            review = parse_review(body)
        except ReviewError as error:
            return web.json_response({"error": str(error)}, status=400)
        obj = review.object
        if review.operation not in CHECKED_OPERATIONS or review.kind not in POLICY_RESOURCES or obj is None:
            return self._done(review, "allowed", started, answer(review.uid, review.kind, "", []))
        name = str((obj.get("metadata") or {}).get("name") or "")
        label = f"{review.kind} {name or '(unnamed)'}"
        if too_many_values(obj):
            message = f"gpu-webhook refused {label}: more than {MAX_VALUES} values; a policy object is small"
            return self._done(review, "denied", started, refusal(review.uid, 413, "RequestEntityTooLarge", message))
        over = self._over_the_bound(review.operation, review.kind, review.namespace)
        if over:
            message = f"gpu-webhook refused {label}: {over}"
            return self._done(review, "denied", started, refusal(review.uid, 403, "Forbidden", message))
        lane = NAMESPACES if review.kind == EXCEPTION_KIND else PLATFORM
        key = review.namespace or ""
        busy = self._turns.refused(lane, key)
        if busy:
            retry = max(1, math.ceil(self._seconds * (self._turns.waiting(lane) + 1)))
            message = (
                f"gpu-webhook is checking other policy objects ({busy}); {label} was not checked: retry in {retry} s"
            )
            body = refusal(review.uid, 429, "TooManyRequests", message, retry_after=retry)
            return self._done(review, "busy", started, body)
        try:
            found = await self._check(obj, lane, key, started)
        except CheckTimeout as error:
            message = f"gpu-webhook could not check {label}: {error}; it is not admitted (retry, or simplify it)"
            return self._done(review, "timeout", started, refusal(review.uid, 504, "Timeout", message))
        except Exception as error:  # CheckFailed, or the check itself broke: refuse (failurePolicy of a broken policy)
            body = error_response(review.uid, 500, f"gpu-webhook could not check the policy: {error}")
            return self._done(review, "error", started, body)
        decision = "denied" if found else "allowed"
        return self._done(review, decision, started, answer(review.uid, review.kind, name, found))

    def _over_the_bound(self, operation: str, kind: str, namespace: str | None) -> str:
        """Why a new exception is refused for the namespace's count ('' if it is not)."""
        if operation != "CREATE" or kind != EXCEPTION_KIND or self.exceptions is None or not namespace:
            return ""
        count, limit = self.exceptions.count(namespace), self.limits.max_exceptions_per_namespace
        if count < limit:
            return ""
        return (
            f"namespace {namespace} already has {count} GPUPolicyExceptions, the most the server applies "
            f"(serve --max-exceptions-per-namespace {limit}); delete one, or widen one's match"
        )

    async def _check(self, obj: dict[str, Any], lane: str, key: str, started: float) -> list[LoadError]:
        """`problems` in the child process once it is this request's turn, within what is left of the deadline."""
        try:
            await self._turns.take(lane, key, self.limits.deadline - (time.perf_counter() - started))
        except TimeoutError:
            raise CheckTimeout(f"its turn did not come within {self.limits.deadline:g} s") from None
        try:
            began = time.perf_counter()
            left = self.limits.deadline - (began - started)
            if left <= 0:
                raise CheckTimeout(f"its turn did not come within {self.limits.deadline:g} s")
            found: list[LoadError] = await self.checker.run(*self._work(obj), left)
            self._seconds = 0.7 * self._seconds + 0.3 * (time.perf_counter() - began)
            return found
        finally:
            self._turns.give()

    def _work(self, obj: dict[str, Any]) -> tuple[Callable[..., list[LoadError]], tuple[Any, ...]]:
        """The check of `obj` and its arguments: an exception against the rules in use, else lint."""
        ruleset = self.sources.ruleset
        if obj.get("kind") == EXCEPTION_KIND and ruleset is not None:
            return exception_check, (obj, {rule.name: rule.exceptable for rule in ruleset.rules})
        return problems, (obj, list(self.sources.paths), self.sources.cluster_objects())

    def _done(self, review: ParsedReview, decision: str, started: float, body: bytes) -> web.Response:
        self.observe(review.operation, review.kind, decision, time.perf_counter() - started)
        return web.Response(body=body, content_type="application/json")

    def close(self) -> None:
        self.checker.close()


def install(
    app: web.Application,
    sources: RuleSources,
    observe: Callable[[str, str, str, float], None],
    limits: CheckLimits = CheckLimits(),
    exceptions: ExceptionCount | None = None,
) -> None:
    """Route `POST /policies` to a PolicyCheck; its check process ends with the application.
    `observe(operation, kind, decision, seconds)`: the request metric."""
    check = PolicyCheck(sources, observe, limits, exceptions)

    async def close(_app: web.Application) -> None:
        check.close()

    app.router.add_post(PATH, check.handle)
    app.on_cleanup.append(close)
