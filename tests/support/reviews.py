"""AdmissionReviews shaped like the apiserver's, and the objects they carry.

Two kinds of objects: small ones for tests that check one thing (`gpu_pod`, `cpu_pod`), and
realistic ones for load, attacks and the benchmarks (`pod`, `job`, `pytorch_job`, `heavy_pod`):
containers with env, probes, volume mounts and resources, so parse and CEL costs are
representative. `make_review` wraps any object in the request a webhook gets; `review` is the
request of the tenant the benchmarks and the attack harness play (a user in
`system:authenticated` only). The objects as the apiserver has defaulted them by the time a
webhook sees them (managedFields, the built-in admission plugins' edits) are in
tests/support/apiserver.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

MIB = 1024 * 1024


def make_review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
    username: str = "alice@example.com",
    groups: Sequence[str] = ("system:authenticated", "team-a"),
) -> dict[str, Any]:
    """An AdmissionReview shaped like the apiserver's (fields as kube-apiserver 1.3x sends them)."""
    subject = obj if obj is not None else old
    assert subject is not None
    api_version = subject.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    kind = subject["kind"]
    resource = kind.lower() + "s"
    namespace = namespace or subject.get("metadata", {}).get("namespace", "default")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": subject.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": username, "uid": "1234", "groups": list(groups)},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.capitalize()}Options"},
        },
    }


def gpu_pod(name: str = "train", gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            **spec,
        },
    }


def cpu_pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}], **spec},
    }


def container(index: int, gpus: int = 0, env: int = 6) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    }
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    return {
        "name": f"worker-{index}",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3" if gpus else "python:3.12-slim",
        "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
        "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(env)],
        "ports": [{"containerPort": 8080 + index, "protocol": "TCP"}],
        "resources": resources,
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/etc/train", "readOnly": True},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080 + index}, "periodSeconds": 10},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }


def pod_spec(containers: int, gpus: int) -> dict[str, Any]:
    return {
        "containers": [container(i, gpus if i == 0 else 0) for i in range(containers)],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
            {"name": "config", "configMap": {"name": "train-config"}},
        ],
        "restartPolicy": "Never",
        "serviceAccountName": "trainer",
        "priority": 0,
    }


def metadata(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "team-a",
        "labels": {"app": name, "team": "a", "kueue.x-k8s.io/queue-name": "team-a"},
        "annotations": {"owner": "alice@example.com"},
    }


def pod(containers: int = 1, gpus: int = 1) -> dict[str, Any]:
    """A training pod as a user writes it: `containers` realistic containers, the first with `gpus` GPUs."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata("train"), "spec": pod_spec(containers, gpus)}


def job(containers: int = 1, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata("train-job"),
        "spec": {
            "backoffLimit": 2,
            "template": {"metadata": {"labels": {"app": "train-job"}}, "spec": pod_spec(containers, gpus)},
        },
    }


def pytorch_job(workers: int = 4, gpus: int = 8) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"spec": pod_spec(1, gpus)},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata("llama2-training"),
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def heavy_pod(target_bytes: int = int(2.9 * MIB)) -> dict[str, Any]:
    """An apiserver-valid GPU pod of about target_bytes: 240 containers, each with many env entries."""
    containers = 240
    entry = len(b'{"name":"E000"},')
    env = max(1, (target_bytes // containers - 220) // entry)
    obj = pod()
    template = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [
        {
            "name": f"c{i}",
            "image": template["image"],
            "resources": template["resources"],
            "env": [{"name": f"E{j:03d}"} for j in range(env)],
        }
        for i in range(containers)
    ]
    return obj


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    """The request of the benchmarks' tenant: `make_review` for a user in `system:authenticated` only."""
    return make_review(obj, operation, groups=("system:authenticated",))
