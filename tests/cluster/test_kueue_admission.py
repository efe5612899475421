"""Kueue's admission of GPU Jobs in a whole cluster, with gpu-webhook's queue injection in front of it.

Sources: Kueue's job integration (kubernetes-sigs/kueue pkg/controller/jobs/job/job_controller.go:
`Suspend` sets `spec.suspend`, `RunWithPodSetsInfo` unsuspends and merges each pod set's info into
the template through `podset.Merge`, pkg/podset/podset.go), the reconciler that admits and starts
a workload (pkg/controller/jobframework/reconciler.go), flavor assignment in the order a
ClusterQueue lists its flavors (Kueue docs, concepts/cluster_queue "Flavors and resources"), and
preemption `withinClusterQueue: LowerPriority` (the same page, "Preemption").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.conftest import Tenant
from tests.cluster.workloads import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    delete,
    event_lines,
    is_true,
    job,
    node_labels,
    running_pods,
    wait_for,
    workload_of,
)
from tests.support.cluster import Cluster, dumps

pytestmark = pytest.mark.cluster


def test_a_gpu_job_is_queued_suspended_admitted_and_runs_on_nvidia_gpu_nodes(
    cluster: Cluster, tenant: Callable[..., Tenant]
) -> None:
    """The queue label comes from the namespace (kueue-queue-name), the Job is stored suspended
    (DESIGN §5: injected with `spec.suspend: true`, Kueue's job webhook would suspend it too),
    Kueue admits its Workload on the nvidia-gpu flavor within quota, resumes it, and its two
    pods run on the two NVIDIA GPU nodes (gpu-toleration's toleration, the flavor's nodeLabels)."""
    team = tenant("team-admit")
    made = team.create(job("train", gpus=8, pods=2))
    assert made.ok, made.message
    stored = made.body
    assert stored["metadata"]["labels"][QUEUE_LABEL] == team.queue
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["labels"][PRIORITY_LABEL] == "training-batch"

    admitted = wait_for(
        "the Workload admitted",
        lambda: w if is_true(w := workload_of(cluster, team.namespace, "train"), "Admitted") else None,
        explain=lambda: dumps(workload_of(cluster, team.namespace, "train")),
    )
    flavors = admitted["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert flavors["nvidia.com/gpu"] == "nvidia-gpu"

    running = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=train", 2)
    nodes = sorted(p["spec"]["nodeName"] for p in running)
    assert nodes == ["gpu-node-1", "gpu-node-2"], nodes
    for pod in running:
        assert node_labels(cluster, pod["spec"]["nodeName"])["nvidia.com/gpu.present"] == "true"
        assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.present"] == "true"
        assert any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
        assert pod["spec"]["priorityClassName"] == "gpu-batch"
    job_now = cluster.get(team.path("batch/v1", "Job", "train"))
    assert job_now["spec"]["suspend"] is False
    assert not [e for e in event_lines(cluster, team.namespace) if "FailedCreate" in e]
    delete(cluster, team.path("batch/v1", "Job", "train"))
