"""The `kueueQueues` table (webhook/engine/kueue.py) from Kueue objects, whole, partial and broken."""

from __future__ import annotations

from typing import Any

from webhook.engine import AdmissionInput, queue_table
from webhook.engine.request import cluster_context

KUEUE = "kueue.x-k8s.io/v1beta1"


def local(name: str, cluster_queue: Any, namespace: str | None = "team-a") -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": metadata, "spec": {"clusterQueue": cluster_queue}}


def cluster_queue(name: str, *groups: tuple[list[str], list[str]]) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {"coveredResources": covered, "flavors": [{"name": f, "resources": []} for f in flavors]}
                for covered, flavors in groups
            ]
        },
    }


def flavor(name: str, labels: Any = None, taints: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if labels is not None:
        spec["nodeLabels"] = labels
    if taints is not None:
        spec["nodeTaints"] = taints
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def test_a_queue_lists_its_cluster_queue_s_flavors_in_order_with_their_groups() -> None:
    taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    table = queue_table(
        [local("gpu", "shared")],
        {"shared": cluster_queue("shared", (["cpu", "memory"], ["cpu-nodes"]), (["nvidia.com/gpu"], ["a100", "h100"]))},
        {"cpu-nodes": flavor("cpu-nodes", {"pool": "cpu"}), "a100": flavor("a100", {"gpu": "a100"}, [taint])},
    )
    assert table == {
        "gpu": {
            "clusterQueue": "shared",
            "flavors": [
                {
                    "name": "cpu-nodes",
                    "coveredResources": ["cpu", "memory"],
                    "nodeLabels": {"pool": "cpu"},
                    "nodeTaints": [],
                },
                {
                    "name": "a100",
                    "coveredResources": ["nvidia.com/gpu"],
                    "nodeLabels": {"gpu": "a100"},
                    "nodeTaints": [taint],
                },
                # a flavor the ClusterQueue names that does not exist: no labels (Kueue marks the queue inactive)
                {"name": "h100", "coveredResources": ["nvidia.com/gpu"], "nodeLabels": {}, "nodeTaints": []},
            ],
        }
    }


def test_what_is_missing_or_broken_is_left_out_and_never_raises() -> None:
    broken: list[Any] = [
        local("no-cq", None),
        local("missing-cq", "nowhere"),
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": "team-a"}},  # no name
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": "garbage", "spec": []},
        "not an object",
        local("odd", "odd"),
    ]
    odd = {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "odd"}, "spec": {"resourceGroups": [
        "garbage", {"coveredResources": "cpu", "flavors": [{"name": 7}, {"name": "x"}, None]}]}}  # fmt: skip
    flavors = {"x": flavor("x", {"ok": "yes", "number": 3, "none": None}, "garbage")}
    table = queue_table(broken, {"odd": odd}, flavors)
    assert table == {
        "no-cq": {"clusterQueue": "", "flavors": []},
        "missing-cq": {"clusterQueue": "nowhere", "flavors": []},
        "odd": {
            "clusterQueue": "odd",
            "flavors": [{"name": "x", "coveredResources": [], "nodeLabels": {"ok": "yes"}, "nodeTaints": []}],
        },
    }


def test_offline_doors_take_the_namespace_s_queues_from_the_objects_they_read() -> None:
    objects = [
        local("gpu", "gpu-only"),
        local("gpu", "other", namespace="team-b"),  # another namespace's queue of the same name
        local("plain", "gpu-only", namespace=None),  # no namespace: the door's, as kubectl -n gives it
        {"apiVersion": "example.com/v1", "kind": "LocalQueue", "metadata": {"name": "impostor"}, "spec": {}},
        cluster_queue("gpu-only", (["cpu"], ["a100"])),
        flavor("a100", {"nvidia.com/gpu.present": "true"}),
    ]
    context = cluster_context(objects, "team-a")
    assert context.kueue_queues is not None
    assert sorted(context.kueue_queues) == ["gpu", "plain"]
    assert context.kueue_queues["gpu"]["clusterQueue"] == "gpu-only"
    # no Kueue object at all: unknown, not "no queues"
    assert (
        cluster_context([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}], "team-a").kueue_queues
        is None
    )
    admission = AdmissionInput.offline({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}},
                                       cluster_objects=objects)  # fmt: skip
    assert admission.kueue_queues == context.kueue_queues
