"""Admission of policy objects: a broken GPUPolicy, GPUPolicyOverlay or GPUPolicyException is refused at apply.

The validating webhook entry `policies.gpu-webhook.io` (webhook/install/registration.py) sends their
CREATEs and UPDATEs to `POST /policies`. The object is checked as the server would load it: `lint`
(which runs the loader first) over the rule files and the cluster's other policy objects, with this
object in place of its stored version. Only the problems located in this object refuse it, each with
its field path (`spec.action: 'Block' is not one of: Deny, Warn, Audit`); a problem elsewhere is not
the applicant's to fix. A name already defined by a rule file is such a problem: the object would
never load.

The check compiles the rules (the CEL programs are kept per process, so only what changed is
compiled): about 0.5 s of CPU with the shipped pack. It runs on a worker thread, one at a time: policy
changes are rare, admission requests are not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson
from aiohttp import web

from webhook.engine import LoadError
from webhook.install.crds import BY_KIND
from webhook.policies.objects import errors_about, policy_object, summary
from webhook.server.admission import API_VERSION, KIND, ReviewError, error_response, parse_review

PATH = "/policies"
CHECKED_OPERATIONS = frozenset({"CREATE", "UPDATE"})


class RuleSources(Protocol):
    """Where the server's rules come from (its RuleStore): the rule files, and the cluster's policy objects."""

    paths: list[str]

    def cluster_objects(self) -> list[dict[str, Any]]: ...


def problems(obj: Mapping[str, Any], paths: Iterable[str], others: Iterable[Mapping[str, Any]]) -> list[LoadError]:
    """What lint (and the loader before it) finds in `obj`, among the rule files and the other policy objects."""
    from webhook.authoring.lint import lint  # the server imports lint only when a policy is applied

    candidate = policy_object(obj)
    documents = [policy_object(o) for o in others]
    documents = [o for o in documents if o.key != candidate.key]
    found = lint(list(paths), [*(o.document for o in documents), candidate.document])
    return errors_about(found, candidate.label)


def answer(uid: str, kind: str, name: str, found: list[LoadError]) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": not found}
    if found:
        message = f"gpu-webhook refused {kind} {name or '(unnamed)'}:\n{summary(found)}"
        response["status"] = {"code": 422, "reason": "Invalid", "message": message}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def handler(sources: RuleSources, observe: Callable[[str, str, str, float], None]) -> Callable[[web.Request], Any]:
    """The aiohttp handler of `POST /policies`. `observe(operation, kind, decision, seconds)`: the request metric."""

    one_at_a_time = asyncio.Semaphore(1)  # a burst of applies queues here instead of taking every core

    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            review = parse_review(await request.read())
        except ReviewError as error:
            return web.json_response({"error": str(error)}, status=400)
        obj = review.object
        decision = "allowed"
        if review.operation in CHECKED_OPERATIONS and review.kind in BY_KIND and obj is not None:
            try:
                async with one_at_a_time:
                    found = await asyncio.to_thread(problems, obj, sources.paths, sources.cluster_objects())
            except Exception as error:  # the check itself broke: refuse (failurePolicy of a broken policy)
                body = error_response(review.uid, 500, f"gpu-webhook could not check the policy: {error}")
                observe(review.operation, review.kind, "error", time.perf_counter() - started)
                return web.Response(body=body, content_type="application/json")
            name = str((obj.get("metadata") or {}).get("name") or "")
            body = answer(review.uid, review.kind, name, found)
            decision = "denied" if found else "allowed"
        else:
            body = answer(review.uid, review.kind, "", [])
        observe(review.operation, review.kind, decision, time.perf_counter() - started)
        return web.Response(body=body, content_type="application/json")

    return handle
