"""A tenant trying to reach GPUs it did not ask for, through every door we have (engine and HTTPS)."""

from __future__ import annotations

import pytest

from tests.support import LiveServer, cpu_pod, make_review

GPU_NODE_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ATTEMPTS = {
    "tolerates the GPU taint": {"tolerations": [GPU_NODE_TOLERATION]},
    "tolerates every taint": {"tolerations": [{"operator": "Exists"}]},
    "selects GPU nodes": {"nodeSelector": {"nvidia.com/gpu.present": "true"}},
    "requires GPU nodes by affinity": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "Exists"}]}
                    ]
                }
            }
        }
    },
}


@pytest.mark.parametrize("spec", ATTEMPTS.values(), ids=ATTEMPTS.keys())
async def test_gpu_less_pod_cannot_land_on_gpu_nodes(live_server: LiveServer, spec: dict) -> None:
    answer = await live_server.review("validate", make_review(cpu_pod(**spec)))
    assert answer["response"]["allowed"] is False
    assert "cpu-pods-off-gpu-nodes" in answer["response"]["status"]["message"]


@pytest.mark.parametrize("value", ["all", "0", "GPU-0b8e6c1a"])
async def test_gpu_less_container_cannot_see_gpus_through_the_runtime(live_server: LiveServer, value: str) -> None:
    pod = cpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
    answer = await live_server.review("validate", make_review(pod))
    assert answer["response"]["allowed"] is False
    assert "no-visible-devices-without-gpu" in answer["response"]["status"]["message"]
