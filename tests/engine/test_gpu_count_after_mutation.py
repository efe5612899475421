"""The per-target GPU count is cached per request; a mutation that changes containers must refresh it."""

from __future__ import annotations

from pathlib import Path

from tests.support import ADDS_A_GPU_INIT_CONTAINER, cpu_pod, gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, evaluate

RULES = ADDS_A_GPU_INIT_CONTAINER + """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: b-tolerate}
spec:
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  mutate:
    - addToleration: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: c-sees-gpus}
spec:
  action: Warn
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  validate:
    expression: "false"
    message: "GPU pod"
"""


def test_gpu_count_follows_a_mutation_that_adds_a_gpu_container(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, RULES)
    decision = evaluate(ruleset, AdmissionInput(object=cpu_pod(), namespace="team-a"))
    assert [v.rule for v in decision.warnings] == ["c-sees-gpus"]
    paths = [op["path"] for op in decision.patch]
    assert paths == ["/spec/initContainers", "/spec/tolerations"]  # b saw the GPU that a added


def test_unrelated_edits_keep_the_count(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, RULES)
    pod = gpu_pod(initContainers=[{"name": "setup", "image": "busybox"}])  # merge adds nothing here
    decision = evaluate(ruleset, AdmissionInput(object=pod, namespace="team-a"))
    assert [op["path"] for op in decision.patch] == ["/spec/tolerations"]
    assert [v.rule for v in decision.warnings] == ["c-sees-gpus"]
