"""DRA-aware accelerator detection, from the resource.k8s.io/v1 API shape.

Types: k8s.io/api/resource/v1 (DeviceRequest{name, exactly: ExactDeviceRequest{deviceClassName,
allocationMode ExactCount|All, count default 1}, firstAvailable: []DeviceSubRequest}) and core/v1
PodSpec.resourceClaims[] = {name, resourceClaimName | resourceClaimTemplateName},
Container.resources.claims[] = {name, request}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.engine import AdmissionInput, evaluate, load_rules

RULES = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: gpu-pods}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  validate:
    expression: "false"
    messageExpression: "string(gpuCount(podSpec)) + ':' + containers.map(c, c.name + '=' + string(containerGpuCount(c))).join(',')"
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: cpu-pods}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE], gpu: false}
  validate: {expression: "false", message: cpu}
"""


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def pod(claims: list[dict[str, Any]], containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "t"},
        "spec": {"resourceClaims": claims, "containers": containers},
    }


def verdict(tmp_path: Path, obj: dict[str, Any], objects: list[dict[str, Any]] | None, config: str = "") -> str:
    (tmp_path / "r.yaml").write_text(RULES + config)
    decision = evaluate(load_rules(tmp_path).require(), AdmissionInput.offline(obj, cluster_objects=objects))
    return "; ".join(f"{w.rule} {w.message}" for w in decision.warnings)


TEMPLATES = [
    template(
        "train",
        {"name": "big", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}},
        {"name": "small", "exactly": {"deviceClassName": "mig.nvidia.com"}},
        {"name": "nic", "exactly": {"deviceClassName": "dra.net", "count": 2}},
    ),
    template(
        "either",
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 2},
                {"name": "b", "deviceClassName": "mig.nvidia.com", "count": 3},
            ],
        },
    ),
    template("nic", {"name": "nic", "exactly": {"deviceClassName": "dra.net"}}),
]


def test_claim_devices_count_per_pod_and_per_container(tmp_path: Path) -> None:
    obj = pod(
        [{"name": "t", "resourceClaimTemplateName": "train"}, {"name": "e", "resourceClaimTemplateName": "either"}],
        [
            {"name": "all", "resources": {"claims": [{"name": "t"}]}},  # the claim's 5 accelerators (not the NIC)
            {"name": "one", "resources": {"claims": [{"name": "t", "request": "small"}]}},
            {"name": "alt", "resources": {"claims": [{"name": "e"}]}},  # firstAvailable: the larger alternative
        ],
    )
    # devices are the pod's once, however many containers share them: 4 + 1 + 3
    assert verdict(tmp_path, obj, TEMPLATES) == "gpu-pods 8:all=5,one=1,alt=3"


def test_a_claim_of_another_class_is_no_gpu(tmp_path: Path) -> None:
    obj = pod(
        [{"name": "n", "resourceClaimTemplateName": "nic"}], [{"name": "c", "resources": {"claims": [{"name": "n"}]}}]
    )
    assert verdict(tmp_path, obj, TEMPLATES) == "cpu-pods cpu"


def test_an_unresolved_claim_counts_as_an_accelerator(tmp_path: Path) -> None:
    """Safe default: rules for GPU pods apply, `gpu: false` rules do not (dra-pod-claims-resolvable denies it)."""
    obj = pod([{"name": "x", "resourceClaimTemplateName": "unknown"}], [{"name": "c"}])
    assert verdict(tmp_path, obj, TEMPLATES) == "gpu-pods 0:c=0"
    assert verdict(tmp_path, obj, None) == "gpu-pods 0:c=0"  # a door without claim context at all


def test_accelerator_device_classes_are_configuration(tmp_path: Path) -> None:
    config = """---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
spec:
  acceleratorDeviceClasses: ["dra.*"]
"""
    obj = pod(
        [{"name": "n", "resourceClaimTemplateName": "nic"}], [{"name": "c", "resources": {"claims": [{"name": "n"}]}}]
    )
    assert verdict(tmp_path, obj, TEMPLATES, config) == "gpu-pods 1:c=1"
    gpu = pod([{"name": "t", "resourceClaimTemplateName": "either"}], [{"name": "c"}])
    assert verdict(tmp_path, gpu, TEMPLATES, config) == "cpu-pods cpu"  # gpu.nvidia.com no longer listed
