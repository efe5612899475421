"""`kueueQueues` from the server's watch caches on a cluster with Kueue v0.13.1's own CRDs and objects.

The table (webhook/engine/kueue.py) is read from LocalQueues, ClusterQueues and ResourceFlavors as the
apiserver serves them (kueue.x-k8s.io/v1beta1, validated and defaulted by Kueue's CRDs and webhooks),
so the field names are the real ones: LocalQueue spec.clusterQueue, ClusterQueue
spec.resourceGroups[].coveredResources and .flavors[].name, ResourceFlavor spec.nodeLabels and
spec.nodeTaints. A change to a flavor reaches the table through the watch, without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import Queues, Tenant
from tests.cluster.workloads import wait_for
from tests.support.cluster import Cluster
from webhook.kube import ClusterCaches

pytestmark = pytest.mark.cluster
FLAVORS = "/apis/kueue.x-k8s.io/v1beta1/resourceflavors"


@pytest.fixture
def caches(cluster: Cluster) -> Iterator[ClusterCaches]:
    with cluster.env.api_client() as client:
        caches = ClusterCaches(client, dra=False, exceptions=False)
        caches.start()
        try:
            yield caches
        finally:
            caches.stop()


def test_the_gpu_only_queue_is_read_from_kueue_s_objects_and_follows_a_flavor_change(
    cluster: Cluster, queues: Queues, tenant: Callable[..., Tenant], caches: ClusterCaches
) -> None:
    team = tenant("team-gpu-only", cluster_queue=queues.gpu_only)
    assert caches.kueue is not None

    def table() -> dict | None:
        found = caches.context(team.namespace).kueue_queues
        return found if found and team.queue in found else None

    queue = wait_for("the LocalQueue in the table", table)[team.queue]
    (flavor,) = queue["flavors"]
    assert queue["clusterQueue"] == queues.gpu_only
    assert flavor["name"] == "nvidia-gpu"
    assert flavor["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert flavor["nodeLabels"] == {"nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "false"}
    assert caches.synced_for(frozenset({"kueueQueues"}))
    assert caches.context("no-such-namespace").kueue_queues == {}  # no LocalQueue there
    assert all(cache.status()["served"] for cache in caches.kueue.caches)

    stored = cluster.get(f"{FLAVORS}/nvidia-gpu")
    labels = dict(stored["spec"]["nodeLabels"])
    try:
        stored["spec"]["nodeLabels"] = {**labels, "node.example.com/tier": "gold"}
        answer = cluster.env.request("PUT", f"{FLAVORS}/nvidia-gpu", stored)
        assert answer.ok, answer.message

        def changed() -> bool | None:
            found = caches.context(team.namespace).kueue_queues or {}
            labels_now = found.get(team.queue, {}).get("flavors", [{}])[0].get("nodeLabels", {})
            return True if labels_now.get("node.example.com/tier") == "gold" else None

        wait_for("the flavor's new label in the table", changed, timeout=30)
    finally:
        current = cluster.get(f"{FLAVORS}/nvidia-gpu")
        current["spec"]["nodeLabels"] = labels
        assert cluster.env.request("PUT", f"{FLAVORS}/nvidia-gpu", current).ok
