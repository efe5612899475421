"""Workloads as tenants write them, and the waits that read what the cluster did with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tests.support.cluster import Cluster, ClusterError, dumps, retry

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
IMAGE = "registry.example.com/train@sha256:" + "1" * 64
T = TypeVar("T")


def container(gpus: int = 0, resource: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    """One container with small CPU and memory (a hollow node has 1 CPU and 3840Mi) and `gpus` of `resource`."""
    requests: dict[str, str] = {"cpu": "100m", "memory": "64Mi"}
    limits: dict[str, str] = {"memory": "64Mi"}
    if gpus:
        requests[resource] = limits[resource] = str(gpus)
    return {"name": "main", "image": IMAGE, "resources": {"requests": requests, "limits": limits}, **extra}


def pod_template(
    gpus: int = 0, resource: str = "nvidia.com/gpu", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    # a hollow node ends a deleted pod at once; the grace period is the API's wait before it may
    return {
        "metadata": {"labels": dict(labels or {})},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container(gpus, resource)]},
    }


def job(
    name: str,
    gpus: int = 0,
    resource: str = "nvidia.com/gpu",
    pods: int = 1,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    template = pod_template(gpus, resource)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template},
    }


def deployment(name: str, gpus: int = 0, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = pod_template(gpus, labels={"app": name})
    template["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 10}
    template["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def statefulset(name: str, gpus: int = 0, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = deployment(name, gpus, replicas, labels)
    body["kind"] = "StatefulSet"
    body["spec"]["serviceName"] = name
    return body


def wait_for(
    what: str, attempt: Callable[[], T | None], timeout: float = 60.0, explain: Callable[[], str] = lambda: ""
) -> T:
    """The first non-None answer of `attempt()` within `timeout` s; else fail with `what` and `explain()`."""
    try:
        return retry(what, attempt, timeout, interval=0.3)
    except ClusterError:
        raise AssertionError(f"not within {timeout:.0f} s: {what}\n{explain()}") from None


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return cluster.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)


def running_pods(
    cluster: Cluster, namespace: str, selector: str, count: int, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """Wait until `count` pods matching `selector` are Running; return them."""

    def attempt() -> list[dict[str, Any]] | None:
        found = [p for p in pods(cluster, namespace, selector) if p["status"].get("phase") == "Running"]
        return found if len(found) >= count else None

    return wait_for(
        f"{count} Running pods {selector} in {namespace}",
        attempt,
        timeout,
        lambda: (
            "pods: "
            + dumps(
                [
                    (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"))
                    for p in pods(cluster, namespace, selector)
                ]
            )
            + "\nevents: "
            + dumps(event_lines(cluster, namespace))
        ),
    )


def event_lines(cluster: Cluster, namespace: str) -> list[str]:
    return [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']} {e['reason']}: {e.get('message', '')}"[:400]
        for e in cluster.events(namespace)
    ]


def workload_of(cluster: Cluster, namespace: str, job_name: str) -> dict[str, Any] | None:
    """Kueue's Workload of the Job `job_name` (owned by it), or None yet."""
    for item in cluster.items(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{namespace}/workloads"):
        if any(o.get("name") == job_name for o in item["metadata"].get("ownerReferences", [])):
            return item
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def is_true(obj: dict[str, Any] | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


def node_labels(cluster: Cluster, name: str) -> dict[str, str]:
    return dict(cluster.get(f"/api/v1/nodes/{name}")["metadata"].get("labels", {}))


def delete(cluster: Cluster, path: str) -> None:
    """Delete with background propagation (the pods go with their owner), ignoring a 404."""
    answer = cluster.env.request("DELETE", path, {"propagationPolicy": "Background"})
    assert answer.ok or answer.status == 404, f"DELETE {path}: {answer.status} {answer.message}"
