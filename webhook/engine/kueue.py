"""Kueue's queues as rules read them: the CEL `kueueQueues`, a namespace's LocalQueues by name.

Each entry says where Kueue admits what is submitted to that LocalQueue: its ClusterQueue and, in
the ClusterQueue's order, the ResourceFlavors it may assign, each with the resources its resource
group covers and the flavor's nodeLabels and nodeTaints. Kueue's flavor assignment gives a pod set,
for each resource it requests, a flavor of the resource group that covers that resource, trying the
group's flavors in order; admission then merges the flavor's nodeLabels into the pod template's
nodeSelector (kubernetes-sigs/kueue apis/kueue/v1beta1 clusterqueue_types.go `ResourceGroup`,
resourceflavor_types.go `ResourceFlavorSpec`; pkg/scheduler/flavorassigner/flavorassigner.go;
pkg/podset/podset.go `Merge`). So a LocalQueue whose flavors for `cpu` all carry GPU-node labels
puts every workload it admits, a GPU-less one too, on GPU nodes.

Built from the objects as the API serves them (kueue.x-k8s.io/v1beta1; anything else is skipped);
a LocalQueue whose ClusterQueue is not there has no flavors, a flavor that is not there no labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .pointer import is_map

GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the label a workload names its LocalQueue with
KINDS = ("LocalQueue", "ClusterQueue", "ResourceFlavor")


def queue_table(
    local_queues: Iterable[Any], cluster_queues: Mapping[str, Any], flavors: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """LocalQueue name -> {clusterQueue, flavors: [{name, coveredResources, nodeLabels, nodeTaints}]}:
    `local_queues` those of one namespace, the ClusterQueues and ResourceFlavors by name."""
    table: dict[str, dict[str, Any]] = {}
    for local in local_queues:
        name = _name(local)
        if name is None:
            continue
        target = _spec(local).get("clusterQueue")
        target = target if isinstance(target, str) else ""
        table[name] = {"clusterQueue": target, "flavors": _flavors(cluster_queues.get(target), flavors)}
    return table


def _flavors(cluster_queue: Any, flavors: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = []
    for group in _list(_spec(cluster_queue).get("resourceGroups")):
        covered = [r for r in _list(_map(group).get("coveredResources")) if isinstance(r, str)]
        for entry in _list(_map(group).get("flavors")):
            name = _map(entry).get("name")
            if not isinstance(name, str):
                continue
            spec = _spec(flavors.get(name))
            labels = {k: v for k, v in _map(spec.get("nodeLabels")).items() if isinstance(v, str)}
            taints = [t for t in _list(spec.get("nodeTaints")) if is_map(t)]
            found.append({"name": name, "coveredResources": covered, "nodeLabels": labels, "nodeTaints": taints})
    return found


def by_name(objects: Iterable[Any], kind: str) -> dict[str, Any]:
    """The Kueue objects of one kind among `objects`, by name."""
    return {name: obj for obj in objects if is_kueue(obj, kind) and (name := _name(obj)) is not None}


def is_kueue(obj: Any, kind: str | None = None) -> bool:
    """A Kueue object of `kind` (any of KINDS without it), as the API serves it."""
    if not is_map(obj) or not str(obj.get("apiVersion", "")).startswith(GROUP + "/"):
        return False
    return obj.get("kind") == kind if kind is not None else obj.get("kind") in KINDS


def _name(obj: Any) -> str | None:
    name = _map(_map(obj).get("metadata")).get("name")
    return name if isinstance(name, str) and name else None


def _spec(obj: Any) -> Mapping[str, Any]:
    return _map(_map(obj).get("spec"))


def _map(value: Any) -> Mapping[str, Any]:
    return value if is_map(value) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
