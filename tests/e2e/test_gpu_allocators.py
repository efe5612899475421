"""A KAI Scheduler fractional pod through the real kube-apiserver and the rendered webhooks.

The pod is what KAI's own webhook leaves (NVIDIA/KAI-Scheduler pkg/binder/plugins/gpusharing/
gpu_sharing.go Mutate, pkg/binder/common/gpu_access.go AddVisibleDevicesEnvVars): a `gpu-fraction`
annotation, `schedulerName: kai-scheduler`, no nvidia.com/gpu, and NVIDIA_VISIBLE_DEVICES /
GPU_PORTION as configMapKeyRefs to the ConfigMap named after `runai/shared-gpu-configmap`
(pkg/binder/common/gpusharingconfigmap/config_map.go). It is admitted in a tenant namespace; the same
annotation on a pod that writes NVIDIA_VISIBLE_DEVICES=all itself is denied.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import TENANT_LABEL
from tests.support.envtest import EnvTest

NAMESPACE = "team-kai"
PREFIX = "frac-k3x9q2z-shared-gpu"


@pytest.fixture(scope="module")
def tenant(apiserver: EnvTest, webhooks: list[str]) -> str:
    apiserver.create_namespace(NAMESPACE, {TENANT_LABEL: "true", "team": "kai", "cost-center": "cc-1"})
    return NAMESPACE


def kai_pod(name: str, env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kai.scheduler/queue": "default-queue"},
            "annotations": {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": PREFIX},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:13.0.2-base-ubi8",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "4Gi"}},
                    "env": env,
                    "envFrom": [{"configMapRef": {"name": f"{PREFIX}-0-evar"}}],
                },
                {"name": "logger", "image": "fluent-bit:3"},
            ],
        },
    }


def from_kai(variable: str) -> dict[str, Any]:
    return {"name": variable, "valueFrom": {"configMapKeyRef": {"name": f"{PREFIX}-0", "key": variable}}}


def test_a_kai_fractional_pod_is_admitted_in_a_tenant_namespace(apiserver: EnvTest, tenant: str) -> None:
    answer = apiserver.dry_run_create(
        kai_pod("fraction", [from_kai("NVIDIA_VISIBLE_DEVICES"), from_kai("GPU_PORTION")])
    )

    assert answer.status == 201, answer.body
    main, logger = answer.body["spec"]["containers"]
    # KAI's entries are left as KAI wrote them; the CPU sidecar is hidden from every GPU
    assert main["env"] == [from_kai("NVIDIA_VISIBLE_DEVICES"), from_kai("GPU_PORTION")]
    assert logger["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    # a GPU pod to the registration too (the GPU-only entry's matchCondition sends pods of KAI's
    # scheduler): gpu-cost-labels labels it from the Namespace as any GPU pod
    assert answer.body["metadata"]["labels"]["team"] == "kai"


def test_kais_devices_count_toward_the_per_pod_ceiling(apiserver: EnvTest, tenant: str) -> None:
    pod = kai_pod("many", [from_kai("NVIDIA_VISIBLE_DEVICES")])
    pod["metadata"]["annotations"]["gpu-fraction-num-devices"] = "9"

    answer = apiserver.dry_run_create(pod)

    assert answer.status == 403, answer.body
    assert "[gpu-per-pod-ceiling] pod many requests 9 GPUs; at most 8 per pod" in answer.message


def test_kais_annotation_does_not_let_a_pod_write_nvidia_visible_devices(apiserver: EnvTest, tenant: str) -> None:
    answer = apiserver.dry_run_create(kai_pod("copycat", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))

    assert answer.status == 403, answer.body
    assert "[no-visible-devices-without-gpu] pod copycat: container main sets NVIDIA_VISIBLE_DEVICES itself" in (
        answer.message
    )
    assert "[no-device-env-in-tenants] pod copycat: container main sets NVIDIA_VISIBLE_DEVICES" in answer.message
