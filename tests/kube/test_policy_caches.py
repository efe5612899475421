"""The policy objects' watch caches against a cluster without the CRDs (tests/support/kubestub.py answers
404, as an apiserver does for a resource it does not serve), access lost after the first list, and what
counts as a change of the rules.

A cluster that serves them, and CRDs installed while the server runs, are tested on a real
kube-apiserver: tests/e2e/test_policy_objects.py.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.kubestub import KubeStub
from webhook.kube import ClusterCaches, rest
from webhook.kube.policies import POLICY, PolicyCaches, PolicyObjectCache, spec_version


@pytest.fixture
def stub() -> Iterator[KubeStub]:
    server = KubeStub().start()
    server.add("team-a")
    yield server
    server.stop()


def api_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def test_without_the_crds_a_replica_that_uses_them_never_counts_them_synced(stub: KubeStub) -> None:
    """`serve --policies cluster|both`: a 404 is not "no policies"; the kind is unavailable, and says what to do."""
    caches = PolicyCaches(api_client(stub.url), absent_retry=0.05, backoff_initial=0.01)
    caches.start()
    try:
        assert caches.wait_answered(5)
        time.sleep(0.2)  # it lists again now and then, and stays unsynced meanwhile
        assert not caches.synced and caches.objects() == []
        unavailable = caches.unavailable()
        assert sorted(unavailable) == ["GPUPolicy", "GPUPolicyOverlay"]
        assert unavailable["GPUPolicy"].startswith("gpupolicies.gpu-webhook.io is not served by this cluster (HTTP 404")
        assert "install the CRDs" in unavailable["GPUPolicy"] and "--policies files" in unavailable["GPUPolicy"]
        detail = caches.detail()
        assert {name: d["served"] for name, d in detail.items()} == {"gpupolicy": False, "gpupolicyoverlay": False}
        assert caches.degraded() == {}
    finally:
        caches.stop()


def test_without_the_crds_policies_auto_has_none_and_is_synced(stub: KubeStub) -> None:
    """`serve --policies auto` (absent_ok): a cluster without the CRDs simply has no policy objects."""
    caches = PolicyCaches(api_client(stub.url), absent_ok=True, absent_retry=0.05, backoff_initial=0.01)
    caches.start()
    try:
        assert caches.wait_synced(5)
        time.sleep(0.2)
        assert caches.synced and caches.objects() == [] and not caches.policies.stale
        assert caches.unavailable() == {} and caches.degraded() == {}
    finally:
        caches.stop()


def test_the_exception_cache_is_an_input_of_the_policy_caches(stub: KubeStub) -> None:
    """Without the exception CRD, a replica that uses the policy kinds is not ready for want of it too;
    an admission meanwhile has no exceptions (stricter, never weaker)."""
    context = ClusterCaches(api_client(stub.url), dra=False, backoff_initial=0.01)
    caches = PolicyCaches(api_client(stub.url), exceptions=context.exceptions, absent_retry=0.05)
    context.start()
    try:
        assert context.namespaces.wait_synced(5)
        assert context.exceptions is not None and context.exceptions.wait_answered(5)
        assert "GPUPolicyException" in caches.unavailable()
        assert caches.kinds() == ["GPUPolicy", "GPUPolicyOverlay", "GPUPolicyException"]
        assert context.context("team-a").exceptions == ()
        assert context.detail()["gpupolicyexception"]["served"] is False
    finally:
        context.stop()


def test_a_one_shot_list_reads_a_kind_not_served_as_none(stub: KubeStub) -> None:
    """`audit --cluster` (list_once): a cluster without the CRDs has no policy objects to judge with."""
    caches = PolicyCaches(api_client(stub.url)).load()
    assert caches.synced and caches.objects() == [] and caches.unavailable() == {}


def test_access_lost_after_the_first_list_keeps_the_objects_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """RBAC revoked while serving: the watch is refused, the list again too; the last objects stay."""
    listed = {"kind": "GPUPolicyList", "metadata": {"resourceVersion": "10"}, "items": [policy(1)]}
    answers: list[Any] = [listed, ApiException(status=403, reason="Forbidden")]

    def fake_get(_api: Any, path: str, query: Any = None, timeout: Any = None) -> Any:
        if query and ("watch", "true") in query:
            raise ApiException(status=403, reason="Forbidden")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer

        class Response:
            data = json.dumps(answer).encode()

        return Response()

    monkeypatch.setattr(rest, "get", fake_get)
    cache = PolicyObjectCache(None, POLICY, absent_retry=0.05, backoff_initial=0.01)  # type: ignore[arg-type]
    cache.start()
    try:
        assert cache.wait_synced(5)
        deadline = time.monotonic() + 5
        while not cache.problem and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cache.problem.startswith("listing gpupolicies.gpu-webhook.io is forbidden (HTTP 403)")
        time.sleep(0.2)  # listed again (and refused) meanwhile
        assert cache.synced and [o["metadata"]["name"] for o in cache.objects()] == ["p"]
    finally:
        cache.stop()


def test_a_cluster_that_does_not_answer_keeps_the_kind_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_get(_api: Any, path: str, query: Any = None, timeout: Any = None) -> Any:
        raise TimeoutError("read timed out")

    monkeypatch.setattr(rest, "get", fake_get)
    caches = PolicyCaches(None, backoff_initial=0.01, backoff_max=0.05)  # type: ignore[arg-type]
    caches.start()
    try:
        deadline = time.monotonic() + 5
        while len(caches.unavailable()) < 2 or "not listed yet" in caches.unavailable().values():
            assert time.monotonic() < deadline, caches.unavailable()
            time.sleep(0.02)
        assert caches.unavailable()["GPUPolicy"] == "no answer to the list: TimeoutError: read timed out"
        assert not caches.synced and not caches.wait_answered(0.1)  # no answer: serve waits its 10 s, then loads
    finally:
        caches.stop()


def test_a_broken_watch_is_reported_until_a_list_answers_again(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = {"kind": "GPUPolicyList", "metadata": {"resourceVersion": "10"}, "items": [policy(1)]}
    watches = {"count": 0}
    problems: list[str] = []

    def fake_get(_api: Any, path: str, query: Any = None, timeout: Any = None) -> Any:
        if query and ("watch", "true") in query:
            watches["count"] += 1
            if watches["count"] == 1:
                raise ConnectionResetError("the apiserver went away")
            problems.append(cache.problem)  # the list before this watch answered
            time.sleep(0.05)
            raise ConnectionResetError("again")
        if watches["count"] == 1:
            broken.append(cache.problem)  # the list after the break: what the replica reported meanwhile

        class Response:
            data = json.dumps(listed).encode()

        return Response()

    broken: list[str] = []
    monkeypatch.setattr(rest, "get", fake_get)
    cache = PolicyObjectCache(None, POLICY, backoff_initial=0.01, backoff_max=0.01)  # type: ignore[arg-type]
    cache.start()
    try:
        deadline = time.monotonic() + 5
        while not problems and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broken == ["the watch broke: ConnectionResetError: the apiserver went away"]
        assert problems and problems[0] == ""  # listed again after the break: cleared
        assert cache.synced and [o["metadata"]["name"] for o in cache.objects()] == ["p"]
    finally:
        cache.stop()


def policy(generation: int, **metadata: Any) -> dict[str, Any]:
    return {
        "kind": "GPUPolicy",
        "metadata": {"name": "p", "uid": "u1", "generation": generation, "resourceVersion": "5", **metadata},
        "spec": {"action": "Deny"},
    }


def test_a_change_of_the_rules_is_a_new_generation_labels_or_annotations_not_a_status() -> None:
    first = spec_version([policy(1)])
    status_written = policy(1, resourceVersion="6")
    status_written["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert spec_version([status_written]) == first
    assert spec_version([policy(2)]) != first
    assert spec_version([policy(1, annotations={"gpu-webhook.io/description": "new"})]) != first
    recreated = copy.deepcopy(policy(1))
    recreated["metadata"]["uid"] = "u2"
    assert spec_version([recreated]) != first
