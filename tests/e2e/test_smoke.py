"""The harness end to end: the webhooks as `gpu-webhook manifests` renders them, called by a real kube-apiserver.

Each request is a server-side dry run (`?dryRun=All`): defaulting, the built-in admission plugins,
both webhook configurations (registration rules and matchConditions included) and validation all
run, and nothing is stored.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import TENANT_LABEL, WebhookServer, gpu_pod
from tests.support.envtest import EnvTest

NAMESPACE = "team-smoke"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def tenant(apiserver: EnvTest, webhooks: list[str]) -> str:
    """A tenant namespace set up as docs/operations.md section 11 describes (tenant label, team, cost centre)."""
    apiserver.create_namespace(NAMESPACE, {TENANT_LABEL: "true", "team": "smoke", "cost-center": "cc-4711"})
    return NAMESPACE


def test_the_webhooks_are_installed_as_rendered_but_for_their_client_config(
    apiserver: EnvTest, webhooks: list[str], manifests: list[dict[str, Any]], webhook_server: WebhookServer
) -> None:
    rendered = {
        f"{d['kind']}/{d['metadata']['name']}": d for d in manifests if d["kind"].endswith("WebhookConfiguration")
    }
    assert sorted(webhooks) == sorted(rendered)
    for name, document in rendered.items():
        path = apiserver.resource_path(document["apiVersion"], document["kind"]) + "/" + document["metadata"]["name"]
        stored = apiserver.request("GET", path)
        assert stored.ok, stored.body
        assert [w["name"] for w in stored.body["webhooks"]] == [w["name"] for w in document["webhooks"]], name
        for want, got in zip(document["webhooks"], stored.body["webhooks"], strict=True):
            # every rendered field as rendered (the apiserver only adds defaults, e.g. objectSelector: {})
            assert {k: got.get(k) for k in want if k != "clientConfig"} == {
                k: v for k, v in want.items() if k != "clientConfig"
            }, f"{name} {want['name']}"
            assert got["clientConfig"] == {
                "url": f"{webhook_server.url}{want['clientConfig']['service']['path']}",
                "caBundle": want["clientConfig"]["caBundle"],  # same CA: the 127.0.0.1 cert is signed by it
            }


def test_a_gpu_pod_gets_the_gpu_toleration_and_the_namespace_labels(apiserver: EnvTest, tenant: str) -> None:
    answer = apiserver.dry_run_create(gpu_pod("trainer", tenant))

    assert answer.status == 201, answer.body
    tolerations = answer.body["spec"]["tolerations"]
    assert GPU_TOLERATION in tolerations
    # appended to what DefaultTolerationSeconds added before the webhook ran, not in place of it
    assert {t["key"] for t in tolerations} >= {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    # gpu-cost-labels read the Namespace through the server's watch of this apiserver (--kubeconfig)
    assert answer.body["metadata"]["labels"]["team"] == "smoke"
    assert answer.body["metadata"]["labels"]["cost-center"] == "cc-4711"


def test_visible_devices_without_a_gpu_is_denied_naming_the_rules(apiserver: EnvTest, tenant: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sneaky", "namespace": tenant},
        "spec": {
            "containers": [
                {"name": "shell", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
            ]
        },
    }

    answer = apiserver.dry_run_create(pod)

    assert answer.status == 403, answer.body
    assert answer.body["kind"] == "Status" and answer.body["code"] == 403
    message = answer.message
    assert message.startswith('admission webhook "validate.gpu-webhook.io" denied the request: '), message
    assert "[no-visible-devices-without-gpu] pod sneaky: container shell sets NVIDIA_VISIBLE_DEVICES" in message
    assert "[no-device-env-in-tenants] pod sneaky: container shell sets NVIDIA_VISIBLE_DEVICES" in message
