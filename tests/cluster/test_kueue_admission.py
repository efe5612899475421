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
    condition,
    delete,
    event_lines,
    is_true,
    job,
    node_labels,
    pods,
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


def admitted_workload(cluster: Cluster, namespace: str, name: str, timeout: float = 60.0) -> dict:
    return wait_for(
        f"the Workload of {namespace}/{name} admitted",
        lambda: w if is_true(w := workload_of(cluster, namespace, name), "Admitted") else None,
        timeout,
        explain=lambda: dumps(workload_of(cluster, namespace, name)),
    )


def test_mig_and_amd_jobs_run_on_their_vendor_nodes(cluster: Cluster, tenant: Callable[..., Tenant]) -> None:
    """Flavors are tried in the ClusterQueue's order and the first with quota for every resource of
    the pod set wins (Kueue docs, concepts/cluster_queue "Flavors and resources"): a MIG slice
    (`nvidia.com/mig-1g.10gb`, the mixed strategy's resource) goes to nvidia-mig, an AMD GPU to
    amd-gpu. The pods land on the MIG node and the AMD node, each tolerating its vendor's taint
    (gpu-toleration's per-vendor table)."""
    team = tenant("team-vendors")
    for name, resource in (("mig", "nvidia.com/mig-1g.10gb"), ("amd", "amd.com/gpu")):
        made = team.create(job(name, gpus=2, resource=resource))
        assert made.ok, made.message
    mig = admitted_workload(cluster, team.namespace, "mig")
    amd = admitted_workload(cluster, team.namespace, "amd")
    assert mig["status"]["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/mig-1g.10gb"] == "nvidia-mig"
    assert amd["status"]["admission"]["podSetAssignments"][0]["flavors"]["amd.com/gpu"] == "amd-gpu"
    (mig_pod,) = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=mig", 1)
    (amd_pod,) = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=amd", 1)
    assert mig_pod["spec"]["nodeName"] == "mig-node-1"
    assert node_labels(cluster, "mig-node-1")["nvidia.com/mig.strategy"] == "mixed"
    assert amd_pod["spec"]["nodeName"] == "amd-node-1"
    assert any(t.get("key") == "amd.com/gpu" for t in amd_pod["spec"]["tolerations"])
    assert not any(t.get("key") == "nvidia.com/gpu" for t in amd_pod["spec"]["tolerations"])
    for name in ("mig", "amd"):
        delete(cluster, team.path("batch/v1", "Job", name))


def test_a_job_over_quota_waits_suspended_until_quota_frees(cluster: Cluster, tenant: Callable[..., Tenant]) -> None:
    """16 GPUs of quota: a 16-GPU Job is admitted, an 8-GPU Job of the same priority waits
    (no preemption of an equal priority, `withinClusterQueue: LowerPriority`), suspended, with no
    pods; when the first Job goes, the second is admitted and runs."""
    team = tenant("team-quota")
    assert team.create(job("big", gpus=8, pods=2)).ok
    admitted_workload(cluster, team.namespace, "big")
    running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=big", 2)
    assert team.create(job("waits", gpus=8)).ok

    def pending() -> dict | None:
        workload = workload_of(cluster, team.namespace, "waits")
        reserved = condition(workload, "QuotaReserved")
        return workload if reserved is not None and reserved["status"] == "False" else None

    waiting = wait_for("the second Workload pending for quota", pending, 30)
    assert not is_true(waiting, "Admitted")
    assert cluster.get(team.path("batch/v1", "Job", "waits"))["spec"]["suspend"] is True
    assert not pods(cluster, team.namespace, "batch.kubernetes.io/job-name=waits")

    delete(cluster, team.path("batch/v1", "Job", "big"))
    admitted_workload(cluster, team.namespace, "waits")
    running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=waits", 1)
    delete(cluster, team.path("batch/v1", "Job", "waits"))


def test_priority_preemption_evicts_the_lower_workload(cluster: Cluster, tenant: Callable[..., Tenant]) -> None:
    """A training Job (training-batch, injected by kueue-priority-class) holds all 16 GPUs; a Job the
    tenant labels serving-critical (allowed by kueue-priority-class-allowed) preempts it: Kueue
    evicts the lower Workload (condition Evicted, reason Preempted), suspends its Job (its pods go),
    and admits the higher one, whose pod runs on a GPU node (Kueue docs, concepts/preemption)."""
    team = tenant("team-preempt")
    assert team.create(job("low", gpus=8, pods=2)).ok
    admitted_workload(cluster, team.namespace, "low")
    running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=low", 2)
    high = team.create(job("high", gpus=8, labels={PRIORITY_LABEL: "serving-critical"}))
    assert high.ok, high.message
    assert high.body["metadata"]["labels"][PRIORITY_LABEL] == "serving-critical"

    evicted = wait_for(
        "the low Workload evicted",
        lambda: w if is_true(w := workload_of(cluster, team.namespace, "low"), "Evicted") else None,
        60,
        explain=lambda: dumps(workload_of(cluster, team.namespace, "low")),
    )
    assert condition(evicted, "Evicted")["reason"] == "Preempted"
    admitted_workload(cluster, team.namespace, "high")
    (pod,) = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=high", 1, timeout=90)
    assert pod["spec"]["nodeName"] in ("gpu-node-1", "gpu-node-2")
    assert cluster.get(team.path("batch/v1", "Job", "low"))["spec"]["suspend"] is True
    for name in ("low", "high"):
        delete(cluster, team.path("batch/v1", "Job", name))
