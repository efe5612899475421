"""Why the tenant mutating entry is sent every tenant pod CREATE, checked on a real kube-apiserver.

A matchCondition that skipped a pod whose every container already has NVIDIA_VISIBLE_DEVICES (the
pod a controller makes from a template the webhook patched) would save that pod the /mutate call
(docs/performance.md, "The CPU pod"). But the apiserver reinvokes only the webhooks it called in the
first round (k8s.io/apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go: a webhook is added
to the reinvocable set after callAttrMutatingHook), so a container that a later-sorting webhook
injects (a service-mesh sidecar) would never get the variable. Sent every time, as the registration
sends it, the webhook is reinvoked and gives it the variable. This test keeps that reason true: if an
apiserver release reinvokes skipped webhooks too, it fails, and the condition (8b2f9e4) can return.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.envtest import SKIP_REASON, EnvTest, assets_dir, free_port, log_tail, spawn, terminate
from webhook.certs import CA_FILE, generate_bundle, write_bundle

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "e2e-reinvocation"
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
# what the condition would have been: send only a pod with a container lacking the variable
LACKS = "object.spec.containers.exists(c, !(has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES')))"


@pytest.fixture(scope="module")
def injector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bytes]]:
    """bench/noop_server.py answering the pod `voided` with a sidecar (idempotent: the list replaced)."""
    directory = tmp_path_factory.mktemp("injector")
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), directory)
    containers = [{"name": "main", "image": "app:1", "env": [VOID]}, {"name": "proxy", "image": "mesh/proxy:1"}]
    patches = directory / "patches.json"
    patches.write_text(json.dumps({"voided": [{"op": "replace", "path": "/spec/containers", "value": containers}]}))
    port = free_port()
    command = [sys.executable, "-m", "bench.noop_server", "--port", str(port), "--cert-dir", str(directory)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = spawn([*command, "--patch-file", str(patches)], directory / "injector.log", env)
    try:
        deadline = time.monotonic() + 30
        while True:  # listening once a TCP connection is accepted
            assert child.poll() is None, log_tail(directory / "injector.log")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log_tail(directory / "injector.log")
                time.sleep(0.1)
        yield port, (directory / CA_FILE).read_bytes()
    finally:
        terminate(child)


def webhook(name: str, url: str, ca: bytes, conditions: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "timeoutSeconds": 2,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
                "matchConditions": conditions,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            }
        ],
    }


def test_a_webhook_skipped_in_the_first_round_is_not_reinvoked(injector: tuple[int, bytes]) -> None:
    if assets_dir() is None:
        pytest.skip(SKIP_REASON)
    port, ca = injector
    nowhere = f"https://127.0.0.1:{free_port()}/nowhere"  # called: "failed calling webhook"
    with EnvTest.start() as api:
        api.create_namespace(NAMESPACE)
        # "a-void" sorts before "b-injector", as gpu-webhook-mutating before a mesh's injector
        for body in (
            webhook("a-void", nowhere, ca, [{"name": "env-missing", "expression": LACKS}]),
            webhook("b-injector", f"https://127.0.0.1:{port}/mutate", ca, []),
        ):
            assert api.create(body).ok
        voided = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "voided", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main", "image": "app:1", "env": [VOID]}]},
        }
        deadline = time.monotonic() + 20
        while not ((answer := api.dry_run_create(voided)).ok and len(answer.body["spec"]["containers"]) == 2):
            assert "void.example.com" not in answer.message, "the skipped webhook was reinvoked: 8b2f9e4 may return"
            assert time.monotonic() < deadline, f"the injector never answered: {answer.status} {answer.message}"
            time.sleep(0.3)
        proxy = answer.body["spec"]["containers"][1]
        assert proxy["name"] == "proxy" and "env" not in proxy  # the injected sidecar never got the variable
        bare = {**voided, "spec": {"containers": [{"name": "main", "image": "app:1"}]}}
        assert "a-void.example.com" in api.dry_run_create(bare).message  # the condition sends the others
