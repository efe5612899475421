"""The policy objects' watch caches against a cluster without the CRDs (tests/support/kubestub.py answers
404, as an apiserver does for a resource it does not serve), and what counts as a change of the rules.

A cluster that serves them, and CRDs installed while the server runs, are tested on a real
kube-apiserver: tests/e2e/test_policy_objects.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.support.kubestub import KubeStub
from webhook.engine import AdmissionInput
from webhook.kube import ClusterCaches
from webhook.kube.policies import PolicyCaches, spec_version


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


def test_without_the_crds_the_caches_are_synced_and_empty(stub: KubeStub) -> None:
    caches = PolicyCaches(api_client(stub.url), absent_retry=0.05, backoff_initial=0.01)
    caches.start()
    try:
        assert caches.wait_synced(5)
        assert caches.objects() == []
        detail = caches.detail()
        assert {name: d["served"] for name, d in detail.items()} == {"gpupolicy": False, "gpupolicyoverlay": False}
        # it keeps listing now and then (a CRD installed later is found without a restart: the e2e test)
        # and stays synced and empty meanwhile
        time.sleep(0.2)
        assert caches.synced and caches.objects() == [] and not caches.policies.stale
    finally:
        caches.stop()


def test_without_the_exception_crd_an_admission_has_no_exceptions(stub: KubeStub) -> None:
    caches = ClusterCaches(api_client(stub.url), dra=False, backoff_initial=0.01)
    caches.start()
    try:
        assert caches.namespaces.wait_synced(5)
        assert caches.exceptions is not None and caches.exceptions.wait_synced(5)
        admission = AdmissionInput(object={"kind": "Pod"}, namespace="team-a")
        caches.fill(admission)
        assert admission.exceptions == ()
        assert caches.detail()["gpupolicyexception"]["served"] is False
    finally:
        caches.stop()


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
