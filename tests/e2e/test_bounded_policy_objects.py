"""What a namespace user can write is bounded before the webhook does any work (issue 34, point 4), on a
real kube-apiserver with the shipped CRDs (manifests/base/crds.yaml) and the rendered webhooks.

The apiserver validates a custom resource against its CRD's openAPIV3Schema in the registry's
BeforeCreate/BeforeUpdate, before the validating admission webhooks are called (kubernetes/kubernetes,
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go: `rest.BeforeCreate` then
`createValidation`), so an object over a `maxItems` never reaches `/policies`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import WebhookServer, gpu_pod
from tests.e2e.test_policy_objects import API, GROUP_VERSION, crds, wait_for  # noqa: F401 (crds: a fixture)
from tests.support import RULES, make_review
from tests.support.envtest import EnvTest, free_port, log_tail, spawn, terminate

NAMESPACE = "e2e-bounded-exceptions"


@pytest.fixture(scope="module", autouse=True)
def namespace(apiserver: EnvTest) -> str:
    apiserver.create_namespace(NAMESPACE)
    return NAMESPACE


def exception(name: str, rules: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"rules": rules, "reason": "bounded e2e"},
    }


@pytest.mark.usefixtures("crds")
def test_an_oversized_exception_is_refused_by_the_apiserver_before_the_webhook(
    apiserver: EnvTest, webhook_server: WebhookServer
) -> None:
    """The attack of issue 34 failure 1: 45,000 near-miss rule names, 1.2 MB, as a dry run."""
    # the webhook is called for an exception of normal size: the count below can move
    before = webhook_server.answered("policies")
    small = apiserver.create(exception("e2e-small", ["gpu-container-resources"]), dry_run=True)
    assert small.ok, small.body
    wait_for("the /policies check counted", lambda: webhook_server.answered("policies") > before, timeout=5)

    names = [f"gpu-container-resourcez-{i:05d}" for i in range(45_000)]
    oversized = exception("e2e-oversized", names)
    size = len(str(oversized))
    assert size > 1_200_000
    checked = webhook_server.answered("policies")
    answer = apiserver.create(oversized, dry_run=True)
    assert answer.status == 422, (answer.status, str(answer.body)[:500])
    assert answer.body["reason"] == "Invalid"
    assert "spec.rules: Too many: 45000: must have at most 128 items" in answer.message, answer.message[:500]
    assert webhook_server.answered("policies") == checked, "the webhook was called for an oversized exception"

    # strings and maps too: a reason of 1 KiB + 1, a selector of 65 labels
    long_reason = exception("e2e-long-reason", ["gpu-container-resources"])
    long_reason["spec"]["reason"] = "x" * 1025
    answer = apiserver.create(long_reason, dry_run=True)
    assert answer.status == 422 and "spec.reason: Too long" in answer.message, answer.message
    many_labels = exception("e2e-many-labels", ["gpu-container-resources"])
    many_labels["spec"]["match"] = {"objectSelector": {"matchLabels": {f"k{i}": "v" for i in range(65)}}}
    answer = apiserver.create(many_labels, dry_run=True)
    assert answer.status == 422 and "must have at most 64 items" in answer.message, answer.message
    long_key = exception("e2e-long-key", ["gpu-container-resources"])
    long_key["spec"]["match"] = {"objectSelector": {"matchLabels": {"k" * 318: "v"}}}
    answer = apiserver.create(long_key, dry_run=True)
    assert answer.status == 422 and "keys are at most 317 characters" in answer.message, answer.message
    assert webhook_server.answered("policies") == checked


def raw_create(apiserver: EnvTest, body: dict[str, Any]) -> tuple[int, dict[str, Any], str | None]:
    """A dry-run create as the admin, with the answer's Retry-After header (EnvTest.request keeps Warning only)."""
    namespace = body["metadata"].get("namespace")
    collection = f"namespaces/{namespace}/gpupolicyexceptions" if namespace else "gpupolicies"
    url = f"{apiserver.url}{API}/{collection}?dryRun=All"
    call = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {apiserver.token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(apiserver.ca_file))
    try:
        with urllib.request.urlopen(call, timeout=30, context=context) as answer:
            return answer.status, json.loads(answer.read()), answer.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get("Retry-After")


