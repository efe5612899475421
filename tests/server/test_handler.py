"""The server's handlers in process, through pytest-aiohttp's client: the fast loop's view of the door.

The transport's whole job: read the body within its limits, call the pipeline, map the answer to
HTTP and metrics. What only a socket shows (TLS, handshakes, idle and stalled connections,
draining on SIGTERM) is tested against a live server in test_admission_https.py and tests/reliability.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.support import RULES, cpu_pod, gpu_pod, make_review
from webhook.engine import Mode
from webhook.server.app import STATE, ServerConfig, ServerState, build_app
from webhook.server.metrics import Metrics
from webhook.server.reload import RuleStore

Client = Callable[..., Awaitable[TestClient]]


def state_with(rules: list[str], **settings: Any) -> ServerState:
    metrics = Metrics()
    store = RuleStore(paths=rules, metrics=metrics)
    assert store.load(), store.errors
    config = ServerConfig(rules=rules, cert_dir="unused", mode=Mode.ENFORCE, **settings)
    return ServerState(config=config, rules=store, certs=None, metrics=metrics)


@pytest.fixture
async def client(aiohttp_client: Client) -> TestClient:
    return await aiohttp_client(build_app(state_with([str(RULES)])))


def counted(state: ServerState, name: str, **labels: str) -> float:
    value = state.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_a_gpu_pod_is_patched_and_counted(client: TestClient) -> None:
    review = make_review(gpu_pod())
    answer = await client.post("/mutate", json=review)
    assert answer.status == 200
    body = await answer.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert body["response"]["uid"] == review["request"]["uid"]
    assert body["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(body["response"]["patch"]))
    assert {
        "op": "add",
        "path": "/spec/tolerations",
        "value": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    } in patch
    state = client.app[STATE]
    assert (
        counted(
            state, "gpu_webhook_requests_total", endpoint="mutate", operation="CREATE", kind="Pod", decision="patched"
        )
        == 1
    )


async def test_a_denial_names_the_rule_and_no_patch_comes_from_validate(client: TestClient) -> None:
    pod = cpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    answer = await (await client.post("/validate", json=make_review(pod))).json()
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "no-visible-devices-without-gpu" in response["status"]["message"]
    assert "patch" not in response


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{", 400, "malformed AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', 400, "request.uid"),
        (b"[]", 400, "malformed AdmissionReview"),
    ],
)
async def test_bad_input_gets_a_clear_error_and_the_server_keeps_serving(
    client: TestClient, body: bytes, status: int, words: str
) -> None:
    answer = await client.post("/validate", data=body, headers={"Content-Type": "application/json"})
    assert answer.status == status
    assert words in (await answer.json())["error"]
    state = client.app[STATE]
    assert counted(state, "gpu_webhook_bad_requests_total", code=str(status)) >= 1
    assert (await client.post("/validate", json=make_review(gpu_pod()))).status == 200


async def test_a_body_declared_too_large_is_refused_from_its_header(client: TestClient) -> None:
    answer = await client.post(
        "/validate", data=b"{}", headers={"Content-Type": "application/json", "Content-Length": str(4 * 1024 * 1024)}
    )
    assert answer.status == 413


async def test_too_many_large_requests_at_once_get_a_429_to_retry(aiohttp_client: Client) -> None:
    state = state_with([str(RULES)], max_large_requests=0)  # every large request is one too many
    client = await aiohttp_client(build_app(state))
    review = json.dumps(make_review(gpu_pod())).encode()
    large = review + b" " * (state.config.offload_threshold + 1)
    answer = await client.post("/validate", data=large, headers={"Content-Type": "application/json"})
    assert answer.status == 429 and answer.headers["Retry-After"] == "1"
    small = await client.post("/validate", data=review, headers={"Content-Type": "application/json"})
    assert small.status == 200


async def test_health_readiness_and_metrics(client: TestClient) -> None:
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200
    detail = await ready.json()
    assert detail["rules"]["loaded"] is True and detail["rules"]["count"] > 0
    metrics = await (await client.get("/metrics")).text()
    assert "gpu_webhook_rules_loaded" in metrics and "gpu_webhook_requests_total" in metrics
