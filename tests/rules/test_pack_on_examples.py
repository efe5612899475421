"""The whole pack on every manifest in examples/: patches apply, and applying twice equals once."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from rulekit import EXAMPLES, example, namespace, run

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
    """Ray heads, TFJob parameter servers, MPI launchers and JobSet drivers request no GPU: left alone."""
    original = example(manifest)
    decision = run(pack, copy.deepcopy(original), namespace(original["metadata"]["namespace"], **CONTEXT))
    assert decision.patch
    assert not [op for op in decision.patch if op["path"].startswith(cpu_only)]