@pytest.mark.usefixtures("crds")
def test_a_burst_of_policy_checks_gets_429_with_retry_after_and_admits_nothing_unchecked(apiserver: EnvTest) -> None:
    """12 concurrent GPUPolicies whose CEL does not compile (each check a lint of the pack, ~0.5 s): each is
    refused, checked (422) or, past the 4 places of the platform's lane, at once with the apiserver's own
    429 and a Retry-After header client-go honours. (An exception's check takes milliseconds: a burst of
    them fills its lane only by luck; tests/server/test_policy_turns.py fills it by namespace.)"""
    bad = [
        {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicy",
            "metadata": {"name": f"e2e-burst-{i}"},
            "spec": {
                "match": {"kinds": ["Pod"]},
                "validate": {"expression": "object.metadata.name ==", "message": "x"},
            },
        }
        for i in range(12)
    ]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda body: raw_create(apiserver, body), bad))
    statuses = sorted(status for status, _, _ in answers)
    assert all(status in (422, 429) for status in statuses), statuses  # never 201: nothing admitted unchecked
    busy = [(body, retry) for status, body, retry in answers if status == 429]
    assert busy, f"the queue never filled: {statuses}"
    assert 422 in statuses, statuses  # and the ones checked were refused for their content
    for body, retry in busy:
        assert retry is not None and int(retry) >= 1
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == int(retry)
        assert "policies.gpu-webhook.io" in body["message"] and "was not checked: retry in" in body["message"]


def serve_with_limit(apiserver: EnvTest, tmp_path: Path, limit: int) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    """A second `gpu-webhook serve` watching the cluster with --max-exceptions-per-namespace `limit` (not
    registered: it is asked directly, as the apiserver would ask it)."""
    port, metrics = free_port(), free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
    command = [sys.executable, "-m", "webhook.cli", "serve", "--port", str(port), "--cert-dir", str(tmp_path / "tls")]
    command += ["--metrics-port", str(metrics), "--rules", str(RULES), "--namespaces", "watch"]
    command += ["--kubeconfig", str(apiserver.kubeconfig), "--max-exceptions-per-namespace", str(limit)]
    process = spawn([*command, "--shutdown-timeout", "1"], log, env)
    return process, port, metrics, log


def not_applied(metrics_port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpu_webhook_exceptions_not_applied"
        for sample in family.samples
    }


def ask(port: int, cert_dir: Path, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    context.check_hostname = False
    call = urllib.request.Request(
        f"https://127.0.0.1:{port}/{endpoint}",
        data=json.dumps(review).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(call, timeout=10, context=context) as answer:
        return dict(json.loads(answer.read())["response"])


@pytest.mark.usefixtures("crds")
def test_a_namespace_over_the_bound_has_its_newest_exceptions_not_applied(apiserver: EnvTest, tmp_path: Path) -> None:
    """Three exceptions stored (the session's server allows 64) and a server that applies 2 per namespace: the
    two oldest apply, the newest lifts nothing though its name sorts first, the metric counts it, and that
    server's /policies refuses a fourth."""
    namespace = "e2e-exception-bound"
    apiserver.create_namespace(namespace)
    created = []
    for name in ("z-oldest", "m-middle", "a-newest"):  # creationTimestamp has second precision
        body = exception(name, ["gpu-container-resources"])
        body["metadata"]["namespace"] = namespace
        body["spec"]["match"] = {"names": [f"pod-{name}"]}
        made = apiserver.create(body)
        assert made.ok, made.body
        created.append(made.body)
        time.sleep(1.1)
    process, port, metrics, log = serve_with_limit(apiserver, tmp_path, 2)
    try:
        wait_for(f"the bound seen\n{log_tail(log, 40)}", lambda: not_applied(metrics).get("over_limit") == 1, 40)
        assert not_applied(metrics)["invalid"] == 0
        for name, allowed in (("z-oldest", True), ("m-middle", True), ("a-newest", False)):
            pod = gpu_pod(f"pod-{name}", namespace)
            resources = pod["spec"]["containers"][0]["resources"]
            del resources["limits"]["memory"], resources["requests"]["memory"]  # gpu-container-resources denies
            answer = ask(port, tmp_path / "tls", "validate", make_review(pod, namespace=namespace))
            assert answer["allowed"] is allowed, (name, answer)
            if not allowed:
                assert "[gpu-container-resources]" in answer["status"]["message"]
        fourth = exception("fourth", ["gpu-container-resources"])
        fourth["metadata"]["namespace"] = namespace
        answer = ask(port, tmp_path / "tls", "policies", make_review(fourth, namespace=namespace))
        assert answer["allowed"] is False and answer["status"]["code"] == 403
        assert f"namespace {namespace} already has 3 GPUPolicyExceptions" in answer["status"]["message"]
    finally:
        terminate(process, timeout=10)
        for made in created:
            apiserver.request("DELETE", f"{API}/namespaces/{namespace}/gpupolicyexceptions/{made['metadata']['name']}")
    assert "past the limit of 2 not applied: a-newest" in log.read_text()
