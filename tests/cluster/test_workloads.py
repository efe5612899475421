"""Workloads of each kind get Running pods, and CPU workloads never land on GPU nodes.

A rule that admits a workload's template but refuses the pods its controller makes from it would
show as FailedCreate events and missing pods, not as a refusal anyone sees: the controllers create
the pods as their own ServiceAccounts (kubernetes pkg/controller/replicaset, statefulset, job).
Kueue's deployment and statefulset integrations gate each pod (`kueue.x-k8s.io/admission`) and
ungate it once admitted, adding the flavor's nodeSelector (kubernetes-sigs/kueue
pkg/controller/jobs/pod/pod_controller.go `RunWithPodSetsInfo`, pod_webhook.go). A GPU-less pod
without a GPU toleration cannot be scheduled onto a node with the GPU taint (kubernetes.io docs,
concepts/scheduling-eviction/taint-and-toleration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.conftest import Tenant
from tests.cluster.workloads import (
    QUEUE_LABEL,
    deployment,
    event_lines,
    job,
    node_labels,
    running_pods,
    statefulset,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster

GPU_NODES = {"gpu-node-1", "gpu-node-2", "mig-node-1", "amd-node-1"}


def _no_failed_creates(cluster: Cluster, namespace: str) -> None:
    failed = [e for e in event_lines(cluster, namespace) if "FailedCreate" in e or "denied" in e]
    assert not failed, failed


@pytest.mark.parametrize(
    ("kind", "make", "selector"),
    [
        ("Deployment", deployment, "app=serve"),
        ("StatefulSet", statefulset, "app=serve"),
        ("Job", job, "batch.kubernetes.io/job-name=serve"),
    ],
)
def test_a_gpu_workload_of_each_kind_gets_running_pods_on_gpu_nodes(
    cluster: Cluster, tenant: Callable[..., Tenant], kind: str, make: Callable[..., dict[str, Any]], selector: str
) -> None:
    """The webhook injects the queue label into the workload; Kueue admits it (a Job by resuming it,
    a Deployment's or StatefulSet's pods by ungating them); every pod the controller makes is
    admitted by the webhook and Running on an NVIDIA GPU node, with no FailedCreate event."""
    team = tenant(f"team-kind-{kind.lower()}")
    body = make("serve", gpus=1, **({"pods": 2} if kind == "Job" else {"replicas": 2}))
    made = team.create(body)
    assert made.ok, made.message
    assert made.body["metadata"]["labels"][QUEUE_LABEL] == team.queue
    running = running_pods(cluster, team.namespace, selector, 2, timeout=90)
    for pod in running:
        assert pod["spec"]["nodeName"] in ("gpu-node-1", "gpu-node-2"), pod["spec"]["nodeName"]
        assert node_labels(cluster, pod["spec"]["nodeName"])["nvidia.com/gpu.present"] == "true"
    _no_failed_creates(cluster, team.namespace)


def test_cpu_workloads_never_land_on_gpu_nodes(cluster: Cluster, tenant: Callable[..., Tenant]) -> None:
    """A CPU Deployment without a queue (6 replicas, more than the CPU nodes) and a CPU Job in the
    tenants' queue (admitted on the cpu flavor, listed first) run only on the CPU nodes; a CPU pod
    that asks for the GPU taint's toleration itself is refused (cpu-pods-off-gpu-nodes)."""
    team = tenant("team-cpu")
    assert team.create(deployment("web", replicas=6)).ok
    assert team.create(job("etl", pods=2, labels={QUEUE_LABEL: team.queue})).ok
    pods = running_pods(cluster, team.namespace, "app=web", 6) + running_pods(
        cluster, team.namespace, "batch.kubernetes.io/job-name=etl", 2
    )
    placed = {p["spec"]["nodeName"] for p in pods}
    assert placed <= {"cpu-node-1", "cpu-node-2"}, placed
    assert not placed & GPU_NODES
    sneaky = deployment("sneaky")
    sneaky["spec"]["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    refused = team.create(sneaky)
    assert refused.status == 403 and "cpu-pods-off-gpu-nodes" in refused.message, refused.body
    _no_failed_creates(cluster, team.namespace)
