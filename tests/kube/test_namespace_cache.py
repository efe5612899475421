"""NamespaceCache against the stand-in API server: list, watch, 410 Gone, reconnects, stop."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from tests.support.kubestub import KubeStub
from webhook.engine import AdmissionInput, evaluate, load_rules
from webhook.kube import NamespaceCache


def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def started_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The cache's own thread among those started since `before` (the stub starts some too)."""
    return [t for t in set(threading.enumerate()) - before if t.name == "namespace-cache"]


def api_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


@pytest.fixture
def stub() -> Iterator[KubeStub]:
    server = KubeStub().start()
    server.add("team-a", labels={"team": "llm", "gpu-webhook.io/tenant": "true"})
    server.add("kube-system")
    yield server
    server.stop()


@pytest.fixture
def make_cache(stub: KubeStub) -> Iterator[Callable[..., NamespaceCache]]:
    caches: list[NamespaceCache] = []

    def make(**options: float) -> NamespaceCache:
        options.setdefault("backoff_initial", 0.01)
        cache = NamespaceCache(api_client(stub.url), **options)
        caches.append(cache)
        cache.start()
        return cache

    yield make
    for cache in caches:
        cache.stop()


def test_list_fills_the_cache_and_marks_it_synced(make_cache):
    cache = make_cache()
    assert cache.wait_synced(5)
    assert cache.get("team-a")["metadata"]["labels"]["team"] == "llm"
    assert "managedFields" not in cache.get("team-a")["metadata"]
    assert cache.get("nope") is None
    assert len(cache) == 2


def test_watch_events_are_applied(stub, make_cache):
    cache = make_cache()
    assert cache.wait_synced(5)
    eventually(lambda: stub.open_watches == 1)
    stub.add("team-b", annotations={"gpu-webhook.io/queue": "research"})
    eventually(lambda: cache.get("team-b") is not None)
    assert cache.get("team-b")["metadata"]["annotations"] == {"gpu-webhook.io/queue": "research"}
    stub.modify("team-a", labels={"team": "vision"})
    eventually(lambda: cache.get("team-a")["metadata"]["labels"] == {"team": "vision"})
    stub.delete("kube-system")
    eventually(lambda: cache.get("kube-system") is None)
    assert stub.requests.count("list") == 1  # all of it through one watch


def test_410_event_in_an_open_watch_relists_and_drops_what_was_missed(stub, make_cache):
    cache = make_cache()
    assert cache.wait_synced(5)
    eventually(lambda: stub.open_watches == 1)
    stub.forget("kube-system")  # its DELETED event is lost to compaction
    stub.expire_watches()
    eventually(lambda: stub.requests.count("list") == 2)
    eventually(lambda: cache.get("kube-system") is None)
    assert cache.get("team-a") is not None
    assert cache.synced  # stays usable throughout


def test_resume_from_a_compacted_version_gets_410_then_relists(stub, make_cache):
    cache = make_cache()
    assert cache.wait_synced(5)
    eventually(lambda: stub.open_watches == 1)
    stub.forget("kube-system")  # compacts past the cache's last version
    stub.drop_watches()  # the cache resumes from that version, which is now too old
    eventually(lambda: stub.requests.count("list") == 2)
    eventually(lambda: cache.get("kube-system") is None)  # once the second list's answer is applied
    stub.add("team-c")
    eventually(lambda: cache.get("team-c") is not None)


def test_dropped_watch_resumes_from_the_last_version_without_relisting(stub, make_cache):
    cache = make_cache()
    assert cache.wait_synced(5)
    eventually(lambda: stub.open_watches == 1)
    stub.add("team-b")
    eventually(lambda: cache.get("team-b") is not None)
    stub.drop_watches()
    eventually(lambda: len([r for r in stub.requests if r.startswith("watch")]) == 2)
    first, second = [r for r in stub.requests if r.startswith("watch")]
    assert int(second.split("=")[1]) > int(first.split("=")[1])  # resumed after team-b's event
    assert stub.requests.count("list") == 1


def test_server_errors_are_retried_with_backoff(stub, make_cache):
    stub.fail_next(3)
    cache = make_cache()
    assert cache.wait_synced(5)
    assert stub.requests[:4] == ["fail", "fail", "fail", "list"]
    assert cache.get("team-a") is not None


def test_unreachable_server_leaves_the_cache_unsynced_and_stop_works(caplog):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cache = NamespaceCache(api_client(f"http://127.0.0.1:{port}"), backoff_initial=0.01, backoff_max=0.05)
    caplog.set_level(logging.WARNING, logger="webhook.kube")
    before = set(threading.enumerate())
    cache.start()
    (thread,) = started_threads(before)
    # three failed lists, each logged with its retry: the cache tried and stayed unsynced
    eventually(lambda: sum("retrying in" in r.getMessage() for r in caplog.records) >= 3)
    assert not cache.synced
    assert cache.get("team-a") is None
    cache.stop()
    assert not thread.is_alive()


def test_stop_interrupts_an_open_watch_promptly(stub, make_cache):
    before = set(threading.enumerate())
    cache = make_cache(watch_timeout=300)
    (thread,) = started_threads(before)
    assert cache.wait_synced(5)
    eventually(lambda: stub.open_watches == 1)
    started = time.monotonic()
    cache.stop()
    assert time.monotonic() - started < 2
    assert not thread.is_alive()


def test_engine_reads_namespace_context_from_the_cache(stub, make_cache, tmp_path):
    """onMissingContext applies until the cache is synced; then the namespace's annotation is used."""
    rules = load_rules("rules/kueue-queue-name.yaml").ruleset
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-b"},
        "spec": {"template": {"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
    }
    unsynced = NamespaceCache(api_client(stub.url))  # never started
    decision = evaluate(rules, AdmissionInput(object=job, namespace="team-b", namespace_object=unsynced.get("team-b")))
    assert decision.patch == []
    assert "no namespace context" in decision.trace[0].reason

    cache = make_cache()
    stub.add("team-b", annotations={"gpu-webhook.io/queue": "research"})
    eventually(lambda: cache.get("team-b") is not None)
    decision = evaluate(rules, AdmissionInput(object=job, namespace="team-b", namespace_object=cache.get("team-b")))
    assert {
        "op": "add",
        "path": "/metadata/labels",
        "value": {"kueue.x-k8s.io/queue-name": "research"},
    } in decision.patch
