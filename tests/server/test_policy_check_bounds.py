"""`POST /policies` bounded in the work a namespace user can cause (issue 34, point 4), over real TLS with the
shipped pack: a check past its deadline is abandoned and its process killed, a full queue answers 429 with a
Retry-After hint at once, oversized input is refused before any lint, and a namespace at its bound of
GPUPolicyExceptions gets no new one. Every refusal is `allowed: false`: a policy is never admitted unchecked.

Through the real apiserver (its 429, its Retry-After header): tests/e2e/test_bounded_policy_objects.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.support import RULES, LiveServer, client_ssl, cpu_pod, make_review
from webhook.engine import ClusterContext
from webhook.kube.caches import ExceptionCache
from webhook.policies.checker import Checker, CheckTimeout
from webhook.server import Server, ServerConfig


def exception(name: str, namespace: str = "team-a", rules: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": {"rules": rules or ["gpu-container-resources"], "reason": "a bounded test"},
    }


def gpupolicy(name: str) -> dict[str, Any]:
    """A site's GPUPolicy: its check is lint of the whole pack with it (~0.5 s of CPU)."""
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": name},
        "spec": {"match": {"kinds": ["Pod"]}, "validate": {"expression": "true", "message": "never"}},
    }


class Cluster:
    """The server's NamespaceSource without namespaces; its exceptions a real ExceptionCache fed watch events."""

    synced = True

    def __init__(self) -> None:
        self.exceptions = ExceptionCache(client.ApiClient(client.Configuration()))

    def add(self, obj: dict[str, Any]) -> None:
        self.exceptions._apply({"type": "ADDED", "object": obj})

    def synced_for(self, references: frozenset[str]) -> bool:
        return True

    def get(self, name: str) -> dict[str, Any] | None:
        return None

    async def lookup(self, name: str) -> dict[str, Any] | None:
        return None

    def context(self, namespace: str | None) -> ClusterContext:
        return ClusterContext(exceptions=self.exceptions.of(namespace or ""))

    async def resolve_claims(self, namespace: str, pod: Any) -> None:
        """The exceptions only: no claims to look up."""

    def detail(self) -> dict[str, Any]:
        return {}

    def start(self) -> None:
        """Nothing to watch: the test feeds the events."""

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing to stop."""


@contextlib.asynccontextmanager
async def serve(cert_dir: Any, namespaces: Cluster | None = None, **overrides: Any) -> AsyncIterator[LiveServer]:
    config = ServerConfig(rules=[str(RULES)], cert_dir=str(cert_dir), port=0, shutdown_timeout=5, **overrides)
    server = Server(config, namespaces=namespaces)
    await server.start()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        yield LiveServer(server, session)
    await server.stop()


async def check(live: LiveServer, obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    old = obj if operation == "UPDATE" else None
    review = make_review(obj, operation, old=old, namespace=obj["metadata"].get("namespace"))
    return dict((await live.review("policies", review))["response"])


def check_processes() -> list[Any]:
    """The live check processes this test process forked (webhook/policies/checker.py names them)."""
    return [p for p in multiprocessing.active_children() if p.name == "gpu-webhook-policy-check"]


async def test_a_check_past_its_deadline_is_abandoned_its_process_killed_and_the_policy_refused(cert_dir: Any) -> None:
    """Lint of the shipped pack takes ~0.5 s of CPU; a 0.1 s deadline abandons it, and the pods keep flowing."""
    async with serve(cert_dir, policy_check_deadline=0.1) as live:
        started = time.monotonic()
        pods = [asyncio.ensure_future(live.review("validate", make_review(cpu_pod()))) for _ in range(5)]
        answer = await check(live, gpupolicy("slow"))
        elapsed = time.monotonic() - started
        assert answer["allowed"] is False and answer["status"]["code"] == 504
        assert "could not check GPUPolicy slow: the check did not finish within" in answer["status"]["message"]
        assert elapsed < 2.0, elapsed  # answered at the deadline, not when the lint would have ended
        assert [(await pod)["response"]["allowed"] for pod in pods] == [True] * 5
        assert check_processes() == []  # killed at the deadline: it burns no CPU after
    async with serve(cert_dir) as live:  # the same check within the registration's deadline passes
        answer = await check(live, gpupolicy("slow"))
        assert answer["allowed"] is True, answer


async def test_the_killed_process_is_gone() -> None:
    checker = Checker()
    try:
        assert await checker.run(sum, ([1, 2],), 5.0) == 3
        process = checker._process
        assert process is not None and process.pid is not None
        pid = process.pid
        with pytest.raises(CheckTimeout):
            await checker.run(time.sleep, (30,), 0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert await checker.run(sum, ([4, 5],), 5.0) == 9  # a new process for the next check
        assert checker.started == 2
    finally:
        checker.close()


async def test_a_full_queue_answers_429_at_once_with_a_retry_hint(cert_dir: Any) -> None:
    async with serve(cert_dir, policy_check_queue=1) as live:
        answers = await asyncio.gather(*(check(live, gpupolicy(f"p{i}")) for i in range(4)))
        busy = [a for a in answers if not a["allowed"]]
        assert sum(a["allowed"] for a in answers) == 2, answers  # the running one and the one queued
        assert len(busy) == 2, answers
        for refused in busy:
            assert refused["allowed"] is False and refused["status"]["reason"] == "TooManyRequests"
            assert refused["status"]["details"]["retryAfterSeconds"] >= 1
            assert "was not checked: retry in" in refused["status"]["message"]
        assert (await check(live, gpupolicy("later")))["allowed"] is True  # the queue drained
        assert len(check_processes()) == 1
    assert check_processes() == []  # it ends with the server


async def test_oversized_input_is_refused_before_any_lint(cert_dir: Any) -> None:
    async with serve(cert_dir) as live:
        many = exception("many", rules=[f"gpu-container-resourcez-{i:05d}" for i in range(25_000)])
        started = time.monotonic()
        answer = await check(live, many)
        assert answer["allowed"] is False and answer["status"]["code"] == 413
        assert "more than 20000 values; a policy object is small" in answer["status"]["message"]
        assert time.monotonic() - started < 2.0
        assert check_processes() == []  # no lint ran: no check process was even forked
        status, text = await live.post_raw("policies", b"{" + b" " * (1024 * 1024 + 1) + b"}")
        assert status == 413 and "at most 1048576 bytes" in text


async def test_a_namespace_at_its_bound_gets_no_new_exception(cert_dir: Any) -> None:
    cluster = Cluster()
    for name in ("one", "two"):
        cluster.add(exception(name))
    async with serve(cert_dir, namespaces=cluster, max_exceptions_per_namespace=2) as live:
        answer = await check(live, exception("three"))
        assert answer["allowed"] is False and answer["status"]["code"] == 403
        assert answer["status"]["message"] == (
            "gpu-webhook refused GPUPolicyException three: namespace team-a already has 2 GPUPolicyExceptions, "
            "the most the server applies (serve --max-exceptions-per-namespace 2); delete one, or widen one's match"
        )
        assert (await check(live, exception("two"), "UPDATE"))["allowed"] is True  # an update adds none
        assert (await check(live, exception("three", namespace="team-b")))["allowed"] is True


async def test_a_flood_of_exceptions_is_checked_at_the_cost_of_each(cert_dir: Any) -> None:
    """An exception's check reads the rules in use, not the files: 40 near-bound ones in a burst are each
    answered (checked, or a 429 for a full place), none waits for a lint of the pack."""
    async with serve(cert_dir) as live:
        near_bound = [
            exception(f"e{i}", rules=[f"gpu-container-resourcez-{r:03d}" for r in range(128)]) for i in range(40)
        ]
        started = time.monotonic()
        answers = await asyncio.gather(*(check(live, obj) for obj in near_bound))
        assert all(a["allowed"] is False for a in answers)
        codes = {a["status"]["code"] for a in answers}
        assert codes <= {422, 429}, codes
        checked = [a for a in answers if a["status"]["code"] == 422]
        assert checked and "did you mean 'gpu-container-resources'?" in checked[0]["status"]["message"]
        assert time.monotonic() - started < 10.0
