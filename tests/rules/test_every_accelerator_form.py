"""A GPU asked for in any accelerator form is a GPU to every rule of the pack, in every template kind.

Differential: the same workload asking for `nvidia.com/gpu: 2` and for the same devices in another
form must get the same outcome from each rule (result and whether it blocks), in a tenant namespace
that requires Kueue queues and in a plain one. The forms, from their sources:

- `deviceclass.resource.kubernetes.io/gpu.nvidia.com: 2`: a DRA extended resource (KEP-5004,
  DRAExtendedResource, beta and on in 1.36; core/v1 ResourceDeviceClassPrefix): the scheduler claims
  two devices of the class;
- `volcano.sh/gpu-number: 2` (Volcano GPU sharing, whole cards) and `volcano.sh/vgpu-number: 2` with
  `volcano.sh/vgpu-memory` (Volcano vGPU): volcano-sh/volcano pkg/scheduler/api;
- a container with only HAMi's `nvidia.com/gpumem` (Project-HAMi/HAMi): one shared GPU, compared with
  `nvidia.com/gpu: 1`.

Rules that read the resource name itself differ by design and are left out, each with its reason.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.rules.rulekit import namespace, run
from webhook.engine import RuleSet

# rules that key on the resource name itself, not on the count
BY_NAME = {
    # byResourcePrefix: nvidia.com/gpu pods get the NVIDIA node affinity, toleration and the
    # single-strategy MIG affinity (device-plugin nodes); a DRA or Volcano resource names no such prefix
    "gpu-node-affinity",
    "gpu-toleration",
    "mig-single-strategy-placement",
    # the time-sliced and shared resource names are denied in production by name
    "no-timeslicing-in-production",
}

FORMS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "DRA extended resource": (
        {"nvidia.com/gpu": "2"},
        {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"},
    ),
    "Volcano whole cards": ({"nvidia.com/gpu": "2"}, {"volcano.sh/gpu-number": "2"}),
    "Volcano vGPUs": ({"nvidia.com/gpu": "2"}, {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4096"}),
    "HAMi memory share": ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpumem": "3000"}),
}


def pod_spec(accelerators: dict[str, str], **extra: Any) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "16Gi", **accelerators}
    spec: dict[str, Any] = {
        "priority": 0,
        "containers": [
            {"name": "main", "image": "cuda:12", "resources": {"requests": dict(limits), "limits": dict(limits)}},
            {"name": "proxy", "image": "envoy:1", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    spec.update(extra)
    return spec


def workload(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": "w", "namespace": "team-a"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    template = {"metadata": {"labels": {"app": "w"}}, "spec": spec}
    if kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
        }
    if kind == "Job":
        template["spec"] = {**spec, "restartPolicy": "Never"}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": template}}
    if kind == "PyTorchJob":
        replica = {"replicas": 2, "template": template}
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": metadata,
            "spec": {"pytorchReplicaSpecs": {"Master": copy.deepcopy(replica), "Worker": replica}},
        }
    raise AssertionError(kind)


NAMESPACES = {
    "tenant, queues required": namespace(
        "team-a", labels={"gpu-webhook.io/tenant": "true", "gpu-webhook.io/queue-required": "true"}
    ),
    "plain": namespace("team-a"),
}


def outcomes(pack: RuleSet, obj: dict[str, Any], ns: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    decision = run(pack, obj, ns)
    return {o.rule: (str(o.result), o.blocks) for o in decision.outcomes() if o.rule not in BY_NAME}


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "Job", "PyTorchJob"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("where", list(NAMESPACES))
def test_every_rule_sees_the_same_gpu_pod(pack: RuleSet, kind: str, form: str, where: str) -> None:
    plugin, other = FORMS[form]
    for extra in ({}, {"hostIPC": True}):  # a clean pod, and one a GPU-only rule denies in tenants
        reference = outcomes(pack, workload(kind, pod_spec(plugin, **extra)), NAMESPACES[where])
        seen = outcomes(pack, workload(kind, pod_spec(other, **extra)), NAMESPACES[where])
        assert seen == reference
        if where.startswith("tenant"):  # the GPU rules act: the comparison is not of skips
            assert reference["kueue-queue-required"] == ("fail", True)
            assert reference["no-host-namespaces-on-gpu-pods"] == (("fail", True) if extra else ("pass", False))
            assert reference["cpu-pods-off-gpu-nodes"][0] == "skip"  # a GPU pod may tolerate GPU taints


def test_the_comparison_can_fail(pack: RuleSet) -> None:
    """A resource that is no accelerator is a CPU pod: the same comparison then differs."""
    ns = NAMESPACES["tenant, queues required"]
    reference = outcomes(pack, workload("Pod", pod_spec({"nvidia.com/gpu": "2"})), ns)
    cpu = outcomes(pack, workload("Pod", pod_spec({"deviceclass.resource.kubernetes.io/dranet-ib": "2"})), ns)
    assert cpu != reference
