"""Decision.accelerators: what the object as received asks for, counted by the engine once.

The scheduler's arithmetic (k8s.io/component-helpers/resource PodRequests: a regular init
container's request is compared with the running containers', not added) plus the devices
of resolved DRA claims, summed over the object's pod specs; a mutation that adds a GPU
container does not change it (the object as the user sent it is what audit reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import ADDS_A_GPU_INIT_CONTAINER, cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules

ADDS_A_GPU = ADDS_A_GPU_INIT_CONTAINER + """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-sees-gpus}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  validate: {expression: "false", message: GPU pod}
"""
DEPLOYMENT_ONLY = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: deployments-only}
spec:
  autogen: false
  match: {kinds: [Deployment], operations: [CREATE]}
  validate: {expression: "true"}
"""
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "team-a"},
    "spec": {
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}
        }
    },
}


def _ruleset(tmp_path: Path, text: str) -> Any:
    (tmp_path / "rules.yaml").write_text(text)
    ruleset = load_rules(tmp_path).ruleset
    assert ruleset is not None
    return ruleset


def _gpu_container(name: str, gpus: int) -> dict[str, Any]:
    return {"name": name, "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


def test_counted_on_the_object_as_received(tmp_path: Path) -> None:
    ruleset = _ruleset(tmp_path, ADDS_A_GPU)
    decision = evaluate(ruleset, AdmissionInput.offline(cpu_pod()))
    assert [v.rule for v in decision.warnings] == ["b-sees-gpus"]  # the rule saw the added GPU...
    assert decision.accelerators == 0  # ...the user's pod asked for none
    assert evaluate(ruleset, AdmissionInput.offline(gpu_pod(gpus=3))).accelerators == 3


def test_the_scheduler_arithmetic_and_every_phase(tmp_path: Path) -> None:
    ruleset = _ruleset(tmp_path, ADDS_A_GPU)
    # an init container runs before the others: the pod needs max(4, 2), not 6
    pod = gpu_pod(gpus=2, initContainers=[_gpu_container("prepare", 4)])
    for phase in Phase:
        assert evaluate(ruleset, AdmissionInput.offline(pod), phase=phase, trace=False).accelerators == 4


def test_dra_claim_devices_count(tmp_path: Path) -> None:
    ruleset = _ruleset(tmp_path, ADDS_A_GPU)
    pod = cpu_pod(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}])
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    assert evaluate(ruleset, AdmissionInput.offline(pod, cluster_objects=[TEMPLATE])).accelerators == 2


def test_summed_over_templates_even_without_a_rule_for_the_kind(tmp_path: Path) -> None:
    ruleset = _ruleset(tmp_path, DEPLOYMENT_ONLY)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {"replicas": 4, "template": {"spec": {"containers": [_gpu_container("pytorch", gpus)]}}}
                for role, gpus in (("Master", 1), ("Worker", 8))
            }
        },
    }
    # per pod spec, not times replicas: the object's own arithmetic, as audit reported it before
    assert evaluate(ruleset, AdmissionInput.offline(job)).accelerators == 9
