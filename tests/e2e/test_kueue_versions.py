"""The Kueue caches on a real apiserver when Kueue is missing, and when it is there in a version the
server does not read (kueue.x-k8s.io/v1beta1 is what it lists: Kueue v0.13's API).

No Kueue: a 404, read as "no queues" (synced, `served: false`), quietly. Kueue serving only another
version of the group (a later release that dropped v1beta1): the same 404 on v1beta1, but the group is
in the apiserver's discovery (GET /apis/kueue.x-k8s.io), so the cache says so (`problem`, an error
log line) instead of reporting "no queues" as if Kueue were absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.envtest import SKIP_REASON, EnvTest, assets_dir
from webhook.kube.caches import KueueQueues


@pytest.fixture(scope="module")
def apiserver() -> Iterator[EnvTest]:
    if assets_dir() is None:
        pytest.skip(SKIP_REASON)
    with EnvTest.start() as env:
        yield env


def local_queues_crd(version: str) -> dict[str, Any]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "localqueues.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "localqueues", "singular": "localqueue", "kind": "LocalQueue"},
            "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def wait(what: str, condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_no_kueue_is_no_queues_and_kueue_in_another_version_is_said(
    apiserver: EnvTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webhook.kube.caches.KueueCache.absent_retry", 0.3)
    with apiserver.api_client() as client:
        kueue = KueueQueues(client)
        for cache in kueue.caches:
            cache.start()
        try:
            wait("the three listed", lambda: kueue.synced)
            assert kueue.table("team-a") == {}
            assert [c.status()["served"] for c in kueue.caches] == [False, False, False]
            assert [c.status()["problem"] for c in kueue.caches] == [None, None, None]

            made = apiserver.create(local_queues_crd("v1beta2"))  # a Kueue that serves only v1beta2
            assert made.ok, made.body
            wait("the LocalQueue cache says why it reads nothing", lambda: kueue.local.problem != "")
            problem = kueue.local.status()["problem"]
            assert "kueue.x-k8s.io/v1beta1 is not served, but kueue.x-k8s.io is (v1beta2)" in problem
            assert kueue.table("team-a") == {}  # still synced: what it reads is no queues, and it says so
        finally:
            for cache in kueue.caches:
                cache.stop()
