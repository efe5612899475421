"""The collection limit through the server's handlers (pytest-aiohttp): it refuses what is costly to
evaluate and nothing else (webhook/engine/limits.py, webhook/cel/iterated.py).

A list no rule maps or filters (a Job's 1,200 arguments, a pod's 5,000 labels) is converted and
walked in linear time: the object is admitted under failurePolicy Fail whatever its shape. A list
a rule does map (a GPU pod's 1,200 containers, which every container rule filters) still gets the
"too large to evaluate" refusal, fast.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.server.test_handler import Client, state_with
from tests.support import RULES, gpu_pod, make_review
from webhook.server.app import build_app


@pytest.fixture
async def client(aiohttp_client: Client) -> TestClient:
    return await aiohttp_client(build_app(state_with([str(RULES)])))


def cpu_job(arguments: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "python:3.12",
                            "args": [f"--param-{i}=x" for i in range(arguments)],
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                        }
                    ],
                }
            }
        },
    }


async def _answer(client: TestClient, endpoint: str, obj: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(endpoint, json=make_review(obj))
    assert answer.status == 200
    response: dict[str, Any] = (await answer.json())["response"]
    return response


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("arguments", [1200, 20000])
async def test_a_cpu_job_with_many_arguments_is_admitted(client: TestClient, endpoint: str, arguments: int) -> None:
    response = await _answer(client, endpoint, cpu_job(arguments))
    assert response["allowed"] is True, response.get("status")


async def test_a_gpu_pod_with_many_arguments_and_labels_is_admitted(client: TestClient) -> None:
    pod = gpu_pod()
    pod["metadata"]["labels"] = {f"sweep.example.com/k{i}": "v" for i in range(5000)}
    pod["spec"]["containers"][0]["args"] = [f"--lr-{i}" for i in range(5000)]
    for endpoint in ("/mutate", "/validate"):
        response = await _answer(client, endpoint, pod)
        assert "too large" not in response.get("status", {}).get("message", ""), response


async def test_a_pod_whose_containers_rules_filter_is_refused_fast(client: TestClient) -> None:
    pod = gpu_pod()
    container = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(5000)]
    started = time.perf_counter()
    response = await _answer(client, "/validate", pod)
    elapsed = time.perf_counter() - started
    assert response["allowed"] is False
    assert "/spec/containers holds 5000 items" in response["status"]["message"]
    assert elapsed < 2.0  # unlimited, the pack's filters over 5,000 containers take seconds (bench/limits.py)
