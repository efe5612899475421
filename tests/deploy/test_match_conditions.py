"""The mutating webhook's matchConditions, run with CEL as the apiserver would run them.

An expression that errors rejects the request under failurePolicy Fail (as the apiserver does), so
each condition must evaluate to a bool, never an error, on every kind the webhook rules
can send — including half-filled objects (mutating webhooks run before schema validation).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cel_expr_python import cel

from tests.deploy.conftest import one
from tests.support import cpu_pod, gpu_pod
from webhook.engine.resources import DEFAULT_ACCELERATORS


@pytest.fixture(scope="module")
def conditions(rendered: dict) -> dict[str, Any]:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    out = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for condition in one(rendered["enforce"], kind)["webhooks"][0]["matchConditions"]:
            out[(kind[:4].lower(), condition["name"])] = (env, env.compile(condition["expression"]))
    return out


def evaluate(conditions: dict, which: tuple[str, str], obj: Any, operation: str = "CREATE", old: Any = None) -> bool:
    env, program = conditions[which]
    result = program.eval(env.Activation({"object": obj, "oldObject": old, "request": {"operation": operation}}))
    assert result.type() != cel.Type.ERROR, f"{which[1]} errors on {obj.get('kind')}: {result.value()}"
    assert result.type() == cel.Type.BOOL
    return result.value()


def sends(conditions: dict, obj: Any, operation: str = "CREATE", old: Any = None) -> bool:
    """True if every condition of the mutating webhook passes, i.e. the apiserver calls us."""
    return all(evaluate(conditions, which, obj, operation, old) for which in conditions if which[0] == "muta")


GPU_SPEC = gpu_pod()["spec"]
CPU_SPEC = cpu_pod()["spec"]


def template(spec: dict) -> dict:
    return {"metadata": {"labels": {"app": "x"}}, "spec": copy.deepcopy(spec)}


def workloads(spec: dict) -> dict[str, dict]:
    """One object of every kind the webhook rules select, with `spec` as its (only GPU) pod spec."""
    cpu = template(CPU_SPEC)
    simple = {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template(spec)}
    return {
        "Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": copy.deepcopy(spec)},
        **{k: {"apiVersion": "apps/v1", "kind": k, "spec": simple} for k in ("Deployment", "StatefulSet", "DaemonSet")},
        "Job": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": template(spec)}},
        "CronJob": {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template(spec)}}},
        },
        "JobSet": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "spec": {
                "replicatedJobs": [
                    {"name": "driver", "template": {"spec": {"template": cpu}}},
                    {"name": "workers", "template": {"spec": {"template": template(spec)}}},
                ]
            },
        },
        "PyTorchJob": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "spec": {"pytorchReplicaSpecs": {"Master": {"template": cpu}, "Worker": {"template": template(spec)}}},
        },
        "TFJob": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "spec": {"runPolicy": {}, "tfReplicaSpecs": {"Worker": {"replicas": 2, "template": template(spec)}}},
        },
        "MPIJob": {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "spec": {
                "slotsPerWorker": 1,
                "mpiReplicaSpecs": {"Launcher": {"template": cpu}, "Worker": {"template": template(spec)}},
            },
        },
        "RayCluster": {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "spec": {
                "headGroupSpec": {"template": cpu},
                "workerGroupSpecs": [{"groupName": "g", "template": template(spec)}],
            },
        },
        "RayJob": {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "spec": {"entrypoint": "python x.py", "rayClusterSpec": {"headGroupSpec": {"template": template(spec)}}},
        },
        "LeaderWorkerSet": {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "spec": {"leaderWorkerTemplate": {"leaderTemplate": cpu, "workerTemplate": template(spec)}},
        },
    }


@pytest.mark.parametrize("kind", list(workloads(GPU_SPEC)))
def test_gpu_objects_of_every_kind_are_sent(conditions: dict, kind: str) -> None:
    assert sends(conditions, workloads(GPU_SPEC)[kind])


@pytest.mark.parametrize("kind", list(workloads(CPU_SPEC)))
def test_cpu_objects_of_every_kind_are_not_sent(conditions: dict, kind: str) -> None:
    assert not sends(conditions, workloads(CPU_SPEC)[kind])


@pytest.mark.parametrize("resource", [r.replace("*", "1g.10gb") for r in DEFAULT_ACCELERATORS])
def test_every_default_accelerator_resource_is_recognised(conditions: dict, resource: str) -> None:
    """Keeps the CEL list in step with webhook/engine/resources.py."""
    for field in ("limits", "requests"):
        pod = cpu_pod()
        pod["spec"]["containers"][0]["resources"] = {field: {resource: "1"}}
        assert sends(conditions, pod), f"{resource} in {field}"


def test_gpu_init_container_counts(conditions: dict) -> None:
    pod = cpu_pod()
    pod["spec"]["initContainers"] = copy.deepcopy(GPU_SPEC["containers"])
    assert sends(conditions, pod)


def test_cpu_resources_alone_are_not_sent(conditions: dict) -> None:
    pod = cpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpux": "1"}}
    assert not sends(conditions, pod)


HALF_FILLED = [
    {"kind": "Deployment", "spec": {}},
    {"kind": "Deployment", "spec": {"template": {}}},
    {"kind": "Job", "spec": {"template": {"spec": {}}}},
    {"kind": "CronJob", "spec": {"jobTemplate": {}}},
    {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {}}}}},
    {"kind": "JobSet", "spec": {}},
    {"kind": "JobSet", "spec": {"replicatedJobs": [{"name": "a"}, {"template": {"spec": {}}}]}},
    {"kind": "PyTorchJob", "spec": {}},
    {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Worker": {}}}},
    {"kind": "RayJob", "spec": {}},
    {"kind": "RayJob", "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "g"}]}}},
    {"kind": "RayCluster", "spec": {"headGroupSpec": {}}},
    {"kind": "LeaderWorkerSet", "spec": {}},
    {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"workerTemplate": {}}}},
    {"kind": "Pod", "spec": {}},
    {"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {}}]}},
    {"kind": "Pod"},
    {"kind": "SomethingNew", "spec": {"template": {"spec": {"containers": []}}}},
]


@pytest.mark.parametrize("obj", HALF_FILLED, ids=lambda o: f"{o['kind']}-{sorted(o.get('spec', {}))}")
def test_half_filled_objects_never_error(conditions: dict, obj: dict) -> None:
    for which in conditions:
        evaluate(conditions, which, obj)  # asserts: a bool, not an error
    assert not sends(conditions, obj)


def test_update_that_leaves_every_rule_input_alone_is_not_sent(conditions: dict) -> None:
    """A finalizer or annotation change is skipped (a webhook outage must not keep a pod from being
    deleted); a label change is sent (gpu-cost-labels and kueue-priority-class-allowed act on labels)."""
    old = gpu_pod()
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["example.com/keep"]
    new["metadata"]["annotations"] = {"example.com/note": "x"}
    assert not sends(conditions, new, "UPDATE", old)
    assert not evaluate(conditions, ("vali", "rule-inputs-changed"), new, "UPDATE", old)
    relabelled = copy.deepcopy(new)
    relabelled["metadata"]["labels"] = {"team": "other"}
    assert sends(conditions, relabelled, "UPDATE", old)
    assert evaluate(conditions, ("vali", "rule-inputs-changed"), relabelled, "UPDATE", old)
    new["spec"]["activeDeadlineSeconds"] = 60
    assert sends(conditions, new, "UPDATE", old)
    assert evaluate(conditions, ("vali", "rule-inputs-changed"), new, "UPDATE", old)


def test_validating_webhook_sees_cpu_pods(conditions: dict) -> None:
    for obj in workloads(CPU_SPEC).values():
        assert all(evaluate(conditions, which, obj) for which in conditions if which[0] == "vali")


def dra_spec(claims: list[dict[str, Any]]) -> dict[str, Any]:
    spec = copy.deepcopy(CPU_SPEC)
    spec["resourceClaims"] = claims
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]} if claims else {}
    return spec


@pytest.mark.parametrize("kind", list(workloads(CPU_SPEC)))
def test_dra_objects_of_every_kind_are_sent(conditions: dict, kind: str) -> None:
    """DRA (GA in 1.34): the apiserver cannot see a claim's DeviceClass, so every pod spec with claims is sent."""
    spec = dra_spec([{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}])
    assert sends(conditions, workloads(spec)[kind])
    assert not sends(conditions, workloads(dra_spec([]))[kind])  # an empty list asks for nothing
