"""Cluster context against the stand-in API server (tests/support/kubestub.py): namespaces looked up on a
miss, stale watches reported, PriorityClasses and DRA claim templates handed to the engine, and a
server that says which rules cannot act without a watch."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.support import RULES, LiveServer, client_ssl, free_port, gpu_pod, make_review, start_server
from tests.support.kubestub import CLAIM_TEMPLATES, PRIORITY_CLASSES, KubeStub
from webhook.engine import AdmissionInput, evaluate, load_rules
from webhook.kube import ClusterCaches, NamespaceCache

TENANT = {"gpu-webhook.io/tenant": "true"}


def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def api_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


@pytest.fixture
def stub() -> Iterator[KubeStub]:
    server = KubeStub().start()
    server.add("team-a", labels=TENANT)
    yield server
    server.stop()


@pytest.fixture
def make(stub: KubeStub) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def build(kind: type = NamespaceCache, **options: Any) -> Any:
        options.setdefault("backoff_initial", 0.01)
        cache = kind(api_client(stub.url), **options)
        started.append(cache)
        cache.start()
        return cache

    yield build
    for cache in started:
        cache.stop()


# -- a namespace the watch never delivered ------------------------------------------------------------
async def test_a_missing_namespace_is_looked_up_once(stub: KubeStub, make: Callable[..., Any]) -> None:
    cache = make()
    assert cache.wait_synced(5)
    stub.hide("/api/v1/namespaces/team-late", namespace("team-late", TENANT))  # the broken watch missed it
    assert cache.get("team-late") is None
    found = await asyncio.gather(*(cache.lookup("team-late") for _ in range(5)))
    assert all(f["metadata"]["labels"] == TENANT for f in found)
    assert cache.lookups == 1 and stub.requests.count("get /api/v1/namespaces/team-late") == 1  # shared
    assert cache.get("team-late") is not None  # and kept
    assert await cache.lookup("nowhere") is None and await cache.lookup("nowhere") is None
    assert stub.requests.count("get /api/v1/namespaces/nowhere") == 1  # a 404 is kept a while


async def test_a_slow_lookup_is_bounded(stub: KubeStub, make: Callable[..., Any]) -> None:
    cache = make(lookup_timeout=0.2)
    assert cache.wait_synced(5)
    stub.fail_next(0)
    started = time.monotonic()
    stub.delay_reads(2)  # an apiserver that does not answer in time
    assert await cache.lookup("slow") is None
    assert time.monotonic() - started < 1


@pytest.fixture
async def server_with_cache(cert_dir: Path, rules_dir: Path, stub: KubeStub) -> AsyncIterator[LiveServer]:
    cache = NamespaceCache(api_client(stub.url), backoff_initial=0.01, stale_after=0.5)
    server = await start_server(cert_dir, rules_dir, namespaces=cache)
    assert await asyncio.to_thread(cache.wait_synced, 5)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        yield LiveServer(server, session)
    await server.stop()


async def test_tenant_rules_act_on_a_namespace_missing_from_the_cache(
    server_with_cache: LiveServer, stub: KubeStub
) -> None:
    """Issue 11 point 14: a cache miss used to turn every tenant rule off silently."""
    stub.hide("/api/v1/namespaces/team-late", namespace("team-late", TENANT))
    pod = gpu_pod(name="debug")
    pod["metadata"]["namespace"] = "team-late"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    answer = await server_with_cache.review("validate", make_review(pod, namespace="team-late"))
    assert answer["response"]["allowed"] is False
    assert "no-privileged-in-tenants" in answer["response"]["status"]["message"]


async def test_a_quiet_watch_is_reported_stale(server_with_cache: LiveServer, stub: KubeStub) -> None:
    live = server_with_cache
    stub.bookmarks(0.05)
    await asyncio.sleep(0.8)
    status, body = await live.get("/readyz")
    assert status == 200 and json.loads(body)["namespaces"]["caches"]["namespace"]["stale"] is False
    stub.silence()  # no events, no bookmarks, no end: a half-open watch
    for _ in range(100):
        body = (await live.get("/readyz"))[1]
        if json.loads(body)["namespaces"]["caches"]["namespace"]["stale"]:
            break
        await asyncio.sleep(0.05)
    detail = json.loads(body)["namespaces"]
    assert detail["caches"]["namespace"]["stale"] is True and detail["synced"] is True
    assert 'gpu_webhook_watch_cache_stale{cache="namespace"} 1.0' in (await live.get("/metrics"))[1]


# -- PriorityClasses and DRA claims into the engine --------------------------------------------------
def test_priority_classes_and_claim_templates_reach_the_engine(stub: KubeStub) -> None:
    stub.put(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "cluster-default"},
                                "value": 10, "globalDefault": True})  # fmt: skip
    stub.put(CLAIM_TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "metadata": {"name": "one-gpu", "namespace": "team-a"},
                               "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                   "deviceClassName": "gpu.nvidia.com"}}]}}}})  # fmt: skip
    context = ClusterCaches(api_client(stub.url), backoff_initial=0.01)
    context.start()
    try:
        eventually(lambda: all(c.synced for c in context.caches))
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer", "namespace": "team-a"},
            "spec": {
                "priorityClassName": "cluster-default",  # written by the Priority plugin
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "cuda",
                        "resources": {
                            "claims": [{"name": "gpu"}],
                            "requests": {"cpu": "4", "memory": "16Gi"},
                            "limits": {"memory": "16Gi"},
                        },
                    }
                ],
            },
        }
        admission = AdmissionInput.offline(
            pod, namespace_object=context.get("team-a"), cluster=context.context("team-a")
        )
        assert admission.priority_classes == {
            "cluster-default": {"value": 10, "globalDefault": True, "preemptionPolicy": "PreemptLowerPriority"}
        }
        decision = evaluate(load_rules(RULES).require(), admission)
        assert decision.allowed, decision.denial_message  # a GPU pod, with the cluster's default class
    finally:
        context.stop()


async def test_a_claim_template_the_watch_missed_is_looked_up(stub: KubeStub) -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "late", "namespace": "team-a"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com"}}]}}}}  # fmt: skip
    stub.hide("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/late", template)
    context = ClusterCaches(api_client(stub.url), backoff_initial=0.01)
    context.start()
    try:
        await asyncio.to_thread(eventually, lambda: all(c.synced for c in context.caches))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
               "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "late"}],
                        "containers": [{"name": "main", "image": "cuda"}]}}  # fmt: skip
        await context.resolve_claims("team-a", pod)
        admission = AdmissionInput.offline(
            pod, namespace_object=context.get("team-a"), cluster=context.context("team-a")
        )
        decision = evaluate(load_rules(RULES).require(), admission)
        assert not any(v.rule == "dra-pod-claims-resolvable" for v in decision.violations)
    finally:
        context.stop()


def test_serve_without_namespaces_says_which_rules_cannot_act(cert_dir: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--port", str(port), "--cert-dir", str(cert_dir),
         "--rules", str(RULES), "--namespaces", "off"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 15
        line = ""
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if "no namespace watch" in line:
                break
        record = json.loads(line)
        assert "warn" in line.lower()
        assert "no-privileged-in-tenants" in record["rulesNotActing"]
        assert "priority-class-allowed" in record["rulesNotActing"]
    finally:
        process.terminate()
        process.wait(timeout=10)
