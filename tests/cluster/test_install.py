"""The rendered Deployment of gpu-webhook placed by the real scheduler on the layer's nodes.

manifests/base/deployment.yaml says where its replicas go and why: off GPU nodes (their taint, which
the pod does not tolerate, and a preferred node affinity for untainted ones), one per node
(topology spread across hostnames, DoNotSchedule), and `nodeTaintsPolicy: Honor`, without which the
tainted GPU nodes count as domains with 0 replicas and block a second replica on a small cluster
(TopologySpreadConstraint.nodeTaintsPolicy:
https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/). The layer's
cluster has 2 untainted CPU nodes and 4 tainted GPU nodes (tests/support/cluster.py NODES).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.cluster.conftest import WEBHOOK_NAMESPACE, GpuWebhook
from tests.cluster.workloads import delete, event_lines, pods, running_pods, wait_for
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster
CPU_NODES = {"cpu-node-1", "cpu-node-2"}


def rendered_deployment(gpu_webhook: GpuWebhook, name: str) -> dict[str, Any]:
    (deployment,) = [copy.deepcopy(d) for d in gpu_webhook.manifests if d["kind"] == "Deployment"]
    deployment["metadata"]["name"] = name
    # its own pods: a label the selector, the template and the spread constraints all carry
    for where in (deployment["spec"]["selector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]):
        where["test.gpu-webhook.io/deployment"] = name
    for constraint in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        constraint["labelSelector"]["matchLabels"]["test.gpu-webhook.io/deployment"] = name
    return deployment


def test_three_replicas_run_one_per_cpu_node_and_never_on_a_gpu_node(cluster: Cluster, gpu_webhook: GpuWebhook) -> None:
    deployment = rendered_deployment(gpu_webhook, "gpu-webhook-placed")
    path = f"/apis/apps/v1/namespaces/{WEBHOOK_NAMESPACE}/deployments/gpu-webhook-placed"
    selector = "test.gpu-webhook.io/deployment=gpu-webhook-placed"
    assert deployment["spec"]["replicas"] == 3
    cluster.apply(deployment)
    try:
        placed = running_pods(cluster, WEBHOOK_NAMESPACE, selector, 3, timeout=90)
        nodes = [p["spec"]["nodeName"] for p in placed]
        assert set(nodes) == CPU_NODES, nodes  # both CPU nodes, no GPU node: 2 + 1, a skew of 1
    finally:
        delete(cluster, path)
        wait_for("its pods gone", lambda: True if not pods(cluster, WEBHOOK_NAMESPACE, selector) else None, 60)


def test_without_honoring_taints_the_gpu_nodes_would_hold_a_replica_pending(
    cluster: Cluster, gpu_webhook: GpuWebhook
) -> None:
    """The counterfactual of the manifest's comment: the same Deployment with the default policy (Ignore)."""
    deployment = rendered_deployment(gpu_webhook, "gpu-webhook-ignoring")
    for constraint in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        if constraint["topologyKey"] == "kubernetes.io/hostname":
            constraint["nodeTaintsPolicy"] = "Ignore"
    path = f"/apis/apps/v1/namespaces/{WEBHOOK_NAMESPACE}/deployments/gpu-webhook-ignoring"
    selector = "test.gpu-webhook.io/deployment=gpu-webhook-ignoring"
    cluster.apply(deployment)
    try:

        def refused() -> list[str] | None:
            found = [
                line
                for line in event_lines(cluster, WEBHOOK_NAMESPACE)
                if "gpu-webhook-ignoring" in line and "FailedScheduling" in line and "topology spread" in line
            ]
            return found or None

        wait_for("a replica refused by the spread constraint", refused, 60)
        phases = sorted(p["status"].get("phase", "") for p in pods(cluster, WEBHOOK_NAMESPACE, selector))
        assert phases.count("Pending") >= 1, phases
    finally:
        delete(cluster, path)
        wait_for("its pods gone", lambda: True if not pods(cluster, WEBHOOK_NAMESPACE, selector) else None, 60)
