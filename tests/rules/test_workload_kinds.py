"""Every workload kind of DESIGN §4, sent as its examples/ manifest: patch paths and messages name the template."""

from __future__ import annotations

import pytest

from tests.rules.rulekit import example, namespace, run
from webhook.engine.workloads import UNMUTATED_KINDS

# manifest -> (target description, path to the pod spec) for each template that requests GPUs
GPU_TEMPLATES: dict[str, list[tuple[str, str]]] = {
    "pod-notebook.yaml": [("pod notebook-alice", "/spec")],
    "deployment-vllm-serving.yaml": [("pod template of Deployment vllm-mistral-7b", "/spec/template/spec")],
    "statefulset-triton.yaml": [("pod template of StatefulSet triton", "/spec/template/spec")],
    "daemonset-gpu-burn-in.yaml": [("pod template of DaemonSet gpu-burn-in", "/spec/template/spec")],
    "replicaset-embedder.yaml": [("pod template of ReplicaSet embedder-6d5f7c9b8", "/spec/template/spec")],
    "job-finetune.yaml": [("pod template of Job lora-finetune", "/spec/template/spec")],
    "cronjob-nightly-eval.yaml": [("pod template of CronJob nightly-eval", "/spec/jobTemplate/spec/template/spec")],
    "jobset-llm-pretrain.yaml": [
        ("replicated job workers of JobSet llm-pretrain", "/spec/replicatedJobs/1/template/spec/template/spec")
    ],
    "pytorchjob-llama2.yaml": [
        ("replica Master of PyTorchJob llama2-training", "/spec/pytorchReplicaSpecs/Master/template/spec"),
        ("replica Worker of PyTorchJob llama2-training", "/spec/pytorchReplicaSpecs/Worker/template/spec"),
    ],
    "tfjob-resnet.yaml": [("replica Worker of TFJob resnet50", "/spec/tfReplicaSpecs/Worker/template/spec")],
    "mpijob-horovod.yaml": [("replica Worker of MPIJob horovod-bert", "/spec/mpiReplicaSpecs/Worker/template/spec")],
    "rayjob-batch-inference.yaml": [
        ("worker group a100 of RayJob batch-inference", "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec"),
        ("worker group l4 of RayJob batch-inference", "/spec/rayClusterSpec/workerGroupSpecs/1/template/spec"),
    ],
    "raycluster-interactive.yaml": [
        ("head group of RayCluster interactive", "/spec/headGroupSpec/template/spec"),
        ("worker group gpu-workers of RayCluster interactive", "/spec/workerGroupSpecs/0/template/spec"),
    ],
    "leaderworkerset-llama-405b.yaml": [
        ("leader template of LeaderWorkerSet llama-405b", "/spec/leaderWorkerTemplate/leaderTemplate/spec"),
        ("worker template of LeaderWorkerSet llama-405b", "/spec/leaderWorkerTemplate/workerTemplate/spec"),
    ],
}


def test_every_example_is_covered():
    from tests.rules.rulekit import EXAMPLES

    assert {p.name for p in EXAMPLES.glob("*.yaml")} == set(GPU_TEMPLATES)


@pytest.mark.parametrize("manifest", sorted(GPU_TEMPLATES))
def test_mutations_point_into_each_gpu_template(rule_pack, manifest):
    """The toleration reaches every GPU template and no CPU-only one (a Ray head, a TFJob PS), of every
    kind the webhook mutates (not ReplicaSets: a Deployment's controller would replace a mutated one)."""
    obj = example(manifest)
    decision = run(rule_pack("gpu-toleration"), obj)
    expected = GPU_TEMPLATES[manifest] if obj["kind"] not in UNMUTATED_KINDS else []
    paths = {op["path"].removesuffix("/-") for op in decision.patch}
    assert paths == {spec + "/tolerations" for _, spec in expected}
    assert {t.target for t in decision.trace if t.result == "mutated"} == {d for d, _ in expected}


@pytest.mark.parametrize("manifest", sorted(GPU_TEMPLATES))
def test_denials_name_the_template(rule_pack, manifest):
    """A ceiling of one GPU per pod: each template asking for more is denied by its own name."""
    obj = example(manifest)
    ns = namespace(obj["metadata"]["namespace"], annotations={"gpu-webhook.io/max-gpus-per-pod": "0"})
    decision = run(rule_pack("gpu-per-pod-ceiling"), obj, ns)
    assert not decision.allowed
    assert sorted(v.target for v in decision.violations) == sorted(d for d, _ in GPU_TEMPLATES[manifest])
    for violation in decision.violations:
        assert violation.message.startswith(violation.target + " requests ")
        assert violation.message.endswith("at most 0 per pod are allowed in this namespace")


def test_pytorchjob_worker_denial_names_container_and_fix(pack):
    """The manifest's own mistake, through the whole pack: the Worker replica forgot memory and CPU."""
    obj = example("pytorchjob-llama2.yaml")
    decision = run(pack, obj, namespace("ml-research"))
    assert decision.denial_message == (
        "[gpu-container-resources] replica Worker of PyTorchJob llama2-training: container pytorch requests GPUs "
        "but sets no resources.requests.cpu, resources.requests.memory, resources.limits.memory; "
        "size them for model loading"
    )


def test_top_level_rules_see_the_job_object_not_its_templates(rule_pack):
    """Kueue labels live on the job object: a rule listing job kinds targets the object itself."""
    obj = example("mpijob-horovod.yaml")
    decision = run(
        rule_pack("kueue-queue-name"), obj, namespace("ml-research", annotations={"gpu-webhook.io/queue": "q"})
    )
    assert decision.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "q"}},
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}},  # MPIJob.Suspend() in Kueue
    ]
    assert [t.target for t in decision.trace] == ["MPIJob horovod-bert"]
