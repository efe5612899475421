"""Kueue's own writes to a tenant's workload are never refused, and a tenant cannot pass for Kueue.

Sources: Kueue v0.13.1 pkg/controller/jobs/job/job_controller.go `RunWithPodSetsInfo` (unsuspends
the Job and calls `podset.Merge` on its template), pkg/podset/podset.go `FromAssignment` (the
assigned flavors' `nodeLabels` become the pod set's nodeSelector, their `tolerations` its
tolerations) and `Merge` (adds them to the template's nodeSelector, tolerations, labels,
annotations, schedulingGates); pkg/controller/jobframework/reconciler.go (a Job whose start
fails stays suspended with its quota reserved and is retried). The Job controller creates the
pods from that template (kubernetes pkg/controller/job, as `system:serviceaccount:kube-system:job-controller`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.conftest import GpuWebhook, Queues, Tenant
from tests.cluster.workloads import (
    QUEUE_LABEL,
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


def knows_every_local_queue(cluster: Cluster, gpu_webhook: GpuWebhook) -> bool | None:
    """Whether the server's LocalQueue watch holds as many as the cluster stores: a LocalQueue made a
    moment before a Job is known to the rules only once its watch event arrived."""
    stored = len(cluster.get("/apis/kueue.x-k8s.io/v1beta1/localqueues")["items"])
    caches = gpu_webhook.readyz()["namespaces"]["caches"]
    return True if caches["localqueue"]["objects"] >= stored else None


def test_kueue_resumes_a_gpu_less_job_it_admitted_on_the_gpu_flavor(
    cluster: Cluster, gpu_webhook: GpuWebhook, queues: Queues, tenant: Callable[..., Tenant]
) -> None:
    """A GPU-less Job in a queue whose ClusterQueue has only the nvidia-gpu flavor: Kueue admits it
    there and resumes it with the flavor's nodeLabels and toleration merged into the template, an
    UPDATE from Kueue's ServiceAccount that cpu-pods-off-gpu-nodes judged as if the tenant had
    written it ("selects GPU nodes"): the Job stayed suspended, holding quota. Now the resume is
    stored, and the Job controller's pods (the template's placement) are created and run."""
    team = tenant("team-gpu-only", cluster_queue=queues.gpu_only)
    wait_for("the server's LocalQueue watch caught up", lambda: knows_every_local_queue(cluster, gpu_webhook))
    made = team.create(job("cpu-only", labels={QUEUE_LABEL: team.queue}))
    assert made.ok, made.message
    assert made.body["spec"]["suspend"] is True
    # the tenant is told at create, as kubectl prints it (cpu-workload-in-gpu-only-queue, read from
    # the server's Kueue caches: the LocalQueue, its ClusterQueue and the nvidia-gpu flavor's nodeLabels)
    (warning,) = [w for w in made.warnings if "[cpu-workload-in-gpu-only-queue]" in w]
    assert f"LocalQueue {team.queue} (ClusterQueue {queues.gpu_only}) admits it only onto GPU nodes" in warning
    assert "(nvidia-gpu) select GPU nodes" in warning

    wait_for(
        "the Workload admitted",
        lambda: True if is_true(workload_of(cluster, team.namespace, "cpu-only"), "Admitted") else None,
        explain=lambda: dumps(workload_of(cluster, team.namespace, "cpu-only")),
    )

    def resumed() -> dict | None:
        current = cluster.get(team.path("batch/v1", "Job", "cpu-only"))
        return current if current["spec"].get("suspend") is False else None

    stored = wait_for(
        "Kueue's resume of the Job stored",
        resumed,
        timeout=30,
        explain=lambda: gpu_webhook.logs() + "\n" + cluster.logs("kueue", 10),
    )
    template = stored["spec"]["template"]["spec"]
    assert template["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    running = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=cpu-only", 1)
    assert node_labels(cluster, running[0]["spec"]["nodeName"]).get("nvidia.com/gpu.present") == "true"
    assert not [e for e in event_lines(cluster, team.namespace) if "FailedCreate" in e]


def test_a_gpu_less_job_in_a_queue_that_tries_a_cpu_flavor_first_is_not_warned_and_runs_off_gpu_nodes(
    cluster: Cluster, gpu_webhook: GpuWebhook, queues: Queues, tenant: Callable[..., Tenant]
) -> None:
    """The counterpart: the tenants ClusterQueue's one resource group lists the cpu flavor first, so
    Kueue assigns it to a GPU-less Job (flavorassigner: the group's flavors in order) and the pods run
    on a CPU node; nothing to warn about."""
    team = tenant("team-cpu-first")
    wait_for("the server's LocalQueue watch caught up", lambda: knows_every_local_queue(cluster, gpu_webhook))
    made = team.create(job("etl", labels={QUEUE_LABEL: team.queue}))
    assert made.ok, made.message
    assert not [w for w in made.warnings if "cpu-workload-in-gpu-only-queue" in w], made.warnings
    running = running_pods(cluster, team.namespace, "batch.kubernetes.io/job-name=etl", 1)
    assert node_labels(cluster, running[0]["spec"]["nodeName"]).get("nvidia.com/gpu.present") is None
