"""GPU node agents run: a DCGM exporter DaemonSet that sets NVIDIA_VISIBLE_DEVICES=all without a GPU request.

Sources: NVIDIA/dcgm-exporter deployment/examples/dcgm-exporter.yaml and the chart's
templates/daemonset.yaml (a DaemonSet, no GPU request: it reads every GPU of its node through the
kubelet's pod-resources socket); the GPU Operator's operands set NVIDIA_VISIBLE_DEVICES=all the same
way (DESIGN §5). The DaemonSet controller creates one pod per eligible node
(kubernetes pkg/controller/daemon, as `system:serviceaccount:kube-system:daemon-set-controller`);
taints and tolerations: kubernetes.io docs, concepts/scheduling-eviction/taint-and-toleration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.conftest import GpuWebhook, Tenant
from tests.cluster.workloads import IMAGE, event_lines, running_pods
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster

GPU_NODES = ["gpu-node-1", "gpu-node-2", "mig-node-1"]


def dcgm_exporter() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "dcgm-exporter",
                            "image": IMAGE,
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }


def test_a_dcgm_exporter_daemonset_in_a_platform_namespace_runs_on_every_gpu_node(
    cluster: Cluster, gpu_webhook: GpuWebhook
) -> None:
    """`observability` is no tenant namespace and in no hard-coded list: the DaemonSet was refused
    ("sets NVIDIA_VISIBLE_DEVICES without requesting a GPU"). Now the DaemonSet is stored and the
    DaemonSet controller's pods (owned by it, created by that controller) run on the three NVIDIA nodes."""
    cluster.env.create_namespace("observability")
    body = {**dcgm_exporter(), "metadata": {**dcgm_exporter()["metadata"], "namespace": "observability"}}
    made = cluster.env.request("POST", "/apis/apps/v1/namespaces/observability/daemonsets", body)
    assert made.ok, made.message
    running = running_pods(cluster, "observability", "app.kubernetes.io/name=dcgm-exporter", 3)
    assert sorted(p["spec"]["nodeName"] for p in running) == GPU_NODES
    assert not [e for e in event_lines(cluster, "observability") if "FailedCreate" in e]


def test_the_same_daemonset_in_a_tenant_namespace_is_refused(tenant: Callable[..., Tenant]) -> None:
    """A tenant may create DaemonSets (the `edit` role) and set every field of them: no node agent there."""
    team = tenant("team-agents")
    refused = team.create(dcgm_exporter())
    assert refused.status == 403, refused.body
    assert "no-visible-devices-without-gpu" in refused.message
