"""PriorityClasses, RuntimeClasses, DeviceClasses and GPUPolicyExceptions in an audit's input are context, as
Namespaces are, not audited objects; and audit predicts no priority class the cluster does not have.

The live webhook sets priorityClassName only to a class its PriorityClass watch lists (the apiserver's
Priority plugin refuses a pod naming a class that does not exist: "no PriorityClass with name ... was
found"): priority-class-by-workload's `priorityClasses != null && class in priorityClasses`. Audit reads
the PriorityClasses in its input (or the cluster's, with --cluster) the same way.
"""

from __future__ import annotations

import json

from tests.audit.conftest import PACK_RULES

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm, namespace: team-a}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm:0.5
          resources:
            requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
            limits: {memory: 16Gi, nvidia.com/gpu: "1"}
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"
CONTEXT = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gpu-critical}
value: 100000
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec: {}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {name: lab, namespace: team-a}
spec:
  rules: [gpu-toleration]
  reason: the lab's nodes are untainted
"""


def audited(run, tmp_path, *documents: str) -> dict:
    manifest = tmp_path / "in.yaml"
    manifest.write_text("---\n".join(documents))
    _, out, _ = run(str(manifest), "--rules", PACK_RULES, "-o", "json", "--fail-on", "never")
    return json.loads(out)


def patch_paths(report: dict) -> list[str]:
    (obj,) = report["objects"]
    return [operation["path"] for operation in obj.get("patch", [])]


def test_context_kinds_are_not_audited_objects(run, tmp_path):
    report = audited(run, tmp_path, NAMESPACE, CONTEXT, DEPLOYMENT)
    assert [o["kind"] for o in report["objects"]] == ["Deployment"]


def test_a_class_the_input_has_is_predicted_one_it_lacks_is_not(run, tmp_path):
    with_class = patch_paths(audited(run, tmp_path, NAMESPACE, CONTEXT, DEPLOYMENT))
    assert "/spec/template/spec/priorityClassName" in with_class
    without = patch_paths(audited(run, tmp_path, NAMESPACE, DEPLOYMENT))
    assert "/spec/template/spec/priorityClassName" not in without and without  # the rest is still predicted
    other = CONTEXT.replace("gpu-critical", "something-else")
    assert "/spec/template/spec/priorityClassName" not in patch_paths(
        audited(run, tmp_path, NAMESPACE, other, DEPLOYMENT)
    )
