"""The whole pack on every manifest in examples/: patches apply, and applying twice equals once."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.rules.rulekit import EXAMPLES, PACK_PRIORITY_CLASSES, example, namespace, run

# a namespace that switches on every namespace-driven rule
CONTEXT = {
    "labels": {
        "team": "llm",
        "cost-center": "cc-4711",
        "gpu-webhook.io/tenant": "true",
        "gpu-webhook.io/queue-required": "true",
    },
    "annotations": {"gpu-webhook.io/queue": "research", "gpu-webhook.io/allowed-mig-profiles": "1g.10gb"},
}
MANIFESTS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("manifest", MANIFESTS)
@pytest.mark.parametrize("with_context", [True, False], ids=["namespace-known", "namespace-unknown"])
def test_patch_applies_and_is_idempotent(pack, manifest, with_context):
    original = example(manifest)
    ns = namespace(original["metadata"]["namespace"], **CONTEXT) if with_context else None
    decision = run(pack, copy.deepcopy(original), ns)
    assert not decision.errors, decision.errors
    patched = jsonpatch.apply_patch(original, decision.patch)  # raises if any operation does not apply
    if decision.patch:
        assert patched == decision.mutated
    again = run(pack, copy.deepcopy(patched), ns)
    assert again.patch == [], f"second pass still patches: {again.patch}"
    assert not again.errors


CPU_ONLY_TEMPLATES = {
    "tfjob-resnet.yaml": "/spec/tfReplicaSpecs/PS/",
    "mpijob-horovod.yaml": "/spec/mpiReplicaSpecs/Launcher/",
    "rayjob-batch-inference.yaml": "/spec/rayClusterSpec/headGroupSpec/",
    "jobset-llm-pretrain.yaml": "/spec/replicatedJobs/0/",
}


@pytest.mark.parametrize(("manifest", "cpu_only"), sorted(CPU_ONLY_TEMPLATES.items()))
def test_patch_never_touches_a_cpu_only_template(pack, manifest, cpu_only):
    """Ray heads, TFJob parameter servers, MPI launchers and JobSet drivers request no GPU: no GPU patch
    touches them; in a tenant namespace they only get NVIDIA_VISIBLE_DEVICES=void (visible-devices-void)."""
    original = example(manifest)
    decision = run(pack, copy.deepcopy(original), namespace(original["metadata"]["namespace"], **CONTEXT))
    assert decision.patch
    touched = [op for op in decision.patch if op["path"].startswith(cpu_only)]
    void = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    assert all(op["path"].endswith(("/env", "/env/-")) for op in touched), touched
    assert all(op["value"] in (void, [void]) for op in touched), touched


def test_pod_of_a_patched_deployment_needs_no_further_patch(pack):
    """The pod a ReplicaSet makes from the patched template, as the apiserver sends it, is already compliant."""
    ns = namespace("ml-serving", **CONTEXT)
    deployment = example("deployment-vllm-serving.yaml")
    mutated = run(pack, copy.deepcopy(deployment), ns).mutated
    template = mutated["spec"]["template"]
    # Kueue's Deployment webhook copies the Deployment's queue label into the pod template
    # (kueue site docs, tasks/run/deployment.md); the ReplicaSet's pods carry it.
    template["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = mutated["metadata"]["labels"][
        "kueue.x-k8s.io/queue-name"
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "generateName": "vllm-mistral-7b-6d5f7c9b8-",
            "namespace": "ml-serving",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-mistral-7b-6d5f7c9b8", "controller": True}
            ],
        },
        "spec": {**template["spec"], "priority": 1000000},  # resolved by the Priority plugin
    }
    decision = run(pack, pod, ns)
    assert decision.patch == []
    assert decision.allowed


def test_labelled_bare_pod_converges(pack):
    """priorityClassName plus removal of the resolved priority, then nothing on reinvocation."""
    ns = namespace("ml-serving", **CONTEXT)
    pod = example("pod-notebook.yaml")
    pod["metadata"]["namespace"] = "ml-serving"
    pod["metadata"]["labels"]["gpu-webhook.io/workload-type"] = "serving"
    pod["spec"]["priority"] = 0
    decision = run(pack, copy.deepcopy(pod), ns, priority_classes=PACK_PRIORITY_CLASSES)
    assert {"op": "remove", "path": "/spec/priority"} in decision.patch
    patched = jsonpatch.apply_patch(pod, decision.patch)
    assert patched["spec"]["priorityClassName"] == "gpu-critical" and "priority" not in patched["spec"]
    patched["spec"]["priority"] = 1000000  # the Priority plugin runs again after our patch
    assert run(pack, patched, ns, priority_classes=PACK_PRIORITY_CLASSES).patch == []
