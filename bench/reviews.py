"""Realistic AdmissionReviews for the benchmarks, and generated rule sets for the scaling runs.

Objects are shaped like what users submit (env, volume mounts, probes, resources), so
parse and CEL costs are representative; sizes are reported next to each figure.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson

from bench import apiserver


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


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview shaped like the apiserver's."""
    api_version = obj["apiVersion"]
    group, _, version = api_version.rpartition("/")
    kind = obj["kind"]
    resource = {"group": group, "version": version, "resource": kind.lower() + "s"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": resource,
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": resource,
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "operation": operation,
            "userInfo": {"username": "alice@example.com", "uid": "1234", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# The named workloads every run uses; "mix" cycles through all of them.
WORKLOADS: dict[str, Any] = {
    "gpu-pod": lambda: pod(1, 1),
    "cpu-pod": lambda: pod(1, 0),
    "gpu-pod-10c": lambda: pod(10, 1),
    "gpu-pod-50c": lambda: pod(50, 1),
    "job": lambda: job(2, 1),
    "pytorchjob": lambda: pytorch_job(),
}


def bodies(workload: str, endpoint: str = "mutate") -> list[bytes]:
    """Serialised reviews for one workload (or every one for "mix"), each with its own uid.

    By default shaped as a kube-apiserver sends them to `endpoint` (bench/apiserver.py: defaulted,
    with managedFields, userInfo and options; the validating phase's object has been through the
    registry). A `plain-` prefix ("plain-gpu-pod", "plain-mix") gives the objects as users write
    them, the figures before issue 14.
    """
    plain = workload.startswith("plain-")
    name = workload.removeprefix("plain-")
    names = list(WORKLOADS) if name == "mix" else [name]
    if plain:
        return [orjson.dumps(review(WORKLOADS[n]())) for n in names for _ in range(4)]
    validating = endpoint == "validate"
    return [orjson.dumps(apiserver.review(WORKLOADS[n](), validating)) for n in names for _ in range(4)]


def namespace() -> dict[str, Any]:
    """The tenant Namespace every workload is created in, as the server's watch cache holds it."""
    return apiserver.namespace("team-a")


def write_generated_rules(directory: Path, total: int, matching: int) -> Path:
    """`matching` Pod rules that all match a GPU pod, plus `total - matching` rules for other kinds.

    The unrelated rules are as heavy as the matching ones (a CEL validation), so any cost
    they add would show; the (kind, operation) index is what should keep them free.
    """
    directory.mkdir(parents=True, exist_ok=True)
    documents = []
    for i in range(total):
        kind = "Pod" if i < matching else f"Widget{i % 50}"
        documents.append(
            f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: generated-{i}
spec:
  action: Warn
  match:
    kinds: [{kind}]
    operations: [CREATE, UPDATE]
    namespaces: {{exclude: [kube-system]}}
  validate:
    expression: "containers.all(c, !has(c.env) || c.env.size() < 100)"
    message: "too many variables"
"""
        )
    (directory / "generated.yaml").write_text("---\n".join(documents))
    return directory
